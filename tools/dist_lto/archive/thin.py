"""A thin archive's members listed where they are: nothing is copied.

The manifest spells each member relative to its own directory, resolved lexically,
and that must be the file the linker opens (`dirname(archive)/name`); a member that
differs (a symbolic link on the way) is refused. Each member's size and bitcode flag
come from the file itself.
"""

from __future__ import annotations

import os
import stat

from dist_lto import TYPE_CHECKING
from dist_lto.archive.ar_headers import read_thin_members
from dist_lto.archive.member_names import check_name_characters, decode_name, member_error
from dist_lto.llvm.bitcode import is_bitcode
from dist_lto.path_spelling import is_plain

if TYPE_CHECKING:
    from dist_lto.archive.prepare import Outputs
    from dist_lto.formats.manifest import Entry


def list_thin(archive_path: str, data: bytes, outputs: Outputs) -> list[Entry]:
    """List a thin archive's members where they are; nothing is copied."""
    names = read_thin_members(data, archive_path)
    manifest_dir = os.path.dirname(os.path.abspath(outputs.manifest))
    linker_base = os.path.dirname(archive_path)
    lexical_base = os.path.dirname(os.path.abspath(archive_path))
    # A plain name (relative, no empty, `.` or `..` part) reaches the same file from
    # both bases when they are one directory, and its manifest path is the base's
    # relative path plus the name: no second stat, no normpath or relpath per member.
    plain_base = _same_directory(linker_base or ".", lexical_base)
    prefix, shared = _relative_prefix(lexical_base, manifest_dir)
    shared_dir = f"{shared}/"
    entries: list[Entry] = []
    opened: list[str] = []
    """Each member's path as the linker opens it: dirname(archive)/name, through the kernel."""
    climbing: list[tuple[int, str]] = []
    """Members whose names are not plain, and their lexically resolved paths."""
    for position, raw_name in enumerate(names):
        name = decode_name(raw_name, archive_path, position)
        check_name_characters(archive_path, name, position)
        if plain_base and is_plain(name):
            opened.append(f"{linker_base}/{name}" if linker_base else name)
            if shared is None or (name != shared and not name.startswith(shared_dir)):
                path = prefix + name
            else:
                path = os.path.relpath(os.path.join(lexical_base, name), manifest_dir)
        else:
            # The manifest spells the member relative to its own directory, resolved
            # lexically: that must be the file the linker opens.
            opened.append(os.path.join(linker_base, name))
            lexical = os.path.normpath(os.path.join(lexical_base, name))
            climbing.append((position, lexical))
            path = os.path.relpath(lexical, manifest_dir)
        entries.append({"name": name, "position": position, "path": path, "size": 0,
                        "bitcode": False})  # fmt: skip
    identities = _probe(opened, entries, archive_path)
    for position, lexical in climbing:
        try:
            same = os.stat(lexical)
        except OSError:
            same = None
        if same is None or (same.st_dev, same.st_ino) != identities[position]:
            problem = (
                f"{opened[position]} and {lexical} are different files (a symbolic link on the"
                " way); the manifest cannot point at the member relative to its own directory"
            )
            raise member_error(archive_path, entries[position]["name"], position, problem)
    return entries


def _same_directory(a: str, b: str) -> bool:
    try:
        x, y = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (x.st_dev, x.st_ino) == (y.st_dev, y.st_ino)


def _relative_prefix(base: str, start: str) -> tuple[str, str | None]:
    """What `os.path.relpath(base + "/" + name, start)` puts before a plain `name` (both
    directories absolute and normal), and the first part of `start` below `base`, if it
    lies below: a name beginning with that part may cancel part of the way up, so only
    such a name needs `relpath` itself."""
    if start == base:
        return "", None
    if start.startswith(base.rstrip("/") + "/"):
        below = start[len(base.rstrip("/")) + 1 :].split("/")
        return "../" * len(below), below[0]
    return os.path.relpath(base, start) + "/", None


_PROBE_BATCH = 256
"""Thin members open at once. Each gets a readahead hint as it is opened, before any
of its batch is read, so a disk serves the batch's first pages together instead of one
seek after another (on a cold page cache, several times faster); a warm one pays
one cheap system call per member."""


def _probe(paths: list[str], entries: list[Entry], archive: str) -> list[tuple[int, int]]:
    """Fill in each thin member's size and bitcode flag from the file at its path; return
    each file's (device, inode). A missing or odd member is bad input naming it."""
    identities: list[tuple[int, int]] = []
    for start in range(0, len(paths), _PROBE_BATCH):
        batch = range(start, min(start + _PROBE_BATCH, len(paths)))
        descriptors: list[int] = []
        try:
            for position in batch:
                entry = entries[position]
                fd = _open_member(paths[position], archive, entry)
                descriptors.append(fd)
                try:
                    info = os.fstat(fd)
                    if not stat.S_ISREG(info.st_mode):
                        problem = f"{paths[position]} is not a regular file"
                        raise member_error(archive, entry["name"], position, problem)
                except OSError as err:
                    problem = f"cannot read {paths[position]}: {err.strerror}"
                    raise member_error(archive, entry["name"], position, problem) from None
                entry["size"] = info.st_size
                identities.append((info.st_dev, info.st_ino))
                try:  # noqa: SIM105 (contextlib: see the imports)
                    os.posix_fadvise(fd, 0, 4096, os.POSIX_FADV_WILLNEED)
                except OSError:
                    pass  # a hint: a file system without readahead reads it when asked
            for position, fd in zip(batch, descriptors, strict=True):
                try:
                    entries[position]["bitcode"] = is_bitcode(os.read(fd, 4))
                except OSError as err:
                    problem = f"cannot read {paths[position]}: {err.strerror}"
                    name = entries[position]["name"]
                    raise member_error(archive, name, position, problem) from None
        finally:
            for fd in descriptors:
                os.close(fd)
    return identities


def _open_member(path: str, archive: str, entry: Entry) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        problem = f"missing: no file {path}"
        raise member_error(archive, entry["name"], entry["position"], problem) from None
    except OSError as err:
        problem = f"cannot open {path}: {err.strerror}"
        raise member_error(archive, entry["name"], entry["position"], problem) from None
