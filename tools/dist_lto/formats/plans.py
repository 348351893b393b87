"""The planner's outputs: object and archive plans (version 3) and the link plan (version 2).

Each shape is a TypedDict so that the hot path (100,000 object plans) builds plain
dicts for orjson while the fields stay typed and documented in one place; readers
validate what a build system or `dist-lto inspect` reads back. Specified for users
in docs/plan.md.
"""

from __future__ import annotations

from typing import Any, TypedDict

from dist_lto.formats.jsonio import Fields, read_json

PLAN_VERSION = 3
"""Version 2 says which module is the link's largest (`largest`); version 3 gives each
module's size (`size`)."""
LINK_PLAN_VERSION = 2
"""Version 2 records what the plan was made from (`command`, `declaration_imports`)."""


class ObjectPlan(TypedDict):
    """One object: whether a backend runs, with which index file, importing what."""

    version: int
    index: int
    path: str
    """The backend's input, spelled exactly as in the index step."""
    is_bitcode: bool
    index_file: str | None
    imports: list[int]
    """Indices of imported objects, sorted."""
    archive_imports: list[int]
    """Indices of archives it imports members from, sorted."""
    member_imports: list[list[int]]
    """`[archive index, member position]` pairs, sorted."""
    opt_output: str
    largest: bool
    """The link's largest bitcode module (see `MemberPlan.largest`)."""
    size: int
    """The module's size in bytes (see `MemberPlan.size`)."""


class MemberPlan(TypedDict):
    """One archive member; `index_file` and `opt_object` are relative to the archive's dirs."""

    position: int
    name: str
    path: str
    input: str
    is_bitcode: bool
    opt: bool
    """A backend must run: bitcode that the index step loaded."""
    index_file: str | None
    opt_object: str | None
    imports: list[int]
    archive_imports: list[int]
    member_imports: list[list[int]]
    largest: bool
    """The link's largest bitcode module, whose backend likely ends last: in-process LLD
    starts it first, and a build system that queues backends should not queue it."""
    size: int
    """The module's size in bytes when the index step loaded it (0 otherwise): what a
    build system weighs backends by, to batch small ones (`largest` is the biggest)."""


class ArchivePlan(TypedDict):
    version: int
    index: int
    manifest: str | None
    """None for an archive the meta gives by its objects."""
    index_dir: str
    opt_objects_dir: str
    whole: bool
    members: list[MemberPlan]


class ArchiveSummary(TypedDict):
    index: int
    opt_members: int
    native_members: int
    unused_members: int


class LinkPlan(TypedDict):
    version: int
    bitcode_objects: list[int]
    native_objects: list[int]
    archives: list[ArchiveSummary]
    final_link_args: str
    command: list[str] | None
    """The COMMAND the plan was made from (null: replayed without one)."""
    declaration_imports: bool
    """Whether the index step imports declarations (`dist-lto plan
    --no-declaration-imports`; replaying, what the options say)."""


_OBJECT_PLAN_KEYS = set(ObjectPlan.__annotations__)
_MEMBER_PLAN_KEYS = set(MemberPlan.__annotations__)
_ARCHIVE_PLAN_KEYS = set(ArchivePlan.__annotations__)
_LINK_PLAN_KEYS = set(LinkPlan.__annotations__)
_SUMMARY_KEYS = set(ArchiveSummary.__annotations__)


def _ints(f: Fields, obj: dict[str, Any], key: str, pointer: str) -> list[int]:
    items = f.get(obj, key, list, pointer)
    for i, item in enumerate(items):
        f.expect(item, int, f"{pointer}/{key}/{i}")
    return items


def _pairs(f: Fields, obj: dict[str, Any], key: str, pointer: str) -> list[list[int]]:
    items = f.get(obj, key, list, pointer)
    for i, item in enumerate(items):
        pair = f.expect(item, list, f"{pointer}/{key}/{i}")
        if len(pair) != 2:
            f.fail(f"{pointer}/{key}/{i}", "expected [archive index, member position]")
        for j, x in enumerate(pair):
            f.expect(x, int, f"{pointer}/{key}/{i}/{j}")
    return items


def _optional_str(f: Fields, obj: dict[str, Any], key: str, pointer: str) -> str | None:
    if key not in obj:
        f.fail(f"{pointer}/{key}", "missing required field")
    value = obj[key]
    return None if value is None else f.expect(value, str, f"{pointer}/{key}")


def _check_imports(f: Fields, obj: dict[str, Any], pointer: str) -> None:
    _ints(f, obj, "imports", pointer)
    _ints(f, obj, "archive_imports", pointer)
    _pairs(f, obj, "member_imports", pointer)


def parse_object_plan(doc: object, file: str) -> ObjectPlan:
    f = Fields(file)
    obj = f.version(doc, PLAN_VERSION)
    f.only_keys(obj, _OBJECT_PLAN_KEYS, "")
    f.get(obj, "index", int, "")
    f.get(obj, "path", str, "")
    f.get(obj, "is_bitcode", bool, "")
    f.get(obj, "largest", bool, "")
    f.get(obj, "size", int, "")
    _optional_str(f, obj, "index_file", "")
    f.get(obj, "opt_output", str, "")
    _check_imports(f, obj, "")
    return obj  # type: ignore[return-value]


def parse_archive_plan(doc: object, file: str) -> ArchivePlan:
    f = Fields(file)
    obj = f.version(doc, PLAN_VERSION)
    f.only_keys(obj, _ARCHIVE_PLAN_KEYS, "")
    f.get(obj, "index", int, "")
    _optional_str(f, obj, "manifest", "")
    for key in ("index_dir", "opt_objects_dir"):
        f.get(obj, key, str, "")
    f.get(obj, "whole", bool, "")
    for i, item in enumerate(f.get(obj, "members", list, "")):
        pointer = f"/members/{i}"
        member = f.expect(item, dict, pointer)
        f.only_keys(member, _MEMBER_PLAN_KEYS, pointer)
        f.get(member, "position", int, pointer)
        for key in ("name", "path", "input"):
            f.get(member, key, str, pointer)
        f.get(member, "is_bitcode", bool, pointer)
        f.get(member, "opt", bool, pointer)
        f.get(member, "largest", bool, pointer)
        f.get(member, "size", int, pointer)
        _optional_str(f, member, "index_file", pointer)
        _optional_str(f, member, "opt_object", pointer)
        _check_imports(f, member, pointer)
    return obj  # type: ignore[return-value]


def parse_link_plan(doc: object, file: str) -> LinkPlan:
    f = Fields(file)
    obj = f.version(doc, LINK_PLAN_VERSION)
    f.only_keys(obj, _LINK_PLAN_KEYS, "")
    _ints(f, obj, "bitcode_objects", "")
    _ints(f, obj, "native_objects", "")
    f.get(obj, "final_link_args", str, "")
    if "command" not in obj:  # required, null allowed
        f.fail("/command", "missing required field")
    if obj["command"] is not None:
        f.strings(obj, "command", "")
    f.get(obj, "declaration_imports", bool, "")
    for i, item in enumerate(f.get(obj, "archives", list, "")):
        pointer = f"/archives/{i}"
        summary = f.expect(item, dict, pointer)
        f.only_keys(summary, _SUMMARY_KEYS, pointer)
        for key in sorted(_SUMMARY_KEYS):
            f.get(summary, key, int, pointer)
    return obj  # type: ignore[return-value]


def read_object_plan(path: str) -> ObjectPlan:
    return parse_object_plan(read_json(path, "object plan"), path)


def read_archive_plan(path: str) -> ArchivePlan:
    return parse_archive_plan(read_json(path, "archive plan"), path)


def read_link_plan(path: str) -> LinkPlan:
    return parse_link_plan(read_json(path, "link plan"), path)
