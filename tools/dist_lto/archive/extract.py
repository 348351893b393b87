"""A regular archive's members extracted into a new directory, each file created once.

Files are created relative to the staging directory with O_EXCL|O_NOFOLLOW, in
directories this run makes itself, and everything created is recorded (`Created`) so
that a failure at any later point removes it.
"""

from __future__ import annotations

import os
import stat

from dist_lto import TYPE_CHECKING, fsutil
from dist_lto.archive.member_names import (
    REJECTED_TYPES,
    UnsafeName,
    assign_paths,
    check_name_characters,
    decode_name,
    directories_of,
    member_error,
    safe_path,
)
from dist_lto.llvm.bitcode import is_bitcode

if TYPE_CHECKING:
    from dist_lto.archive.prepare import Outputs
    from dist_lto.archive.reader import RegularArchive
    from dist_lto.formats.manifest import Entry

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def extract_regular(
    archive_path: str, outputs: Outputs, made: Created, staging: str
) -> list[Entry]:
    """Extract every member of a regular archive into `staging`, the (new, empty) directory
    that becomes the objects directory."""
    from dist_lto.archive.reader import RegularArchive

    with RegularArchive(archive_path) as archive:
        members = archive.members
        names: list[str] = []
        safe: list[str] = []
        for position, member in enumerate(members):
            name = decode_name(member.name, archive_path, position)
            check_name_characters(archive_path, name, position)
            kind = REJECTED_TYPES.get(stat.S_IFMT(member.mode))
            if kind:
                problem = f"is {kind} (mode {member.mode:o}); only regular files are extracted"
                raise member_error(archive_path, name, position, problem)
            try:
                safe.append(safe_path(name))
            except UnsafeName as err:
                raise member_error(archive_path, name, position, f"name {err}") from None
            names.append(name)
        paths = assign_paths(safe)
        _extract(archive, paths, staging, outputs.objects_dir, made)
    prefix = "" if outputs.objects_from_manifest == "." else outputs.objects_from_manifest + "/"
    # Dict displays: calling the TypedDict costs more than the rest of the row.
    entries: list[Entry] = [
        {
            "name": name,
            "position": position,
            "path": prefix + path,
            "size": member.size,
            "bitcode": is_bitcode(member.head),
        }
        for position, (name, path, member) in enumerate(zip(names, paths, members, strict=True))
    ]
    return entries


class Created:
    """What this run created, in order, so a failure at any later point can remove it."""

    __slots__ = ("directories", "files")

    def __init__(self) -> None:
        self.directories: list[str] = []
        self.files: list[str] = []

    def remove(self) -> None:
        """Best effort: files first, then directories, deepest first."""
        for path in reversed(self.files):
            fsutil.remove_quietly(path)
        for path in reversed(self.directories):
            try:  # noqa: SIM105 (contextlib: see the imports)
                os.rmdir(path)
            except OSError:
                pass


def make_directories(path: str, made: Created) -> None:
    """`os.makedirs(path)`, recording each directory it creates."""
    missing: list[str] = []
    while path and not os.path.lexists(path):
        missing.append(path)
        path = os.path.dirname(path)
    for directory in reversed(missing):
        try:
            os.mkdir(directory)
        except FileExistsError:
            continue
        made.directories.append(directory)


def _extract(
    archive: RegularArchive, paths: list[str], staging: str, objects_dir: str, made: Created
) -> None:
    """Write each member to its path under `staging`, recording what was created; errors
    name the path in `objects_dir`, where the member is meant to be."""
    directories = sorted(directories_of(paths), key=lambda d: (d.count("/"), d))
    root = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    current = ""
    try:
        for current in directories:
            os.mkdir(current, 0o777, dir_fd=root)
            made.directories.append(os.path.join(staging, current))
        copy_to = archive.copy_to
        files = made.files
        for member, current in zip(archive.members, paths, strict=True):
            fd = os.open(current, _CREATE, 0o644, dir_fd=root)
            files.append(os.path.join(staging, current))
            try:
                copy_to(member, fd)
            finally:
                os.close(fd)
    except OSError as err:
        raise fsutil.write_failure(err, os.path.join(objects_dir, current)) from None
    finally:
        os.close(root)
