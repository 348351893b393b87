"""The meta file and manifest validators: every defect is one line naming file and pointer."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from dist_lto import cli
from dist_lto.errors import BadInput
from dist_lto.formats.manifest import parse_manifest
from dist_lto.formats.meta import (
    ArchiveInput,
    ArgsInput,
    ObjectInput,
    _fast_meta,
    _Parser,
    meta_document,
    parse_meta,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.budget import examples

FILE = "meta.json"


def valid_meta() -> dict[str, Any]:
    return {
        "version": 1,
        "index_dir": "out/index",
        "link_plan_output": "out/link-plan.json",
        "final_link_args_output": "out/final.args",
        "groups": [
            {
                "pre_flags": ["-Wl,--as-needed"],
                "post_flags": [],
                "linkables": [
                    {
                        "kind": "object",
                        "index": 0,
                        "path": "obj/a.o",
                        "index_output": "out/index/obj/a.o.thinlto.bc",
                        "plan_output": "out/plans/0.json",
                        "opt_output": "out/opt/0.o",
                    },
                    {
                        "kind": "object",
                        "index": 1,
                        "path": "obj/b.o",
                        "index_output": "out/index/obj/b.o.thinlto.bc",
                        "plan_output": "out/plans/1.json",
                        "opt_output": "out/opt/1.o",
                    },
                ],
            },
            {
                "linkables": [
                    {
                        "kind": "archive",
                        "index": 0,
                        "manifest": "prep/u/manifest.json",
                        "plan_output": "out/ap/0.json",
                        "index_dir": "out/ai/0",
                        "opt_objects_dir": "out/ao/0",
                        "whole": True,
                    },
                    {"kind": "args", "args": ["-lm"]},
                    {
                        "kind": "archive",
                        "index": 1,
                        "objects": ["lib/c.o", "lib/d.o"],
                        "plan_output": "out/ap/1.json",
                        "index_dir": "out/ai/1",
                        "opt_objects_dir": "out/ao/1",
                        "whole": False,
                    },
                ],
            },
        ],
    }


def error(doc: object) -> str:
    with pytest.raises(BadInput) as info:
        parse_meta(doc, FILE)
    return info.value.message


def test_valid_meta_keeps_link_order_and_paths_as_given() -> None:
    meta = parse_meta(valid_meta(), FILE)
    kinds = [type(x) for g in meta.groups for x in g.linkables]
    assert kinds == [ObjectInput, ObjectInput, ArchiveInput, ArgsInput, ArchiveInput]
    assert [o.path for o in meta.objects()] == ["obj/a.o", "obj/b.o"]
    assert meta.archives()[0].whole is True
    assert (meta.archives()[0].manifest, meta.archives()[0].objects) == (
        "prep/u/manifest.json", None)  # fmt: skip
    assert (meta.archives()[1].manifest, meta.archives()[1].objects) == (
        None, ("lib/c.o", "lib/d.o"))  # fmt: skip
    assert meta.groups[0].pre_flags == ("-Wl,--as-needed",)
    assert meta.groups[1].pre_flags == ()  # optional, defaults to empty


def test_a_meta_written_from_records_reads_back_as_the_same_link() -> None:
    doc = valid_meta()
    doc["groups"][1]["pre_flags"] = doc["groups"][1]["post_flags"] = []
    meta = parse_meta(doc, FILE)
    assert meta_document(meta) == doc
    assert parse_meta(meta_document(meta), FILE) == meta


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d.update(version=2), "meta.json: /version: unsupported version 2"),
        (lambda d: d.pop("groups"), "meta.json: /groups: missing required field"),
        (lambda d: d.update(extra=1), "meta.json: /extra: unknown field"),
        (
            lambda d: d["groups"][0]["linkables"][0].update(kind="blob"),
            "meta.json: /groups/0/linkables/0/kind: unknown kind 'blob'",
        ),
        (
            lambda d: d["groups"][0]["linkables"][1].update(index=0),
            "meta.json: /groups/0/linkables/1/index: duplicate object index 0"
            " (also at /groups/0/linkables/0)",
        ),
        (
            lambda d: d["groups"][0]["linkables"][1].update(index=-1),
            "meta.json: /groups/0/linkables/1/index: negative object index -1",
        ),
        (
            lambda d: d["groups"][0]["linkables"][0].update(index=True),
            "meta.json: /groups/0/linkables/0/index: expected integer, got boolean",
        ),
        (
            lambda d: d["groups"][0]["linkables"][0].pop("plan_output"),
            "meta.json: /groups/0/linkables/0/plan_output: missing required field",
        ),
        (
            lambda d: d["groups"][0]["linkables"][0].update(path=""),
            "meta.json: /groups/0/linkables/0/path: empty path",
        ),
        (
            lambda d: d["groups"][0]["linkables"][0].update(path="a\nb.o"),
            "meta.json: /groups/0/linkables/0/path: path contains a newline",
        ),
        (
            lambda d: d["groups"][0]["linkables"][1].update(path="obj/./a.o"),
            "meta.json: /groups/0/linkables/1/path: 'obj/./a.o' names the same file",
        ),
        (
            lambda d: d["groups"][0]["linkables"][1].update(plan_output="out/plans/0.json"),
            "meta.json: /groups/0/linkables/1/plan_output: output 'out/plans/0.json' is also"
            " declared at /groups/0/linkables/0/plan_output",
        ),
        (
            lambda d: d["groups"][1]["linkables"][0].update(whole="yes"),
            "meta.json: /groups/1/linkables/0/whole: expected boolean, got string",
        ),
        (
            lambda d: d["groups"][1]["linkables"][1].update(args=["-lm", 3]),
            "meta.json: /groups/1/linkables/1/args/1: expected string, got integer",
        ),
        (
            lambda d: d["groups"][0].update(pre_flags="-lm"),
            "meta.json: /groups/0/pre_flags: expected array, got string",
        ),
        (
            lambda d: d["groups"][1]["linkables"][0].update(objects=["lib/e.o"]),
            "meta.json: /groups/1/linkables/0: an archive gives its `manifest` or its"
            " `objects`: both given",
        ),
        (
            lambda d: d["groups"][1]["linkables"][2].pop("objects"),
            "meta.json: /groups/1/linkables/2: an archive gives its `manifest` or its"
            " `objects`: neither given",
        ),
        (
            lambda d: d["groups"][1]["linkables"][2].update(objects=[]),
            "meta.json: /groups/1/linkables/2/objects: an archive of no objects",
        ),
        (
            lambda d: d["groups"][1]["linkables"][2].update(objects=["lib/c.o", 3]),
            "meta.json: /groups/1/linkables/2/objects/1: expected string, got integer",
        ),
        (
            lambda d: d["groups"][1]["linkables"][2].update(objects=["lib/c.o", ""]),
            "meta.json: /groups/1/linkables/2/objects/1: empty path",
        ),
        (
            lambda d: d["groups"][1]["linkables"][2].update(objects=["lib/c.o", "obj/./a.o"]),
            "meta.json: /groups/1/linkables/2/objects/1: 'obj/./a.o' names the same file as"
            " the object at /groups/0/linkables/0",
        ),
        (
            lambda d: d["groups"][1]["linkables"][2].update(objects=["lib/c.o", "out/ap/0.json"]),
            "meta.json: /groups/1/linkables/0/plan_output: output 'out/ap/0.json' is an input:"
            " the object at /groups/1/linkables/2/objects/1",
        ),
    ],
)
def test_each_defect_is_reported_with_its_json_pointer(mutate: Any, expected: str) -> None:
    doc = valid_meta()
    mutate(doc)
    assert error(doc).startswith(expected)


def test_not_an_object_is_rejected_at_the_root() -> None:
    assert error([1, 2]) == "meta.json: /: expected object, got array"


def test_duplicate_archive_indices_are_rejected() -> None:
    doc = valid_meta()
    second = copy.deepcopy(doc["groups"][1]["linkables"][0])
    second.update(plan_output="out/ap/1.json", index_dir="out/ai/1", opt_objects_dir="out/ao/1")
    doc["groups"][1]["linkables"].append(second)
    assert "duplicate archive index 0" in error(doc)


# Property: any mutation of a valid meta file is accepted or rejected cleanly.

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
_KEYS = [
    "version",
    "index_dir",
    "groups",
    "linkables",
    "kind",
    "index",
    "path",
    "args",
    "manifest",
    "objects",
    "whole",
    "pre_flags",
    "plan_output",
    "index_output",
    "opt_output",
]


def _containers(doc: Any, out: list[Any]) -> list[Any]:
    if isinstance(doc, dict | list):
        out.append(doc)
        for v in doc.values() if isinstance(doc, dict) else doc:
            _containers(v, out)
    return out


@st.composite
def mutated_metas(draw: st.DrawFn) -> Any:
    doc = valid_meta()
    for _ in range(draw(st.integers(1, 3))):
        containers = _containers(doc, [])
        target = draw(st.sampled_from(containers))
        action = draw(st.sampled_from(["set", "delete", "add", "replace_root"]))
        if action == "replace_root":
            doc = draw(_json_values)
            break
        if isinstance(target, dict):
            keys = sorted(target) or ["x"]
            key = draw(st.sampled_from(keys + _KEYS))
            if action == "delete":
                target.pop(key, None)
            else:
                target[key] = draw(
                    _json_values | st.sampled_from([0, 1, "obj/a.o", "object", "archive", "args"])
                )
        elif target:
            i = draw(st.integers(0, len(target) - 1))
            if action == "delete":
                del target[i]
            elif action == "add":
                target.append(copy.deepcopy(target[i]))
            else:
                target[i] = draw(_json_values)
    return doc


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_metas())
def test_any_mutation_of_a_valid_meta_is_accepted_or_rejected_cleanly(doc: Any) -> None:
    try:
        meta = parse_meta(doc, FILE)
    except BadInput as err:
        assert err.message.startswith("meta.json: /")
        assert "\n" not in err.message
        assert err.status == 2
        return
    objects = meta.objects()
    assert len({o.index for o in objects}) == len(objects)
    assert len({a.index for a in meta.archives()}) == len(meta.archives())
    outputs = [meta.index_dir, meta.link_plan_output, meta.final_link_args_output]
    for o in objects:
        outputs += [o.index_output, o.plan_output, o.opt_output]
    for a in meta.archives():
        outputs += [a.plan_output, a.index_dir, a.opt_objects_dir]
    assert all(isinstance(p, str) and p for p in outputs)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_metas())
def test_fast_validation_agrees_with_the_precise_one(doc: Any) -> None:
    try:
        precise = _Parser(FILE).meta(copy.deepcopy(doc))
    except BadInput:
        assert _fast_meta(doc, FILE) is None
        return
    fast = _fast_meta(doc, FILE)
    assert fast is None or fast == precise


def test_fast_validation_takes_a_plain_meta() -> None:
    assert _fast_meta(valid_meta(), FILE) == _Parser(FILE).meta(valid_meta())
    doc = valid_meta()
    doc["groups"][0]["linkables"][0]["path"] = "../obj/a.o"  # valid, but not plain
    assert _fast_meta(doc, FILE) is None
    assert parse_meta(doc, FILE).objects()[0].path == "../obj/a.o"


@settings(max_examples=examples(100), deadline=None)
@given(_json_values)
def test_arbitrary_json_is_never_a_crash(doc: Any) -> None:
    try:
        parse_meta(json.loads(json.dumps(doc)), FILE)
    except BadInput as err:
        assert err.message.startswith("meta.json: ")


def valid_manifest() -> dict[str, Any]:
    return {
        "version": 1,
        "archive": "libu.a",
        "thin": False,
        "members": [
            {"name": "a.o", "position": 0, "path": "objects/a.o", "size": 10, "bitcode": True},
            {"name": "a.o", "position": 1, "path": "objects/a_1.o", "size": 9, "bitcode": False},
        ],
    }


def test_manifest_with_duplicate_member_names_but_distinct_paths_is_fine() -> None:
    manifest = parse_manifest(valid_manifest(), "m.json")
    assert [m.path for m in manifest.members] == ["objects/a.o", "objects/a_1.o"]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda d: d["members"][1].update(path="objects/./a.o"),
            "m.json: /members/1/path: duplicate member path",
        ),
        (
            lambda d: d["members"][1].update(position=0),
            "m.json: /members/1/position: negative, duplicate or huge position 0",
        ),
        (
            lambda d: d["members"][0].update(bitcode=1),
            "m.json: /members/0/bitcode: expected boolean, got integer",
        ),
        (lambda d: d.update(version=3), "m.json: /version: unsupported version 3"),
    ],
)
def test_manifest_defects_name_the_member(mutate: Any, expected: str) -> None:
    doc = valid_manifest()
    mutate(doc)
    with pytest.raises(BadInput) as info:
        parse_manifest(doc, "m.json")
    assert info.value.message.startswith(expected)


@settings(max_examples=examples(150), deadline=None)
@given(st.data())
def test_any_mutation_of_a_manifest_is_accepted_or_rejected_cleanly(data: st.DataObject) -> None:
    doc = valid_manifest()
    target = data.draw(st.sampled_from([doc, *doc["members"]]))
    key = data.draw(st.sampled_from([*sorted(target), "extra"]))
    if data.draw(st.booleans()):
        target.pop(key, None)
    else:
        target[key] = data.draw(_json_values)
    try:
        parse_manifest(doc, "m.json")
    except BadInput as err:
        assert err.message.startswith("m.json: /") and "\n" not in err.message


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_metas())
def test_planner_on_any_mutated_meta_exits_cleanly_with_one_line(doc: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "meta.json").write_text(json.dumps(doc))
        err = io.StringIO()
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            with contextlib.redirect_stderr(err):
                status = cli.run("plan", ["--replay", "meta.json"])
        finally:
            os.chdir(cwd)
        assert status == 2  # bad meta, or (valid) no index list to replay
        assert err.getvalue().startswith("dist-lto plan: error: ")
        assert err.getvalue().count("\n") == 1
        assert sorted(os.listdir(tmp)) == ["meta.json"]
