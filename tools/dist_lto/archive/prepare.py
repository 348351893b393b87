"""An archive becomes a directory of objects plus a manifest: `dist-lto prepare`'s work.

The ThinLTO index step can only treat individual object files as modules, so an
archive's members are extracted (regular archives, `extract.py`) or pointed at where
they are (thin archives, `thin.py`) and listed, in archive order, in a versioned
manifest (`formats/manifest.py`, docs/prepare.md) that the planner and the Buck2 rules
read.

Safety: every member name is checked before anything is written
(`member_names.py`), a failure removes what was written, and the manifest is renamed
into place only on success; the objects directory appears whole, in one rename.

A thin archive's prepare is mostly Python's start: the modules it loads are kept to the
standard library's cheapest (no `dataclasses`, `typing`, `contextlib`, `json`);
libarchive is loaded for regular archives only.
"""

from __future__ import annotations

import errno
import os
import stat

from dist_lto import TYPE_CHECKING, fsutil
from dist_lto.archive.ar_headers import ARCH_MAGIC, THIN_MAGIC
from dist_lto.archive.extract import Created, extract_regular, make_directories
from dist_lto.archive.member_names import REJECTED_TYPES
from dist_lto.archive.thin import list_thin
from dist_lto.errors import BadInput
from dist_lto.formats.manifest import manifest_bytes, manifest_document

if TYPE_CHECKING:
    from typing import Any


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
            kind = REJECTED_TYPES.get(stat.S_IFMT(mode), "not a regular file")
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
        make_directories(os.path.dirname(manifest), made)
        writing = objects_dir
        make_directories(os.path.dirname(target), made)
        staging = _staging_path(target)
        os.mkdir(staging)
        made.directories.append(staging)
        writing = manifest
        with fsutil.atomic_output(manifest) as temporary, open(temporary, "wb") as out:
            if magic == THIN_MAGIC:
                entries = list_thin(archive_path, _read_all(archive_path), outputs)
            else:
                entries = extract_regular(archive_path, outputs, made, staging)
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
