"""`dist-lto prepare`: an archive becomes a directory of objects plus a manifest.

The ThinLTO index step can only treat individual object files as modules, so an
archive's members are extracted (regular archives) or pointed at where they are
(thin archives) and listed, in archive order, in a versioned manifest
(docs/prepare.md) that the planner and the Buck2 rules read.

Safety: every member name is checked before anything is written (no absolute
names, no `..`, no symlink or device members), extracted files are created
relative to the objects directory with O_EXCL|O_NOFOLLOW in directories we make
ourselves, a failure removes what was written, and the manifest is renamed into
place only on success.
"""

from __future__ import annotations

import errno
import os
import stat

from dist_lto import TYPE_CHECKING, fsutil
from dist_lto.archive.ar_headers import ARCH_MAGIC, THIN_MAGIC, read_thin_members
from dist_lto.cli import parse, scan
from dist_lto.errors import BadInput
from dist_lto.formats.manifest import manifest_bytes, manifest_document
from dist_lto.llvm.bitcode import is_bitcode
from dist_lto.llvm.spelling import is_plain

if TYPE_CHECKING:
    import argparse
    from typing import Any

    from dist_lto.archive.reader import RegularArchive
    from dist_lto.formats.manifest import Entry

# A thin archive's prepare is mostly Python's start: the modules it loads are kept to
# the standard library's cheapest (no `dataclasses`, `typing`, `contextlib`, `json`);
# libarchive is loaded for regular archives only.

NAME_MAX = 255
"""Longest file name component Linux file systems accept, in bytes."""
PATH_MAX = 4095
"""Longest path the kernel accepts, in bytes (without the terminating NUL)."""

_DUPLICATE_MARK = "~"
"""Separates a renamed member's stem from its occurrence number: `foo.o` -> `foo~2.o`."""

_REJECTED_TYPES = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}
"""Member types (from the header's mode field) that are never extracted."""

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeName(ValueError):
    """A member name that cannot be extracted safely; the message says why."""


def safe_path(name: str) -> str:
    """The normalised relative path `name` extracts to, or UnsafeName.

    `.` and empty components are dropped (`./a//b.o` is `a/b.o`); absolute names,
    `..` components and names that are too long for the file system are refused.
    """
    if "/" not in name and name not in ("", ".", ".."):
        parts = [name]
    else:
        if name.startswith("/"):
            raise UnsafeName("is absolute")
        parts = [part for part in name.split("/") if part not in ("", ".")]
        if ".." in parts:
            raise UnsafeName("climbs out of the objects directory with '..'")
        if not parts:
            raise UnsafeName("names no file")
    # A character is at most 4 bytes in UTF-8: short strings skip the encoding.
    for part in parts:
        if len(part) > NAME_MAX // 4 and len(part.encode()) > NAME_MAX:
            raise UnsafeName(f"has a component longer than {NAME_MAX} bytes")
    path = "/".join(parts)
    if len(path) > PATH_MAX // 4 and len(path.encode()) > PATH_MAX:
        raise UnsafeName(f"is longer than {PATH_MAX} bytes")
    return path


def assign_paths(paths: list[str]) -> list[str]:
    """A distinct file path for each member, given their safe paths in archive order.

    A member keeps its own path unless an earlier member already has it or it is
    a directory of another member (`a` next to `a/b.o`). Those members get
    `stem~K.ext` in the same directory, with the smallest K >= 2 that is no
    member's path, no directory and not yet given out. Every path is known
    before any is given out, so a renamed `foo.o` can never take the name of a
    real `foo~2.o`, wherever in the archive that member comes.
    """
    directories = directories_of(paths)
    given: set[str] = set()
    result = list(paths)
    renamed: list[int] = []
    for i, path in enumerate(paths):
        if path in given or path in directories:
            renamed.append(i)
        else:
            given.add(path)
    next_number: dict[str, int] = {}
    for i in renamed:
        path = paths[i]
        head, _, base = path.rpartition("/")
        prefix = f"{head}/" if head else ""
        stem, ext = _split_extension(base)
        number = next_number.get(path, 2)
        while True:
            candidate = prefix + _numbered(stem, number, ext)
            number += 1
            if candidate not in given and candidate not in directories:
                break
        next_number[path] = number
        given.add(candidate)
        result[i] = candidate
    return result


def directories_of(paths: list[str]) -> set[str]:
    """Every directory the relative `paths` need (`a`, `a/b` for `a/b/c.o`)."""
    directories: set[str] = set()
    for path in paths:
        cut = path.rfind("/")
        while cut > 0 and path[:cut] not in directories:
            directories.add(path[:cut])
            cut = path.rfind("/", 0, cut)
    return directories


def _split_extension(base: str) -> tuple[str, str]:
    dot = base.rfind(".")
    if dot <= 0:
        return base, ""
    return base[:dot], base[dot:]


def _numbered(stem: str, number: int, ext: str) -> str:
    """`stem~number.ext`, with the stem shortened if the name would be too long."""
    tail = f"{_DUPLICATE_MARK}{number}{ext}"
    while stem and len((stem + tail).encode()) > NAME_MAX:
        stem = stem[:-1]
    return stem + tail


class Outputs:
    """Where `prepare` writes, checked before the archive is read."""

    __slots__ = ("manifest", "objects_dir", "objects_from_manifest")

    def __init__(self, objects_dir: str, manifest: str, objects_from_manifest: str) -> None:
        self.objects_dir = objects_dir
        self.manifest = manifest
        self.objects_from_manifest = objects_from_manifest
        """The objects directory relative to the manifest's directory (`.` if the same)."""


def check_outputs(objects_dir: str, manifest: str, archive: str = "") -> Outputs:
    """Refuse a non-empty objects directory, a manifest inside it or holding it, and a
    manifest that is the archive; compute relative paths."""
    try:
        entries = os.listdir(objects_dir)
    except FileNotFoundError:
        entries = []
    except NotADirectoryError:
        raise BadInput(f"{objects_dir}: exists and is not a directory") from None
    except OSError as err:
        raise BadInput(f"{objects_dir}: cannot list: {err.strerror}") from None
    if entries:
        raise BadInput(f"{objects_dir}: objects directory is not empty")
    if os.path.isdir(manifest):
        raise BadInput(f"{manifest}: is a directory")
    manifest_dir = os.path.dirname(os.path.abspath(manifest))
    objects_abs = os.path.abspath(objects_dir)
    spellings = [(manifest_dir, objects_abs)]
    spellings.append((os.path.realpath(manifest_dir), os.path.realpath(objects_abs)))
    for inside, outside in spellings:
        if inside == outside or inside.startswith(outside.rstrip("/") + "/"):
            raise BadInput(f"{manifest}: the manifest must not be inside the objects directory")
    manifest_real, objects_real = os.path.realpath(manifest), os.path.realpath(objects_dir)
    if objects_real == manifest_real or objects_real.startswith(manifest_real + "/"):
        raise BadInput(f"{manifest}: the objects directory would be inside the manifest")
    if archive and manifest_real == os.path.realpath(archive):
        raise BadInput(f"{manifest}: the manifest would overwrite the archive")
    return Outputs(objects_dir, manifest, os.path.relpath(objects_abs, manifest_dir))


def _decode(name: bytes, archive: str, position: int) -> str:
    try:
        return name.decode()
    except UnicodeDecodeError:
        shown = repr(name.decode("utf-8", "backslashreplace"))
        problem = "name is not UTF-8"
        raise BadInput(f"{archive}: member {shown} (position {position}): {problem}") from None


def _check_name_characters(archive: str, name: str, position: int) -> None:
    """Refuse a name with a control character (a newline, a NUL, an escape): it would be
    extracted, then break every line-based file that names it (`.imports`, argument
    files) and every message that shows it."""
    if name.isascii() and name.isprintable():
        return  # printable ASCII: no control character
    for char in name:
        if char < " " or char == "\x7f":
            problem = f"name contains the control character U+{ord(char):04X}"
            raise _member_error(archive, name, position, problem)


def _member_error(archive: str, name: str, position: int, problem: str) -> BadInput:
    return BadInput(f"{archive}: member {name!r} (position {position}): {problem}")


def prepare_regular(
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
            name = _decode(member.name, archive_path, position)
            _check_name_characters(archive_path, name, position)
            kind = _REJECTED_TYPES.get(stat.S_IFMT(member.mode))
            if kind:
                problem = f"is {kind} (mode {member.mode:o}); only regular files are extracted"
                raise _member_error(archive_path, name, position, problem)
            try:
                safe.append(safe_path(name))
            except UnsafeName as err:
                raise _member_error(archive_path, name, position, f"name {err}") from None
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


def _make_directories(path: str, made: Created) -> None:
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


def prepare_thin(archive_path: str, data: bytes, outputs: Outputs) -> list[Entry]:
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
        name = _decode(raw_name, archive_path, position)
        _check_name_characters(archive_path, name, position)
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
            raise _member_error(archive_path, entries[position]["name"], position, problem)
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
                        raise _member_error(archive, entry["name"], position, problem)
                except OSError as err:
                    problem = f"cannot read {paths[position]}: {err.strerror}"
                    raise _member_error(archive, entry["name"], position, problem) from None
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
                    raise _member_error(archive, name, position, problem) from None
        finally:
            for fd in descriptors:
                os.close(fd)
    return identities


def _open_member(path: str, archive: str, entry: Entry) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        problem = f"missing: no file {path}"
        raise _member_error(archive, entry["name"], entry["position"], problem) from None
    except OSError as err:
        problem = f"cannot open {path}: {err.strerror}"
        raise _member_error(archive, entry["name"], entry["position"], problem) from None


def _read_magic(path: str) -> bytes:
    """The archive's first bytes; BadInput unless it is a regular file (a FIFO would
    block the read, a device would never end)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise BadInput(f"{path}: cannot read: {err.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise BadInput(f"{path}: is a directory, not an archive")
        if not stat.S_ISREG(mode):
            kind = _REJECTED_TYPES.get(stat.S_IFMT(mode), "not a regular file")
            raise BadInput(f"{path}: is {kind}, not an archive (only regular files are read)")
        return os.read(fd, len(ARCH_MAGIC))
    except OSError as err:
        raise BadInput(f"{path}: cannot read: {err.strerror}") from None
    finally:
        os.close(fd)


def _read_all(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as err:
        raise BadInput(f"{path}: cannot read: {err.strerror}") from None


def prepare(archive_path: str, objects_dir: str, manifest: str) -> dict[str, Any]:
    """Do the whole job; return the manifest document that was written.

    The manifest's temporary file is opened before anything is extracted, so an
    unwritable manifest location fails first. Members are extracted into a staging
    directory beside the objects directory, which becomes the objects directory in one
    rename after the manifest is in place: a process killed at any point leaves the
    objects directory as it was or complete, so a rerun succeeds. Any failure removes
    every file and directory this run created.
    """
    outputs = check_outputs(objects_dir, manifest, archive_path)
    magic = _read_magic(archive_path)
    if magic not in (THIN_MAGIC, ARCH_MAGIC):
        raise BadInput(f"{archive_path}: not an ar archive")
    made = Created()
    target = objects_dir.rstrip("/") or objects_dir
    placed = False
    writing = manifest
    """The output an OSError now is about (the error's own file name may be a temporary)."""
    try:
        _make_directories(os.path.dirname(manifest), made)
        writing = objects_dir
        _make_directories(os.path.dirname(target), made)
        staging = _staging_path(target)
        os.mkdir(staging)
        made.directories.append(staging)
        writing = manifest
        with fsutil.atomic_output(manifest) as temporary, open(temporary, "wb") as out:
            if magic == THIN_MAGIC:
                entries = prepare_thin(archive_path, _read_all(archive_path), outputs)
            else:
                entries = prepare_regular(archive_path, outputs, made, staging)
            archive = os.path.basename(archive_path)
            out.write(manifest_bytes(archive, magic == THIN_MAGIC, entries))
            document = manifest_document(archive, magic == THIN_MAGIC, entries)
        placed = True
        writing = objects_dir
        _publish(staging, target, made)
    except BaseException as err:
        if placed:
            fsutil.remove_quietly(manifest)
        made.remove()
        if isinstance(err, OSError):
            raise fsutil.write_failure(err, writing) from None
        raise
    return document


def _staging_path(objects_dir: str) -> str:
    """Where members are extracted before they are published: beside the objects
    directory, so that one rename publishes it whole; inside it when it exists on
    another file system than its parent (a mount point, or a symbolic link to a
    directory elsewhere), where a rename from beside it would fail with EXDEV."""
    beside = fsutil.temp_path_for(objects_dir)
    try:
        here = os.stat(objects_dir)
        parent = os.stat(os.path.dirname(os.path.abspath(objects_dir)))
    except OSError:
        return beside  # missing: created by the rename
    if os.path.islink(objects_dir) or here.st_dev != parent.st_dev:
        return os.path.join(objects_dir, os.path.basename(beside))
    return beside


def _publish(staging: str, objects_dir: str, made: Created) -> None:
    """Make the staging directory the objects directory with one rename (it replaces an
    empty directory). A staging directory inside it (`_staging_path`), a symbolic link
    to the directory, or a mount point cannot be renamed over it: the entries move in
    one by one instead, and are copied where even that crosses file systems (a bind
    mount of the same file system, which `_staging_path` cannot tell)."""
    inside = os.path.dirname(staging) == (objects_dir.rstrip("/") or objects_dir)
    if not inside and not os.path.islink(objects_dir):
        try:
            os.rename(staging, objects_dir)
            return
        except OSError as err:
            if err.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise BadInput(f"{objects_dir}: objects directory is not empty") from None
            if err.errno not in (errno.EBUSY, errno.EINVAL, errno.EXDEV):
                raise
    for name in sorted(os.listdir(staging)):
        final = os.path.join(objects_dir, name)
        fsutil.move(os.path.join(staging, name), final)
        (made.directories if os.path.isdir(final) else made.files).append(final)
    os.rmdir(staging)


class Options:
    """The parsed command line."""

    __slots__ = ("archive", "manifest_out", "objects_out")

    def __init__(self) -> None:
        self.archive = ""
        self.objects_out = ""
        self.manifest_out = ""


_VALUE_OPTIONS = {"--archive": "archive", "--objects-out": "objects_out",
                  "--manifest-out": "manifest_out"}  # fmt: skip


def _parse_fast(argv: list[str]) -> Options | None:
    """The usual command line without argparse (a build runs prepare once per archive);
    None sends anything else to argparse."""
    opts = Options()
    positional = scan(argv, opts, _VALUE_OPTIONS, {})
    if positional != [] or not (opts.archive and opts.objects_out and opts.manifest_out):
        return None
    return opts


def _parser() -> argparse.ArgumentParser:
    """The argparse parser: the reference for `--help` and for error messages."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="dist-lto prepare",
        description=(
            "Turn an ar archive into a directory of objects plus a JSON manifest, so the ThinLTO"
            " index step can see each member as an object. Regular archives (GNU, BSD, as"
            " llvm-ar, GNU ar and rustc write them) are read with libarchive and every member"
            " is extracted; duplicate names get distinct extracted names (foo.o, foo~2.o) that"
            " never collide with another member's own name. Thin archives are not copied: the"
            " manifest points at each member where it is. Bitcode is told from native code by"
            " its magic."
        ),
        epilog=(
            "The manifest (version 1) is specified in docs/prepare.md. Exit status: 0 success,"
            " 2 bad input (not an archive, truncated, unsafe or non-UTF-8 member name, symlink"
            " or device member, missing thin member, non-empty objects directory), 1 internal"
            " failure. On failure no manifest is written and nothing is left in the objects"
            " directory."
        ),
    )
    parser.add_argument("--archive", required=True, metavar="A", help="the archive to prepare")
    parser.add_argument(
        "--objects-out",
        required=True,
        metavar="DIR",
        help="directory for the extracted members; created if missing, must be empty"
        " (left empty for a thin archive)",
    )
    parser.add_argument(
        "--manifest-out",
        required=True,
        metavar="M.json",
        help="where to write the manifest; member paths in it are relative to its directory",
    )
    return parser


def main(argv: list[str]) -> int:
    args = parse(argv, _parse_fast, _parser, Options)
    prepare(args.archive, args.objects_out, args.manifest_out)
    return 0
