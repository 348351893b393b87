"""Pieces of the planner that need no linker: index layout, response files, plan readers,
whole-archive tracking, and the command line's bad-input paths."""

from __future__ import annotations

import posixpath
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest
from dist_lto.errors import BadInput
from dist_lto.formats.meta import parse_meta
from dist_lto.formats.plans import (
    parse_archive_plan,
    parse_link_plan,
    parse_object_plan,
)
from dist_lto.formats.response_file import parse_response_file, quote_arg, response_file
from dist_lto.llvm import linkline
from dist_lto.llvm.index_step import Layout, is_raw_linker
from dist_lto.path_spelling import climb, is_plain
from hypothesis import given, settings
from hypothesis import strategies as st
from support.budget import examples
from support.tools import Llvm, run_cli

_parts = st.lists(st.sampled_from(["..", ".", "", "a", "b", "_", "x.o"]), min_size=1, max_size=8)


@settings(max_examples=examples(300), deadline=None)
@given(_parts, st.booleans())
def test_index_files_never_leave_the_index_dir(parts: list[str], absolute: bool) -> None:
    module = ("/" if absolute else "") + "/".join(parts)
    layout = Layout.for_inputs("out/index", [module, "obj/a.o"])
    written = posixpath.normpath(layout.index_file(module))
    assert written.startswith("out/index/")


@settings(max_examples=examples(200), deadline=None)
@given(_parts)
def test_plain_paths_are_exactly_the_normal_relative_ones(parts: list[str]) -> None:
    path = "/".join(parts)
    assert is_plain(path) == (
        bool(path)
        and posixpath.normpath(path) == path
        and not path.startswith(("/", ".."))
        and path != "."
    )


def test_linkers_are_told_from_compiler_drivers_by_name() -> None:
    for linker in ("ld.lld", "/usr/bin/ld.lld-22", "ld", "lld", "ld.gold", "ld64.lld"):
        assert is_raw_linker([linker, "-o", "x"]), linker
    for driver in ("clang", "/usr/lib/llvm-22/bin/clang++", "gcc", "cc", "ldd", "clang-22"):
        assert not is_raw_linker([driver]), driver


def test_climb_counts_levels_above_the_start() -> None:
    assert climb("a/b.o") == 0
    assert climb("../x.o") == 1
    assert climb("a/../../../x.o") == 2
    assert Layout.for_inputs("i", ["a/../../../x.o"]).prefix == "i/_/_/"
    assert Layout.for_inputs("i/", ["a.o"]).prefix == "i/"


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.text(max_size=12), max_size=6))
def test_response_file_round_trips_any_arguments(args: list[str]) -> None:
    args = [a.replace("\0", "") for a in args]
    assert parse_response_file(response_file(args).decode()) == args


@given(
    st.lists(st.text(st.characters(exclude_characters="'\"\\ \t\r\n\v\f\0"), min_size=1,
                     max_size=8), max_size=6),
    st.lists(st.text(" \t\r\n\v\f", min_size=1, max_size=3), min_size=7, max_size=7),
)  # fmt: skip
def test_a_response_file_without_quotes_splits_on_its_six_blanks_only(
    words: list[str], blanks: list[str]
) -> None:
    text = blanks[0] + "".join(w + b for w, b in zip(words, blanks[1:], strict=False))
    assert parse_response_file(text) == words


def test_clang_reads_our_response_file_as_written(llvm: Llvm, tmp_path: Path) -> None:
    args = ["-DA=one two", "-DB='q'", '-DC="d"', "-DD=back\\slash", "-DE=tab\there", "-DF="]
    (tmp_path / "args").write_bytes(response_file(args))
    (tmp_path / "t.c").write_text(
        "#define S(x) #x\n#define T(x) S(x)\nconst char *v[] = {T(A), T(B), T(C), T(D), T(E)};\n"
    )
    out = subprocess.run(
        [llvm.clang, "-E", "@args", "t.c"], cwd=tmp_path, check=True, capture_output=True, text=True
    ).stdout
    # Stringizing escapes `"` again (not a lone backslash) and turns the tab into a space.
    assert """{"one two", "'q'", "\\"d\\"", "back\\slash", "tab here"}""" in out


def test_unterminated_quote_in_a_response_file_is_bad_input() -> None:
    with pytest.raises(BadInput, match="unterminated ' quote"):
        parse_response_file("'abc", "f.args")
    assert quote_arg("") == "''"


def _meta_with_flags(*groups: tuple[list[str], list[str], list[str]]) -> Any:
    doc: dict[str, Any] = {
        "version": 1,
        "index_dir": "i",
        "link_plan_output": "l",
        "final_link_args_output": "f",
        "groups": [],
    }
    for n, (pre, args, post) in enumerate(groups):
        doc["groups"].append(
            {
                "pre_flags": pre,
                "post_flags": post,
                "linkables": [
                    {"kind": "args", "args": args},
                    {
                        "kind": "archive",
                        "index": n,
                        "manifest": f"m{n}.json",
                        "plan_output": f"p{n}",
                        "index_dir": f"d{n}",
                        "opt_objects_dir": f"o{n}",
                    },
                ],
            }
        )
    return parse_meta(doc, "meta.json")


def test_whole_archive_state_follows_every_flag_spelling_in_link_order() -> None:
    meta = _meta_with_flags(
        (["-Wl,--whole-archive"], [], []),
        ([], ["-Xlinker", "--no-whole-archive"], []),
        ([], ["-Wl,--as-needed,-whole-archive"], ["-Wl,--no-whole-archive"]),
        ([], [], []),
    )
    assert linkline.whole_archives(meta) == {0: True, 1: False, 2: True, 3: False}


def test_final_archive_args_keep_natives_lazy_and_drop_unloaded_bitcode() -> None:
    members = [
        linkline.FinalMember("n1.o", lazy=True),
        linkline.FinalMember("n2.o", lazy=True),
        linkline.FinalMember("opt/b.o", lazy=False),
        linkline.FinalMember("n3.o", lazy=True),
    ]
    assert linkline.final_archive_args(members, whole=False, raw_linker=False) == [
        "-Wl,--start-lib",
        "n1.o",
        "n2.o",
        "-Wl,--end-lib",
        "opt/b.o",
        "-Wl,--start-lib",
        "n3.o",
        "-Wl,--end-lib",
    ]
    assert linkline.final_archive_args(members, whole=True, raw_linker=True) == [
        "n1.o",
        "n2.o",
        "opt/b.o",
        "n3.o",
    ]


def test_plan_readers_reject_mistyped_fields_with_pointers() -> None:
    plan = {
        "version": 3,
        "index": 0,
        "path": "a.o",
        "is_bitcode": True,
        "largest": False,
        "size": 1,
        "index_file": None,
        "imports": [1],
        "archive_imports": [],
        "member_imports": [[0, "x"]],
        "opt_output": "o",
    }
    with pytest.raises(BadInput, match=r"^p.json: /member_imports/0/1: expected integer"):
        parse_object_plan(plan, "p.json")
    with pytest.raises(BadInput, match=r"^a.json: /members: missing required field"):
        parse_archive_plan(
            {
                "version": 3,
                "index": 0,
                "manifest": "m",
                "index_dir": "d",
                "opt_objects_dir": "o",
                "whole": False,
            },
            "a.json",
        )
    with pytest.raises(BadInput, match=r"^l.json: /archives/0/opt_members: expected integer"):
        parse_link_plan(
            {
                "version": 2,
                "bitcode_objects": [],
                "native_objects": [],
                "final_link_args": "f",
                "command": None,
                "declaration_imports": True,
                "archives": [
                    {"index": 0, "opt_members": "1", "native_members": 0, "unused_members": 0}
                ],
            },
            "l.json",
        )


# The command line: usage errors and bad input, without running a linker.


def test_plan_help_describes_the_command() -> None:
    result = run_cli(["plan", "--help"])
    assert result.returncode == 0
    assert result.stdout.startswith("usage: dist-lto plan")
    assert "--replay" in result.stdout and "docs/plan.md" in result.stdout


def test_plan_without_a_command_or_replay_is_a_usage_error(tmp_path: Path) -> None:
    result = run_cli(["plan", "meta.json"], cwd=tmp_path)
    assert result.returncode == 2
    assert "the index command is required" in result.stderr


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"{not json", "dist-lto plan: error: meta.json: not valid JSON:"),
        (b'{"version": 7}', "dist-lto plan: error: meta.json: /version: unsupported version 7"),
        (
            orjson.dumps(
                {
                    "version": 1,
                    "index_dir": "i",
                    "link_plan_output": "l",
                    "final_link_args_output": "f",
                    "groups": [{"linkables": [{"kind": "dylib"}]}],
                }
            ),
            "dist-lto plan: error: meta.json: /groups/0/linkables/0/kind: unknown kind 'dylib'",
        ),
    ],
)
def test_bad_meta_exits_2_with_one_line_and_writes_nothing(
    tmp_path: Path, content: bytes, expected: str
) -> None:
    (tmp_path / "meta.json").write_bytes(content)
    result = run_cli(["plan", "meta.json", "--", "clang"], cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(expected)
    assert result.stderr.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.json"]


def test_missing_manifest_is_bad_input_naming_it(tmp_path: Path) -> None:
    doc = _meta_with_flags(([], [], []))
    raw = {
        "version": 1,
        "index_dir": doc.index_dir,
        "link_plan_output": "l",
        "final_link_args_output": "f",
        "groups": [
            {
                "linkables": [
                    {
                        "kind": "archive",
                        "index": 0,
                        "manifest": "gone/manifest.json",
                        "plan_output": "p",
                        "index_dir": "d",
                        "opt_objects_dir": "o",
                    }
                ]
            }
        ],
    }
    (tmp_path / "meta.json").write_bytes(orjson.dumps(raw))
    result = run_cli(["plan", "--replay", "meta.json"], cwd=tmp_path)
    assert result.returncode == 2
    assert "gone/manifest.json: cannot read archive manifest" in result.stderr


def test_replay_without_an_index_list_is_bad_input(tmp_path: Path) -> None:
    raw = {
        "version": 1,
        "index_dir": "idx",
        "link_plan_output": "l",
        "final_link_args_output": "f",
        "groups": [],
    }
    (tmp_path / "meta.json").write_bytes(orjson.dumps(raw))
    result = run_cli(["plan", "--replay", "meta.json"], cwd=tmp_path)
    assert result.returncode == 2
    assert "idx/index.list: index list missing" in result.stderr


def test_unrunnable_index_command_is_bad_input(tmp_path: Path) -> None:
    raw = {
        "version": 1,
        "index_dir": "idx",
        "link_plan_output": "l",
        "final_link_args_output": "f",
        "groups": [],
    }
    (tmp_path / "meta.json").write_bytes(orjson.dumps(raw))
    result = run_cli(["plan", "meta.json", "--", "./no-such-linker"], cwd=tmp_path)
    assert result.returncode == 2
    assert "cannot run the index command './no-such-linker'" in result.stderr


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.slow  # plans a large synthetic link twice
def test_large_replay_in_workers_writes_what_one_process_writes_and_reruns_alike(
    tmp_path: Path,
) -> None:
    """Above PARALLEL_MIN_OBJECTS the planner prefetches `.imports`, forks workers and
    links unnamed files into place; a rerun over existing plans renames instead. All
    three must write the same bytes and leave no temporary file."""
    from dist_lto.planning.planner import PARALLEL_MIN_OBJECTS
    from support import synthetic_link as bench_plan

    n = PARALLEL_MIN_OBJECTS * 10 // 9 + 100  # 90% of the modules are objects
    runs = {}
    for jobs in ("1", "2"):
        root = tmp_path / f"jobs{jobs}"
        synthetic = bench_plan.generate(root, n)
        assert synthetic.objects >= PARALLEL_MIN_OBJECTS
        done = run_cli(["plan", "--replay", "--jobs", jobs, "meta.json"], cwd=root)
        assert done.returncode == 0, done.stderr
        runs[jobs] = _files(root)
    assert runs["1"] == runs["2"]
    done = run_cli(["plan", "--replay", "--jobs", "2", "meta.json"], cwd=tmp_path / "jobs2")
    assert done.returncode == 0, done.stderr
    assert _files(tmp_path / "jobs2") == runs["1"]
    assert not [name for name in runs["1"] if ".tmp-" in name]
