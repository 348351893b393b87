"""The archive manifest `dist-lto prepare` writes and the planner reads (version 1).

One member per archive member, in archive order: its name, position, where its bytes
are (relative to the manifest's directory), size and whether it is bitcode. Specified
in docs/prepare.md; the Buck2 rules read it through prelude/dist_lto/formats.bzl.

`prepare` runs once per archive and, for a thin archive, does little besides starting
Python: this module imports no `dataclasses`, `typing`, `json` or orjson when it is
loaded (orjson alone loads `dataclasses`, `inspect`, `uuid`, `datetime` and `re`).
The writer is a fast path whose reference is `jsonio.dumps(manifest_document(...))`,
held to the same bytes by a property test; the reader loads `jsonio` when it runs.
"""

from __future__ import annotations

import posixpath

from dist_lto import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, TypedDict

    from dist_lto.formats.meta import ArchiveInput

    class Entry(TypedDict):
        """One member in the manifest (docs/prepare.md)."""

        name: str
        """The member's name as the archive records it."""
        position: int
        """0-based, in archive order, counting real members only (no symbol or name tables)."""
        path: str
        """Where the member's bytes are, relative to the manifest's directory."""
        size: int
        bitcode: bool


try:
    from _json import encode_basestring as _quote  # what `json` itself uses, without `re`
except ImportError:  # an interpreter without CPython's accelerator
    from json.encoder import encode_basestring as _quote

MANIFEST_VERSION = 1


def manifest_document(archive: str, thin: bool, members: list[Entry]) -> dict[str, Any]:
    """The manifest for `archive` (its base name) with `members` in archive order."""
    return {"version": MANIFEST_VERSION, "archive": archive, "thin": thin, "members": members}


def manifest_bytes(archive: str, thin: bool, members: list[Entry]) -> bytes:
    """`jsonio.dumps(manifest_document(archive, thin, members))`, without orjson: keys in
    sorted order, two-space indent, strings escaped as orjson escapes them."""
    rows = [
        f'    {{\n      "bitcode": {"true" if m["bitcode"] else "false"},\n'
        f'      "name": {_quote(m["name"])},\n'
        f'      "path": {_quote(m["path"])},\n'
        f'      "position": {int(m["position"])},\n'
        f'      "size": {int(m["size"])}\n    }}'
        for m in members
    ]
    listed = "[\n" + ",\n".join(rows) + "\n  ]" if rows else "[]"
    text = (
        f'{{\n  "archive": {_quote(archive)},\n  "members": {listed},\n'
        f'  "thin": {"true" if thin else "false"},\n  "version": {MANIFEST_VERSION}\n}}\n'
    )
    return text.encode()


class Member:
    """One archive member as `dist-lto prepare` extracted it; `path` is relative to the manifest."""

    __slots__ = ("bitcode", "name", "path", "position", "size")

    def __init__(self, name: str, position: int, path: str, size: int, bitcode: bool) -> None:
        self.name = name
        self.position = position
        self.path = path
        self.size = size
        self.bitcode = bitcode


class Manifest:
    """What the planner reads from a `dist-lto prepare` manifest (docs/prepare.md)."""

    __slots__ = ("archive", "file", "members", "thin")

    def __init__(self, file: str, archive: str, thin: bool, members: tuple[Member, ...]) -> None:
        self.file = file
        self.archive = archive
        self.thin = thin
        self.members = members


_MANIFEST_KEYS = {"version", "archive", "thin", "members"}
_MEMBER_KEYS = {"name", "position", "path", "size", "bitcode"}


def parse_manifest(doc: object, file: str) -> Manifest:
    """Validate a parsed archive manifest; member paths and positions must be unique."""
    from dist_lto.formats.jsonio import Fields

    f = Fields(file)
    top = f.version(doc, MANIFEST_VERSION)
    f.only_keys(top, _MANIFEST_KEYS, "")
    items = f.get(top, "members", list, "")
    members: list[Member] = []
    positions: set[int] = set()
    paths: set[str] = set()
    for i, item in enumerate(items):
        pointer = f"/members/{i}"
        obj = f.expect(item, dict, pointer)
        f.only_keys(obj, _MEMBER_KEYS, pointer)
        member = Member(
            name=f.get(obj, "name", str, pointer),
            position=f.get(obj, "position", int, pointer),
            path=f.get(obj, "path", str, pointer),
            size=f.get(obj, "size", int, pointer),
            bitcode=f.get(obj, "bitcode", bool, pointer),
        )
        if not member.path or any(c in member.path for c in "\n\r\0"):
            f.fail(f"{pointer}/path", "empty path or path with a newline or NUL character")
        if member.position < 0 or member.position in positions or member.position >= 1 << 32:
            f.fail(f"{pointer}/position", f"negative, duplicate or huge position {member.position}")
        norm = posixpath.normpath(member.path)
        if norm in paths:
            f.fail(f"{pointer}/path", f"duplicate member path {member.path!r}")
        positions.add(member.position)
        paths.add(norm)
        members.append(member)
    return Manifest(
        file=file,
        archive=f.get(top, "archive", str, ""),
        thin=f.get(top, "thin", bool, ""),
        members=tuple(members),
    )


def read_manifest(path: str) -> Manifest:
    """Read and validate the archive manifest at `path`."""
    from dist_lto.formats.jsonio import read_json

    return parse_manifest(read_json(path, "archive manifest"), path)


def archive_manifest(archive: ArchiveInput, meta_file: str) -> Manifest:
    """The members of a meta file's archive: its prepared manifest, read, or its
    `objects`, listed as `prepare` would list them."""
    if archive.objects is None:
        assert archive.manifest is not None
        return read_manifest(archive.manifest)
    where = f"{meta_file}: {archive.pointer}"
    return _objects_manifest(archive.objects, where, f"archive {archive.index}")


def _objects_manifest(paths: tuple[str, ...], file: str, archive: str) -> Manifest:
    """Each object where it is, spelled as given, its size and bitcode flag from the
    file itself. `file` names the archive in messages."""
    import os

    from dist_lto.errors import BadInput
    from dist_lto.fsutil import open_input
    from dist_lto.llvm.bitcode import is_bitcode

    members = []
    for position, path in enumerate(paths):
        with open(open_input(path, "object"), "rb") as f:
            try:
                size = os.fstat(f.fileno()).st_size
                head = f.read(4)
            except OSError as err:
                raise BadInput(f"{path}: cannot read object: {err.strerror}") from None
        members.append(Member(posixpath.basename(path), position, path, size, is_bitcode(head)))
    return Manifest(file=file, archive=archive, thin=True, members=tuple(members))
