"""The meta file: a link's inputs in link-line order, as the planner reads them (version 1).

Written by the Buck2 rules or by hand; specified in docs/plan.md. Parsing checks
everything a planner run depends on before any output is written, and reports the
first problem as one line with the file and a JSON pointer. Output paths are kept
exactly as given; they are compared normalised only to detect collisions.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from dist_lto.formats.jsonio import Fields, read_json
from dist_lto.path_spelling import all_plain

META_VERSION = 1

_TOP_KEYS = {"version", "index_dir", "link_plan_output", "final_link_args_output", "groups"}
_GROUP_KEYS = {"pre_flags", "post_flags", "linkables"}
_OBJECT_KEYS = {"kind", "index", "path", "index_output", "plan_output", "opt_output"}
_ARCHIVE_KEYS = {
    "kind",
    "index",
    "manifest",
    "objects",
    "plan_output",
    "index_dir",
    "opt_objects_dir",
    "whole",
}
_ARGS_KEYS = {"kind", "args"}
KINDS = ("object", "archive", "args")
"""Linkable kinds: a tracked object, an archive (prepared by `dist-lto prepare`, or given
by its objects), plain args."""


@dataclass(frozen=True, slots=True)
class ObjectInput:
    """An object on the link line; `path` is spelled exactly as the backend will spell it."""

    index: int
    path: str
    index_output: str
    plan_output: str
    opt_output: str
    pointer: str
    """Where it sits in the meta (`/groups/0/linkables/3`), for messages."""


@dataclass(frozen=True, slots=True)
class ArchiveInput:
    """An archive: the manifest `dist-lto prepare` wrote for it, or (`objects`) the
    objects it was made of, where they are, in archive order. Exactly one is set."""

    index: int
    manifest: str | None
    plan_output: str
    index_dir: str
    opt_objects_dir: str
    whole: bool
    pointer: str
    objects: tuple[str, ...] | None = None
    """Each spelled exactly as the backend will spell it, like an object's `path`."""


@dataclass(frozen=True, slots=True)
class ArgsInput:
    """Linker arguments passed unchanged to both the index and the final link."""

    args: tuple[str, ...]
    pointer: str


Linkable = ObjectInput | ArchiveInput | ArgsInput


@dataclass(frozen=True, slots=True)
class Group:
    """Linkables with the flags written before and after them on both link lines."""

    pre_flags: tuple[str, ...]
    post_flags: tuple[str, ...]
    linkables: tuple[Linkable, ...]


@dataclass(frozen=True)
class Meta:
    """A validated meta file. Invariant: indices unique per kind, output paths distinct."""

    file: str
    index_dir: str
    link_plan_output: str
    final_link_args_output: str
    groups: tuple[Group, ...]

    def objects(self) -> list[ObjectInput]:
        return [x for g in self.groups for x in g.linkables if type(x) is ObjectInput]

    def archives(self) -> list[ArchiveInput]:
        return [x for g in self.groups for x in g.linkables if type(x) is ArchiveInput]


class _Parser:
    """One pass over the document, tracking indices and output paths for duplicate checks."""

    def __init__(self, file: str) -> None:
        self.f = Fields(file)
        self.object_indices: dict[int, str] = {}
        self.archive_indices: dict[int, str] = {}
        self.outputs: dict[str, str] = {}
        self.inputs: dict[str, str] = {}
        self.manifests: dict[str, str] = {}

    def path(self, obj: dict[str, Any], key: str, pointer: str) -> str:
        return self.checked_path(self.f.get(obj, key, str, pointer), f"{pointer}/{key}")

    def checked_path(self, value: str, where: str) -> str:
        if not value:
            self.f.fail(where, "empty path")
        if "\n" in value or "\r" in value or "\0" in value:
            self.f.fail(where, "path contains a newline or NUL character")
        return value

    def output(
        self, obj: dict[str, Any], key: str, pointer: str, *, directory: bool = False
    ) -> str:
        value = self.path(obj, key, pointer)
        norm = posixpath.normpath(value)
        where = f"{pointer}/{key}"
        if not directory and (value.endswith("/") or posixpath.basename(value) in (".", "..")):
            self.f.fail(where, f"output {value!r} names a directory, not a file")
        other = self.outputs.setdefault(norm, where)
        if other != where:
            self.f.fail(where, f"output {value!r} is also declared at {other}")
        return value

    def flags(self, obj: dict[str, Any], key: str, pointer: str) -> tuple[str, ...]:
        items = self.f.strings(obj, key, pointer, default=[])
        for i, item in enumerate(items):
            if "\0" in item:
                self.f.fail(f"{pointer}/{key}/{i}", "argument contains a NUL character")
        return tuple(items)

    def index(self, obj: dict[str, Any], pointer: str, seen: dict[int, str], what: str) -> int:
        value = self.f.get(obj, "index", int, pointer)
        if value < 0:
            self.f.fail(f"{pointer}/index", f"negative {what} index {value}")
        other = seen.setdefault(value, pointer)
        if other != pointer:
            self.f.fail(f"{pointer}/index", f"duplicate {what} index {value} (also at {other})")
        return value

    def object_input(self, item: dict[str, Any], pointer: str) -> ObjectInput:
        self.f.only_keys(item, _OBJECT_KEYS, pointer)
        index = self.index(item, pointer, self.object_indices, "object")
        path = self.path(item, "path", pointer)
        norm = posixpath.normpath(path)
        other = self.inputs.setdefault(norm, pointer)
        if other != pointer:
            self.f.fail(f"{pointer}/path", f"{path!r} names the same file as the object at {other}")
        return ObjectInput(
            index=index,
            path=path,
            index_output=self.output(item, "index_output", pointer),
            plan_output=self.output(item, "plan_output", pointer),
            opt_output=self.output(item, "opt_output", pointer),
            pointer=pointer,
        )

    def archive(self, item: dict[str, Any], pointer: str) -> ArchiveInput:
        self.f.only_keys(item, _ARCHIVE_KEYS, pointer)
        if ("manifest" in item) == ("objects" in item):
            both = "both" if "manifest" in item else "neither"
            self.f.fail(pointer, f"an archive gives its `manifest` or its `objects`: {both} given")
        manifest = objects = None
        if "manifest" in item:
            manifest = self.path(item, "manifest", pointer)
            self.manifests.setdefault(posixpath.normpath(manifest), pointer)
        else:
            objects = self.members(item, pointer)
        return ArchiveInput(
            index=self.index(item, pointer, self.archive_indices, "archive"),
            manifest=manifest,
            plan_output=self.output(item, "plan_output", pointer),
            index_dir=self.output(item, "index_dir", pointer, directory=True),
            opt_objects_dir=self.output(item, "opt_objects_dir", pointer, directory=True),
            whole=self.f.optional(item, "whole", bool, pointer, False),
            pointer=pointer,
            objects=objects,
        )

    def members(self, item: dict[str, Any], pointer: str) -> tuple[str, ...]:
        """An archive's `objects`: at least one, each a path no other input names."""
        paths = self.f.strings(item, "objects", pointer)
        if not paths:
            self.f.fail(f"{pointer}/objects", "an archive of no objects")
        for i, path in enumerate(paths):
            at = f"{pointer}/objects/{i}"
            other = self.inputs.setdefault(posixpath.normpath(self.checked_path(path, at)), at)
            if other != at:
                self.f.fail(at, f"{path!r} names the same file as the object at {other}")
        return tuple(paths)

    def linkable(self, item: object, pointer: str) -> Linkable:
        obj = self.f.expect(item, dict, pointer)
        kind = self.f.get(obj, "kind", str, pointer)
        if kind == "object":
            return self.object_input(obj, pointer)
        if kind == "archive":
            return self.archive(obj, pointer)
        if kind == "args":
            self.f.only_keys(obj, _ARGS_KEYS, pointer)
            self.f.get(obj, "args", list, pointer)
            return ArgsInput(args=self.flags(obj, "args", pointer), pointer=pointer)
        expected = ", ".join(KINDS)
        self.f.fail(f"{pointer}/kind", f"unknown kind {kind!r} (expected one of {expected})")

    def group(self, item: object, pointer: str) -> Group:
        obj = self.f.expect(item, dict, pointer)
        self.f.only_keys(obj, _GROUP_KEYS, pointer)
        items = self.f.get(obj, "linkables", list, pointer)
        return Group(
            pre_flags=self.flags(obj, "pre_flags", pointer),
            post_flags=self.flags(obj, "post_flags", pointer),
            linkables=tuple(
                self.linkable(x, f"{pointer}/linkables/{i}") for i, x in enumerate(items)
            ),
        )

    def meta(self, doc: object) -> Meta:
        top = self.f.version(doc, META_VERSION)
        self.f.only_keys(top, _TOP_KEYS, "")
        index_dir = self.output(top, "index_dir", "", directory=True)
        link_plan = self.output(top, "link_plan_output", "")
        args = self.output(top, "final_link_args_output", "")
        groups = self.f.get(top, "groups", list, "")
        meta = Meta(
            file=self.f.file,
            index_dir=index_dir,
            link_plan_output=link_plan,
            final_link_args_output=args,
            groups=tuple(self.group(g, f"/groups/{i}") for i, g in enumerate(groups)),
        )
        self.outputs_are_not_inputs()
        return meta

    def outputs_are_not_inputs(self) -> None:
        """Writing an output over an input (an object, a manifest, this file) destroys it."""
        inputs = {posixpath.normpath(self.f.file): "the meta file itself"}
        inputs.update((path, f"the manifest of {at}") for path, at in self.manifests.items())
        inputs.update((path, f"the object at {at}") for path, at in self.inputs.items())
        for path, where in self.outputs.items():
            if path in inputs:
                self.f.fail(where, f"output {path!r} is an input: {inputs[path]}")


_ARCHIVE_REQUIRED = _ARCHIVE_KEYS - {"whole", "manifest", "objects"}
_OBJECT_STRINGS = itemgetter("path", "index_output", "plan_output", "opt_output")
"""An object linkable's string fields, in `ObjectInput`'s order."""
_ARCHIVE_STRINGS = itemgetter("plan_output", "index_dir", "opt_objects_dir")
"""An archive linkable's output fields, in `ArchiveInput`'s order."""


def _strings(item: dict[str, Any], fields: itemgetter[Any]) -> tuple[str, ...] | None:
    """The `fields` of `item` when every one is a string, else None."""
    values = fields(item)
    for value in values:
        if type(value) is not str:
            return None
    return values


def _fast_meta(doc: object, file: str) -> Meta | None:
    """The same validation as `_Parser` for the common case, at a fraction of its cost.

    Checks field by field only what a dict lookup and a type test can; uniqueness and
    path spelling are checked over whole lists at once (paths must all be plain for
    that). Returns None whenever it is not sure, so `_Parser` has the last word and
    writes the error message.
    """
    if type(doc) is not dict or doc.keys() != _TOP_KEYS:
        return None
    version = doc["version"]
    index_dir, link_plan, args_file = (
        doc["index_dir"],
        doc["link_plan_output"],
        doc["final_link_args_output"],
    )
    groups = doc["groups"]
    if (
        type(version) is not int
        or version != META_VERSION
        or type(groups) is not list
        or type(index_dir) is not str
        or type(link_plan) is not str
        or type(args_file) is not str
    ):
        return None
    outputs = [index_dir, link_plan, args_file]
    inputs: list[str] = []
    manifests: list[str] = []
    flags: list[str] = []
    objects: list[int] = []
    archives: list[int] = []
    parsed: list[Group] = []
    for gi, group in enumerate(groups):
        if type(group) is not dict or "linkables" not in group or not group.keys() <= _GROUP_KEYS:
            return None
        pre, post, linkables = (
            group.get("pre_flags", []),
            group.get("post_flags", []),
            (group["linkables"]),
        )
        if type(pre) is not list or type(post) is not list or type(linkables) is not list:
            return None
        flags += pre
        flags += post
        items: list[Linkable] = []
        for li, item in enumerate(linkables):
            if type(item) is not dict:
                return None
            kind = item.get("kind")
            if kind == "object":
                if item.keys() != _OBJECT_KEYS:
                    return None
                index, fields = item["index"], _strings(item, _OBJECT_STRINGS)
                if type(index) is not int or index < 0 or fields is None:
                    return None
                path, index_output, plan_output, opt_output = fields
                objects.append(index)
                inputs.append(path)
                outputs += (index_output, plan_output, opt_output)
                items.append(
                    ObjectInput(index, path, index_output, plan_output, opt_output,
                                f"/groups/{gi}/linkables/{li}")
                )  # fmt: skip
            elif kind == "archive":
                if not _ARCHIVE_REQUIRED <= item.keys() <= _ARCHIVE_KEYS:
                    return None
                index, whole = item["index"], item.get("whole", False)
                fields = _strings(item, _ARCHIVE_STRINGS)
                if type(index) is not int or index < 0 or type(whole) is not bool or fields is None:
                    return None
                manifest, members = item.get("manifest"), item.get("objects")
                if type(manifest) is str and "objects" not in item:
                    manifests.append(manifest)
                elif (
                    "manifest" in item or type(members) is not list or not members
                    or not all(type(m) is str for m in members)
                ):  # fmt: skip
                    return None
                else:
                    inputs += members
                plan_output, index_out, opt_dir = fields
                archives.append(index)
                outputs += (plan_output, index_out, opt_dir)
                items.append(
                    ArchiveInput(index, manifest, plan_output, index_out, opt_dir, whole,
                                 f"/groups/{gi}/linkables/{li}",
                                 None if members is None else tuple(members))
                )  # fmt: skip
            elif kind == "args":
                args = item["args"] if item.keys() == _ARGS_KEYS else None
                if type(args) is not list:
                    return None
                flags += args
                items.append(ArgsInput(tuple(args), f"/groups/{gi}/linkables/{li}"))
            else:
                return None
        parsed.append(Group(tuple(pre), tuple(post), tuple(items)))
    if not all(type(f) is str for f in flags) or "\0" in "".join(flags):
        return None
    paths = outputs + inputs + manifests
    joined = "\n".join(paths)
    if "\r" in joined or "\0" in joined or not all_plain(paths):  # also no empty path, no \n
        return None
    unique_outputs = set(outputs)
    if (
        len(unique_outputs) != len(outputs)
        or len(set(inputs)) != len(inputs)
        or len(set(objects)) != len(objects)
        or len(set(archives)) != len(archives)
        or not unique_outputs.isdisjoint(inputs)
        or not unique_outputs.isdisjoint(manifests)
        or posixpath.normpath(file) in unique_outputs
    ):
        return None
    return Meta(file, index_dir, link_plan, args_file, tuple(parsed))


def parse_meta(doc: object, file: str) -> Meta:
    """Validate a parsed meta document; `BadInput` names `file` and the JSON pointer."""
    return _fast_meta(doc, file) or _Parser(file).meta(doc)


def read_meta(path: str) -> Meta:
    """Read and validate the meta file at `path`."""
    return parse_meta(read_json(path, "meta file"), path)


def _linkable_document(item: Linkable) -> dict[str, Any]:
    if type(item) is ObjectInput:
        return {
            "kind": "object",
            "index": item.index,
            "path": item.path,
            "index_output": item.index_output,
            "plan_output": item.plan_output,
            "opt_output": item.opt_output,
        }
    if type(item) is ArchiveInput:
        source = (
            {"manifest": item.manifest} if item.objects is None else {"objects": list(item.objects)}
        )
        return {
            "kind": "archive",
            "index": item.index,
            **source,
            "plan_output": item.plan_output,
            "index_dir": item.index_dir,
            "opt_objects_dir": item.opt_objects_dir,
            "whole": item.whole,
        }
    assert type(item) is ArgsInput
    return {"kind": "args", "args": list(item.args)}


def meta_document(meta: Meta) -> dict[str, Any]:
    """The JSON document of `meta` (its file and pointers aside): what `parse_meta`
    reads back as the same links, for writers that build a meta from records."""
    return {
        "version": META_VERSION,
        "index_dir": meta.index_dir,
        "link_plan_output": meta.link_plan_output,
        "final_link_args_output": meta.final_link_args_output,
        "groups": [
            {
                "pre_flags": list(group.pre_flags),
                "post_flags": list(group.post_flags),
                "linkables": [_linkable_document(x) for x in group.linkables],
            }
            for group in meta.groups
        ],
    }
