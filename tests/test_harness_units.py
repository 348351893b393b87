"""The harness's pure parts: command-line expansion, labels, globs, config, paths."""

from __future__ import annotations

import os
import shlex

import pytest
from buck2.cmdline import OutputRef, apply_options, expand, render_content, render_json
from buck2.graph import GraphError, check_relpath
from buck2.project import Label, Project, ProjectError, _glob_match, parse_buckconfig
from hypothesis import given, settings
from hypothesis import strategies as st

arg = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
name = st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True)
relpath = st.lists(name, min_size=1, max_size=4).map("/".join)


@given(st.lists(arg, max_size=6), st.from_regex(r"[a-z=-]{0,4}\{\}[a-z]{0,3}", fullmatch=True))
def test_format_applies_to_every_argument(items: list[str], fmt: str) -> None:
    assert apply_options(items, {"format": fmt}) == [fmt.replace("{}", i) for i in items]


@given(st.lists(arg, min_size=1, max_size=6), st.sampled_from(["", ",", " ", "::"]))
def test_delimiter_joins_everything_into_one_argument(items: list[str], delimiter: str) -> None:
    assert apply_options(items, {"delimiter": delimiter}) == [delimiter.join(items)]


@given(st.lists(arg, max_size=6))
def test_prepend_puts_a_separate_argument_before_each(items: list[str]) -> None:
    out = apply_options(items, {"prepend": "-I"})
    assert out[0::2] == ["-I"] * len(items) and out[1::2] == items


@given(st.lists(arg, max_size=6))
def test_shell_quoting_round_trips_through_a_shell_split(items: list[str]) -> None:
    quoted = apply_options(items, {"quote": "shell"})
    assert [shlex.split(q)[0] for q in quoted] == items


@given(st.lists(st.one_of(name, relpath.map(lambda p: {"a": p, "dir": False})), max_size=8))
def test_expand_lists_inputs_once_in_first_seen_order(nodes: list) -> None:
    exp = expand({"c": nodes + nodes})
    keys = [n["a"] for n in nodes if isinstance(n, dict)]
    assert exp.inputs == list(dict.fromkeys(keys))
    assert exp.argv == [n if isinstance(n, str) else n["a"] for n in nodes + nodes]


def test_hidden_artifacts_are_inputs_and_outputs_but_not_arguments() -> None:
    node = {
        "c": ["cc", {"a": "src/x.c", "dir": False}],
        "h": [{"a": "src/x.h", "dir": False}, {"o": "buck-out/x.d", "dir": False, "unit": "u"}],
        "format": "{}",
    }
    exp = expand(node)
    assert exp.argv == ["cc", "src/x.c"]
    assert sorted(exp.inputs) == ["src/x.c", "src/x.h"]
    assert exp.outputs == [OutputRef("buck-out/x.d", False, "u")]


def test_nested_options_apply_innermost_first() -> None:
    inner = {"c": ["a", "b"], "format": "-x{}"}
    assert expand({"c": [inner], "delimiter": ","}).argv == ["-xa,-xb"]


def test_ignore_artifacts_keeps_paths_and_drops_dependencies() -> None:
    exp = expand({"c": [{"a": "p/q", "dir": False}], "ignore_artifacts": True})
    assert exp.argv == ["p/q"] and exp.inputs == []


def test_written_command_lines_are_one_argument_per_line() -> None:
    assert render_content({"c": ["-O2", {"a": "x.o", "dir": False}]}) == "-O2\nx.o"
    assert render_content("verbatim\n") == "verbatim\n"


@given(
    st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(), name),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(name, inner, max_size=3)
        ),
        max_leaves=10,
    )
)
def test_json_without_markers_is_written_unchanged(value: object) -> None:
    assert render_json(value, []) == value


def test_json_markers_become_paths_and_command_lines_lists() -> None:
    inputs: list[str] = []
    value = {
        "obj": {"\u0000cmd": {"a": "o/x.o", "dir": False}},
        "out": {"\u0000cmd": {"o": "o/y.o", "dir": False, "unit": "u"}},
        "flags": {"\u0000cmd": {"c": ["-O2", {"a": "f", "dir": False}]}},
    }
    assert render_json(value, inputs) == {"obj": "o/x.o", "out": "o/y.o", "flags": ["-O2", "f"]}
    assert inputs == ["o/x.o", "f"]


@given(relpath)
def test_normalised_relative_paths_are_accepted(path: str) -> None:
    check_relpath(path)


@pytest.mark.parametrize("path", ["", "/abs", "../up", "a/../b", "a//b", "./a", "a/"])
def test_paths_that_escape_or_are_not_normalised_are_rejected(path: str) -> None:
    with pytest.raises(GraphError):
        check_relpath(path)


@given(relpath)
def test_glob_double_star_matches_every_path_and_a_path_matches_itself(path: str) -> None:
    assert _glob_match(path, "**")
    assert _glob_match(path, path)
    assert _glob_match(path, "**/" + path.rsplit("/", 1)[-1])


@pytest.mark.parametrize(
    ("path", "pattern", "matches"),
    [
        ("a.py", "*.py", True),
        ("d/a.py", "*.py", False),
        ("d/a.py", "**/*.py", True),
        ("d/e/a.py", "d/**/a.py", True),
        ("d/a.pyc", "**/*.py", False),
    ],
)
def test_glob_star_stays_within_one_component(path: str, pattern: str, matches: bool) -> None:
    assert _glob_match(path, pattern) is matches


@given(st.dictionaries(name, st.dictionaries(name, name, max_size=3), max_size=3))
def test_buckconfig_sections_parse_back(sections: dict[str, dict[str, str]]) -> None:
    text = "".join(
        f"[{s}]\n# comment\n" + "".join(f"  {k} = {v}\n" for k, v in values.items())
        for s, values in sections.items()
    )
    assert parse_buckconfig(text, ".buckconfig") == sections


def test_buckconfig_line_outside_a_section_names_file_and_line() -> None:
    with pytest.raises(ProjectError, match=r"^x:2: "):
        parse_buckconfig("# c\nkey = value\n", "x")


@pytest.fixture(scope="module")
def cells(tmp_path_factory: pytest.TempPathFactory) -> Project:
    root = tmp_path_factory.mktemp("cells")
    (root / ".buckconfig").write_text("[cells]\nroot = .\nprelude = prelude\n")
    return Project(root)


@settings(max_examples=50)
@given(st.sampled_from(["root", "prelude"]), st.lists(name, max_size=3).map("/".join), name)
def test_labels_parse_back_from_their_string(
    cells: Project, cell: str, package: str, target: str
) -> None:
    label = Label(cell, package, target)
    assert cells.parse_label(str(label), "root", "elsewhere") == label
    assert cells.parse_label(f":{target}", cell, package) == label
    assert cells.parse_label(f"@{label}", "root", "") == label


@pytest.mark.parametrize("text", ["//a/../b:c", "//a:", "nocell", "other//a:b", "//a//b:c"])
def test_malformed_labels_are_rejected(cells: Project, text: str) -> None:
    with pytest.raises(ProjectError):
        cells.parse_label(text, "root", "")


def test_load_paths_resolve_per_cell_and_relative_to_the_package(cells: Project) -> None:
    assert cells.load_path("@prelude//:prelude.bzl", "root", "") == "prelude/prelude.bzl"
    assert cells.load_path("//cxx:link.bzl", "prelude", "x") == os.path.join(
        "prelude", "cxx/link.bzl"
    )
    assert cells.load_path(":defs.bzl", "root", "examples") == "examples/defs.bzl"
    with pytest.raises(ProjectError, match=r"only \.bzl files"):
        cells.load_path("//a:BUCK", "root", "")
