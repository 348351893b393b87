"""The archive manifest `dist-lto prepare` writes and the planner reads (version 1).

One member per archive member, in archive order: its name, position, where its bytes
are (relative to the manifest's directory), size and whether it is bitcode. Specified
in docs/prepare.md; the Buck2 rules read it through prelude/dist_lto/formats.bzl.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any, TypedDict

from dist_lto.formats.jsonio import Fields, read_json

MANIFEST_VERSION = 1


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


def manifest_document(archive: str, thin: bool, members: list[Entry]) -> dict[str, Any]:
    """The manifest for `archive` (its base name) with `members` in archive order."""
    return {"version": MANIFEST_VERSION, "archive": archive, "thin": thin, "members": members}


@dataclass(frozen=True, slots=True)
class Member:
    """One archive member as `dist-lto prepare` extracted it; `path` is relative to the manifest."""

    name: str
    position: int
    path: str
    size: int
    bitcode: bool


@dataclass(frozen=True)
class Manifest:
    """What the planner reads from a `dist-lto prepare` manifest (docs/prepare.md)."""

    file: str
    archive: str
    thin: bool
    members: tuple[Member, ...]


_MANIFEST_KEYS = {"version", "archive", "thin", "members"}
_MEMBER_KEYS = set(Entry.__annotations__)


def parse_manifest(doc: object, file: str) -> Manifest:
    """Validate a parsed archive manifest; member paths and positions must be unique."""
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
    return parse_manifest(read_json(path, "archive manifest"), path)
