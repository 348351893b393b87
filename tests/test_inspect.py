"""`dist-lto inspect` on the captured example and on synthetic planned links."""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
from conftest import REPO, run_cli
from dist_lto.commands import inspect
from hypothesis import given, settings
from hypothesis import strategies as st

CAPTURED = REPO / "examples" / "captured"
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def captured(tmp_path: Path) -> Path:
    dest = tmp_path / "captured"
    shutil.copytree(CAPTURED, dest)
    return dest


def test_summary_of_the_captured_link_counts_inputs_backends_and_imports(captured: Path) -> None:
    result = run_cli(["inspect", "meta.json"], cwd=captured)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1] == "objects: 2 (1 bitcode, 1 native)"
    assert lines[2] == (
        "archives: 2, members: 3 (2 used bitcode, 0 native, 1 bitcode never loaded)"
    )
    assert "backends: 3" in lines
    assert "imports per backend: min 0, median 1, p95 2, max 2" in lines
    most = lines.index("most-imported modules (imported by how many backends, top 10):")
    assert lines[most + 1].split() == [
        "2",
        "prep/util/objects/util.o",
        "(archive",
        "0",
        "member",
        "0)",
    ]
    longest = next(i for i, x in enumerate(lines) if x.startswith("longest backends"))
    # main.o reads itself plus util.o and text.o: the three files' sizes.
    main_input = sum(
        (captured / p).stat().st_size
        for p in ("obj/main.o", "prep/util/objects/util.o", "thin/text.o")
    )
    assert lines[longest + 1].split()[:3] == [f"{main_input / 1024:.1f}", "KiB", "obj/main.o"]


def test_dot_graph_has_exactly_the_planned_import_edges(captured: Path) -> None:
    result = run_cli(["inspect", "meta.json", "--dot", "g.dot"], cwd=captured)
    assert result.returncode == 0, result.stderr
    text = (captured / "g.dot").read_text()
    assert text.startswith("digraph imports {")
    edges = set(re.findall(r"^  (\w+) -> (\w+);$", text, re.M))
    # main imports util.o (archive 0 member 0) and text.o (archive 1 member 0);
    # text.o imports util.o.
    assert edges == {("o0", "a0m0"), ("o0", "a1m0"), ("a1m0", "a0m0")}
    assert 'o0 [label="obj/main.o", shape=box];' in text


def test_svg_is_well_formed_with_one_circle_per_module_and_one_path_per_edge(
    captured: Path,
) -> None:
    result = run_cli(["inspect", "meta.json", "--svg", "g.svg"], cwd=captured)
    assert result.returncode == 0, result.stderr
    root = ET.parse(captured / "g.svg").getroot()
    assert root.tag == f"{SVG}svg"
    assert len(root.findall(f"{SVG}circle")) == 3
    assert len(root.findall(f"{SVG}path")) == 3
    labels = sorted(t.text or "" for t in root.findall(f"{SVG}text"))
    assert "obj/main.o" in labels and "thin/text.o" in labels


def _synthetic_link(n: int) -> inspect.Link:
    modules = {}
    for i in range(n):
        imports = [(-1, (i + d) % n) for d in (1, 2, 3)]
        modules[(-1, i)] = inspect._Module(
            f"obj/{i}.o", f"object {i}", 100 + i, True, True, imports
        )
    return inspect.Link("meta.json", modules, {}, "final.args")


def test_svg_of_a_large_link_keeps_the_most_connected_modules() -> None:
    root = ET.fromstring(inspect.svg(_synthetic_link(inspect.SVG_NODE_LIMIT + 50)))
    assert len(root.findall(f"{SVG}circle")) == inspect.SVG_NODE_LIMIT
    assert "most connected" in (root.find(f"{SVG}title").text or "")


def test_longest_backend_is_the_one_reading_the_most_bytes() -> None:
    link = _synthetic_link(10)
    text = inspect.summary(link, top=1)
    # object 6 imports 7, 8, 9: 106 + 107 + 108 + 109 bytes, the most of any.
    assert "       430 B  obj/6.o (object 6, 3 imports)\n" in text


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=60), st.sampled_from([0.5, 0.95]))
def test_percentile_is_the_nearest_rank(values: list[int], fraction: float) -> None:
    values.sort()
    p = inspect.percentile(values, fraction)
    assert p in values
    counts = Counter(v <= p for v in values)
    assert counts[True] >= fraction * len(values)
    assert sum(v < p for v in values) < fraction * len(values)


def test_inspect_of_an_unplanned_link_names_the_missing_plan(captured: Path) -> None:
    (captured / "out/plans/0.json").unlink()
    result = run_cli(["inspect", "meta.json"], cwd=captured)
    assert result.returncode == 2
    assert result.stderr == (
        "dist-lto inspect: error: out/plans/0.json: cannot read object plan:"
        " No such file or directory\n"
    )


def test_inspect_of_a_mistyped_plan_names_the_field(captured: Path) -> None:
    path = captured / "out/archive-plans/1.json"
    path.write_text(path.read_text().replace('"opt": true', '"opt": "yes"'))
    result = run_cli(["inspect", "meta.json"], cwd=captured)
    assert result.returncode == 2
    assert "out/archive-plans/1.json: /members/0/opt: expected boolean, got string" in (
        result.stderr
    )
