"""`dist-lto inspect` on the captured example, on a real planned link (Lua) and on a
synthetic planned link of 10,000 modules; the HTML report is looked at in a real
headless browser."""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import orjson
import pytest
from dist_lto.report import drawing, model, text, timeline
from hypothesis import given, settings
from hypothesis import strategies as st
from support import browser, synthetic_link, workloads
from support.budget import examples
from support.lua_link import PREPARE_ARGV, lua_meta
from support.slow import slow_fixture
from support.tools import REPO, Llvm, run_cli

SVG = "{http://www.w3.org/2000/svg}"


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
    assert lines[most + 1].split() == ["2", "libutil.a(util.o)"]
    assert lines[most + 2].split() == ["1", "libtext.a(text.o)"]
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
    assert "obj/main.o" in labels and "libtext.a(text.o)" in labels


def _synthetic_link(n: int) -> model.Link:
    """Object i imports objects i+1, i+2 and i+3 (modulo n)."""
    modules = {}
    for i in range(n):
        imports = [(-1, (i + d) % n) for d in (1, 2, 3)]
        modules[(-1, i)] = model.Module(f"obj/{i}.o", f"object {i}", 100 + i, True, True, imports)
    return model.Link("meta.json", modules, {}, "final.args")


def test_svg_of_a_large_link_keeps_the_most_connected_modules() -> None:
    root = ET.fromstring(drawing.svg(_synthetic_link(drawing.SVG_NODE_LIMIT + 50)))
    assert len(root.findall(f"{SVG}circle")) == drawing.SVG_NODE_LIMIT
    assert "most connected" in (root.find(f"{SVG}title").text or "")


def test_longest_backend_is_the_one_reading_the_most_bytes() -> None:
    link = _synthetic_link(10)
    summary = text.summary(link, top=1)
    # object 6 imports 7, 8, 9: 106 + 107 + 108 + 109 bytes, the most of any.
    assert "       430 B  obj/6.o (3 imports)\n" in summary


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=60), st.sampled_from([0.5, 0.95]))
def test_percentile_is_the_nearest_rank(values: list[int], fraction: float) -> None:
    values.sort()
    p = model.percentile(values, fraction)
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


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [("member_imports", [[0, 7]], "imports member 7 of archive 0, which its plan lacks"),
     ("imports", [9], "imports object 9, which the meta does not declare"),
     ("opt_output", "out/opt/elsewhere.o", "/opt_output 'out/opt/elsewhere.o' is not the")],
)  # fmt: skip
def test_inspect_and_link_refuse_an_inconsistent_plan_with_the_same_line(
    captured: Path, key: str, value: object, problem: str
) -> None:
    plan = captured / "out/plans/0.json"
    document = orjson.loads(plan.read_bytes())
    document[key] = value
    plan.write_bytes(orjson.dumps(document))
    lines = []
    for argv in (["inspect", "meta.json"], ["link", "--no-cache", "meta.json", "--", "clang"]):
        result = run_cli(argv, cwd=captured)
        assert result.returncode == 2, result.stderr
        (line,) = result.stderr.splitlines()
        assert f"error: out/plans/0.json: {problem}" in line
        lines.append(line.split(" error: ", 1)[1])
    assert lines[0] == lines[1]
    assert not (captured / "out/opt").exists()


def _dot_edges(path: Path) -> set[tuple[str, str]]:
    return set(re.findall(r"^  (\w+) -> (\w+);$", path.read_text(), re.M))


def test_focused_dot_holds_the_modules_importers_and_imports_only(captured: Path) -> None:
    result = run_cli(
        ["inspect", "meta.json", "--focus", "thin/text.o", "--depth", "1", "--dot", "g.dot"],
        cwd=captured,
    )
    assert result.returncode == 0, result.stderr
    # main.o imports text.o, which imports util.o; main.o -> util.o joins no neighbouring
    # columns (both sides of text.o), so it is left out.
    assert _dot_edges(captured / "g.dot") == {("o0", "a1m0"), ("a1m0", "a0m0")}
    assert (
        'a1m0 [label="libtext.a(text.o)", shape=ellipse, style=bold];'
        in (captured / "g.dot").read_text()
    )


def test_focus_on_an_unknown_module_is_bad_input(captured: Path) -> None:
    result = run_cli(["inspect", "meta.json", "--focus", "nope.o", "--dot", "g.dot"], cwd=captured)
    assert result.returncode == 2
    assert result.stderr == "dist-lto inspect: error: meta.json: no module 'nope.o' in this link\n"
    assert not (captured / "g.dot").exists()


@pytest.mark.parametrize(
    ("asked", "suggested"),
    [("libutil.a(utl.o)", "libutil.a(util.o)"),
     ("prep/util/objects/utill.o", "prep/util/objects/util.o"),
     ("obj/mian.o", "obj/main.o")],
)  # fmt: skip
def test_focus_on_a_misspelt_module_suggests_the_closest_names(
    captured: Path, asked: str, suggested: str
) -> None:
    result = run_cli(["inspect", "meta.json", "--focus", asked], cwd=captured)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"dist-lto inspect: error: meta.json: no module {asked!r} in this")
    assert suggested in line.split("did you mean ")[1].split(", ")[0:3]


def test_focus_takes_a_members_archive_name_or_its_path(captured: Path) -> None:
    for i, name in enumerate(("libutil.a(util.o)", "prep/util/objects/util.o")):
        done = run_cli(["inspect", "meta.json", "--focus", name, "--dot", f"{i}.dot"],
                       cwd=captured)  # fmt: skip
        assert done.returncode == 0, done.stderr
    assert (captured / "0.dot").read_text() == (captured / "1.dot").read_text()


def test_depth_below_one_is_a_usage_error(captured: Path) -> None:
    result = run_cli(
        ["inspect", "meta.json", "--focus", "obj/main.o", "--depth", "0"], cwd=captured
    )
    assert result.returncode == 2
    assert "--depth must be at least 1" in result.stderr


def test_neighbourhood_reaches_depth_steps_both_ways_and_joins_neighbouring_columns() -> None:
    link = _synthetic_link(50)  # object i imports i+1, i+2, i+3
    around = model.neighbourhood(link, (-1, 0), 2)
    numbers = {c: [k[1] for k in keys] for c, keys in around.columns.items()}
    assert numbers == {-2: [44, 45, 46], -1: [47, 48, 49], 0: [0], 1: [1, 2, 3], 2: [4, 5, 6]}
    column = {k: c for c, keys in around.columns.items() for k in keys}
    assert around.edges and all(column[b] == column[a] + 1 for a, b in around.edges)
    assert ((-1, 3), (-1, 6)) in around.edges and ((-1, 49), (-1, 0)) in around.edges


def test_neighbourhood_svg_cuts_crowded_columns_and_counts_the_rest() -> None:
    n = drawing.COLUMN_LIMIT + 25
    modules = {(-1, i): model.Module(f"obj/{i}.o", f"object {i}", 10, True, True, [(-1, 0)])
               for i in range(1, n + 1)}  # fmt: skip
    modules[(-1, 0)] = model.Module("obj/0.o", "object 0", 10, True, True, [])
    link = model.Link("meta.json", modules, {}, "final.args")
    root = ET.fromstring(drawing.neighbourhood_svg(link, model.neighbourhood(link, (-1, 0), 1)))
    assert len(root.findall(f"{SVG}circle")) == drawing.COLUMN_LIMIT + 1
    assert "… 25 more" in [t.text for t in root.findall(f"{SVG}text")]


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.integers(0, 5000), max_size=80))
def test_buckets_count_every_value_once_in_the_range_it_names(values: list[int]) -> None:
    rows = model.buckets(values)
    assert sum(c for _, c in rows) == len(values)
    for label, count in rows:
        low, _, high = label.partition("-")
        inside = [v for v in values if int(low) <= v <= int(high or low)]
        assert len(inside) == count


class _Page(HTMLParser):
    """What a test asks of the report: its headings, table rows and any outside reference."""

    def __init__(self) -> None:
        super().__init__()
        self.headings: list[str] = []
        self.rows = 0
        self.outside: list[str] = []
        self.svgs = 0
        self._in_h2 = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "h2":
            self._in_h2 = True
            self.headings.append("")
        self.rows += tag == "tr"
        self.svgs += tag == "svg"
        if tag in ("script", "link", "img", "iframe") or any(
            name in ("src", "href") and value for name, value in attrs
        ):
            self.outside.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "h2":
            self._in_h2 = False

    def handle_data(self, data: str) -> None:
        if self._in_h2:
            self.headings[-1] += data


def _page(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text())
    return page


def test_html_report_is_self_contained_with_every_section(captured: Path) -> None:
    result = run_cli(["inspect", "meta.json", "--html", "report.html"], cwd=captured)
    assert result.returncode == 0, result.stderr
    page = _page(captured / "report.html")
    assert page.outside == []
    assert [h.split(" (")[0] for h in page.headings] == [
        "Most-imported modules", "Top importers", "Fan-out and fan-in",
        "Biggest backends by input size", "Never-loaded members",
        "Neighbourhood of libutil.a(util.o)", "Final link arguments",
    ]  # fmt: skip
    assert page.svgs == 3  # two distributions and the neighbourhood
    assert "<li><code>libutil.a(unused.o)</code></li>" in (captured / "report.html").read_text()


# ---------------------------------------------------------------------------------
# In a real browser


@pytest.fixture(scope="session")
@slow_fixture
def chromium() -> str:
    found = browser.chromium()
    if found is None:
        pytest.fail("chromium is missing: run `bash .ci/setup` (installs Debian's chromium)")
    return found


def _looks_drawn(png: Path, *, members_drawn: bool) -> None:
    """Not one colour: text and the distributions' bars were drawn, and archive members
    among the graph's nodes when the neighbourhood holds some."""
    counts = browser.colours(png)
    assert len(counts) > 20, counts.most_common(5)
    _, most = counts.most_common(1)[0]
    assert most < 0.98 * sum(counts.values())
    assert counts[(0x3B, 0x6F, 0xB6)] > 1000, "no bars in the object colour"
    if members_drawn:
        assert counts[(0x3C, 0x9A, 0x5F)] > 0, "no archive member drawn in its colour"


def test_report_of_a_10000_module_link_reads_in_a_real_browser(
    tmp_path: Path, chromium: str
) -> None:
    synthetic_link.generate(tmp_path, 10_000)
    done = run_cli(["plan", "--replay", "meta.json"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    done = run_cli(["inspect", "meta.json", "--html", "report.html", "--top", "20"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    page = _page(tmp_path / "report.html")
    assert page.outside == []
    # Rankings and one neighbourhood, never the whole graph: the page stays small.
    assert page.rows < 200
    most = re.search(r"^ +(\d+)  (\S+)$", done.stdout.split("most-imported modules")[1], re.M)
    assert most is not None
    assert f"Neighbourhood of {most[2]}" in page.headings
    assert f"… {int(most[1]) - drawing.COLUMN_LIMIT} more" in (tmp_path / "report.html").read_text()
    browser.screenshot(chromium, tmp_path / "report.html", tmp_path / "report.png")
    _looks_drawn(tmp_path / "report.png", members_drawn=False)

    focus = "prep/a0/objects/m5.o"
    done = run_cli(["inspect", "meta.json", "--focus", focus, "--depth", "2", "--dot", "g.dot"],
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    edges = _dot_edges(tmp_path / "g.dot")
    assert edges and len(edges) < 2000
    assert any(b == "a0m5" for _, b in edges) or any(a == "a0m5" for a, _ in edges)


def test_report_of_a_real_link_reads_in_a_real_browser(
    lua_objects: workloads.Build, llvm: Llvm, tmp_path: Path, chromium: str
) -> None:
    root = tmp_path / "lua"
    shutil.copytree(lua_objects.root, root, symlinks=True)
    subprocess.run([llvm.ar, "rcs", "liblua.a", *lua_objects.library], cwd=root, check=True)
    done = run_cli(PREPARE_ARGV, cwd=root)
    assert done.returncode == 0, done.stderr
    meta = lua_meta(lua_objects)
    (root / "meta.json").write_bytes(orjson.dumps(meta))
    done = run_cli(["plan", "meta.json", "--", llvm.clang, "-fuse-ld=lld", "-O2", "-o", "lua"],
                   cwd=root)  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = run_cli(["inspect", "meta.json", "--html", "report.html", "--focus", "obj/lua.o"],
                   cwd=root)  # fmt: skip
    assert done.returncode == 0, done.stderr
    page = _page(root / "report.html")
    assert "Neighbourhood of obj/lua.o" in page.headings
    never = re.search(r"(\d+) bitcode never loaded", done.stdout)
    assert never is not None and f"Never-loaded members ({never[1]})" in page.headings
    browser.screenshot(chromium, root / "report.html", root / "report.png")
    _looks_drawn(root / "report.png", members_drawn=True)


# ---------------------------------------------------------------------------------
# Without a build system: LLD's job file, and where the time went


@pytest.fixture
@slow_fixture
def dtlto_link(tmp_path: Path, llvm: Llvm, dist_lto_cmd: list[str]) -> Path:
    """examples/c linked through LLD's DTLTO and our distributor, stats.c and text.c in
    an archive; the job file kept (`-Wl,--save-temps`) and the distributor's trace."""
    root = tmp_path / "dtlto"
    root.mkdir()
    for source in ("main.c", "stats.c", "text.c", "stats.h"):
        shutil.copy(REPO / "examples" / "c" / source, root / source)
    for source in ("main.c", "stats.c", "text.c"):
        subprocess.run([llvm.clang, "-flto=thin", "-O2", "-c", source], cwd=root, check=True)
    subprocess.run([llvm.ar, "rcs", "libstats.a", "stats.o", "text.o"], cwd=root, check=True)
    subprocess.run([llvm.clang, "-flto=thin", "-fuse-ld=lld", "-O2", "main.o", "libstats.a",
                    "-lm", "-o", "prog", "-Wl,--save-temps",
                    f"-fthinlto-distributor={dist_lto_cmd[0]}", "-Xthinlto-distributor=distribute",
                    "-Xthinlto-distributor=--trace=t.json", "-Xthinlto-distributor=--no-cache"],
                   cwd=root, check=True, capture_output=True)  # fmt: skip
    return root


def job_file_of(root: Path) -> str:
    (found,) = root.glob("prog.*.dist-file.json")
    return found.name


def test_a_dtlto_job_file_is_inspected_with_members_named_as_linkers_name_them(
    dtlto_link: Path,
) -> None:
    job_file = job_file_of(dtlto_link)
    done = run_cli(["inspect", job_file], cwd=dtlto_link)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"DTLTO job file: {job_file}"
    assert "archives: 1, members: 2 (2 used bitcode, 0 native, 0 bitcode never loaded)" in lines
    assert "backends: 3" in lines and lines[-1] == "linker output: prog"
    most = lines.index("most-imported modules (imported by how many backends, top 10):")
    assert sorted(lines[most + 1 : most + 3]) == [
        "       1  libstats.a(stats.o)", "       1  libstats.a(text.o)"]  # fmt: skip
    longest = lines.index("longest backends by input size (module + imports, top 10):")
    main_input = sum((dtlto_link / job).stat().st_size for job in ["main.o"]) + sum(
        p.stat().st_size for p in dtlto_link.glob("libstats.a(*.o at *).*.o")
        if "native" not in p.name)  # fmt: skip
    assert lines[longest + 1].split() == [f"{main_input / 1024:.1f}", "KiB", "main.o", "(2",
                                          "imports)"]  # fmt: skip
    done = run_cli(["inspect", job_file, "--focus", "libstats.a(text.o)", "--dot", "g.dot"],
                   cwd=dtlto_link)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert 'label="libstats.a(text.o)", shape=ellipse, style=bold' in (
        dtlto_link / "g.dot").read_text()  # fmt: skip


def test_a_trace_gives_the_longest_backends_and_the_critical_path(dtlto_link: Path) -> None:
    done = run_cli(["inspect", job_file_of(dtlto_link), "--trace", "t.json"], cwd=dtlto_link)
    assert done.returncode == 0, done.stderr
    trace = orjson.loads((dtlto_link / "t.json").read_bytes())["traceEvents"]
    jobs = [e for e in trace if e.get("cat") == "job"]
    section = done.stdout.split("where the time went (t.json): ")[1].splitlines()
    assert section[1] == "longest backends (top 10):"
    shown = [float(line.split()[0]) for line in section[2:5]]
    assert shown == sorted((round(e["dur"] / 1e6, 3) for e in jobs), reverse=True)
    assert all(re.search(r"(main\.o|libstats\.a\((stats|text)\.o\)) \(\w+, worker \d\)$", line)
               for line in section[2:5])  # fmt: skip
    assert section[5].startswith("critical path (")
    path = [line.split() for line in section[6:]]
    assert path and all(step[0] == "at" for step in path)
    starts = [float(step[1]) for step in path]
    assert starts == sorted(starts)
    last = max(jobs, key=lambda e: e["ts"] + e["dur"])
    assert float(path[-1][1]) == round(last["ts"] / 1e6, 3)
    assert {step[-1] for step in path} == {f"{last['tid']})"}  # one worker, in a row


def timeline_of(*slices: tuple[str, int, int, int]) -> timeline.Timeline:
    """(name, thread, start, duration) slices; thread 0 is the final link's."""
    jobs = tuple(timeline.Slice(n, "compiled", t, s, d) for n, t, s, d in slices if t)
    link = next((timeline.Slice(n, "link", 0, s, d) for n, t, s, d in slices if not t), None)
    return timeline.Timeline("t.json", jobs, link, {})


@pytest.mark.parametrize(
    ("slices", "path"),
    [([("a", 1, 0, 10), ("b", 1, 10, 20), ("c", 2, 0, 25), ("d", 2, 26, 2)], ["a", "b"]),
     ([("a", 1, 0, 10), ("b", 1, 10, 20), ("c", 2, 0, 25), ("d", 2, 26, 14)], ["c", "d"]),
     ([("a", 1, 0, 10), ("b", 1, 10, 20), ("c", 2, 0, 25), ("d", 2, 26, 2),
       ("final link", 0, 31, 4)], ["a", "b", "final link"]),
     ([("a", 1, 0, 10), ("b", 1, 50, 20), ("c", 2, 0, 60)], ["a", "b"])],
)  # fmt: skip
def test_the_critical_path_follows_each_worker_back_from_the_last_end(
    slices: list[tuple[str, int, int, int]], path: list[str]
) -> None:
    """The last slice to end, then, on its worker, each job before it (a gap between
    two is the worker's own time, on the path too); the final link waits for the job
    that ended last before it started."""
    found = timeline_of(*slices).critical_path()
    assert [s.name for s in found] == path


def test_a_trace_of_the_final_link_ends_the_critical_path(
    captured: Path, llvm: Llvm, dist_lto_cmd: list[str]
) -> None:
    done = subprocess.run([*dist_lto_cmd, "link", "--trace=t.json", "--no-cache", "meta.json",
                           "--", llvm.clang, "-fuse-ld=lld", "-O2", "-o", "app"],
                          cwd=captured, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = run_cli(["inspect", "meta.json", "--trace", "t.json"], cwd=captured)
    assert done.returncode == 0, done.stderr
    path = done.stdout.split("critical path (")[1].splitlines()[1:]
    assert path[-1].endswith("final link (link, link)")
    assert any("libutil.a(util.o)" in line or "libtext.a(text.o)" in line or "obj/main.o" in line
               for line in path[:-1])  # fmt: skip


def test_a_trace_of_another_link_or_not_a_trace_is_bad_input(
    captured: Path, dtlto_link: Path
) -> None:
    shutil.copy(dtlto_link / "t.json", captured / "other.json")
    done = run_cli(["inspect", "meta.json", "--trace", "other.json"], cwd=captured)
    assert (done.returncode, done.stderr) == (
        2,
        "dist-lto inspect: error: other.json: none of its 3 jobs is a module of meta.json\n",
    )
    (captured / "bad.json").write_text('{"traceEvents": 3}')
    done = run_cli(["inspect", "meta.json", "--trace", "bad.json"], cwd=captured)
    assert (done.returncode, done.stderr) == (
        2,
        "dist-lto inspect: error: bad.json: /traceEvents: expected array, got integer\n",
    )


def test_report_with_a_trace_draws_the_critical_path_in_a_real_browser(
    dtlto_link: Path, chromium: str
) -> None:
    done = run_cli(["inspect", job_file_of(dtlto_link), "--trace", "t.json", "--html",
                    "report.html"], cwd=dtlto_link)  # fmt: skip
    assert done.returncode == 0, done.stderr
    page = _page(dtlto_link / "report.html")
    assert page.outside == []
    assert page.headings[:3] == [
        "Where the time went (t.json)",
        "Longest backends (top 10)",
        f"Critical path ({done.stdout.count('  at ')} slices)",
    ]
    assert "<code>libstats.a(text.o)</code>" in (dtlto_link / "report.html").read_text()
    browser.screenshot(chromium, dtlto_link / "report.html", dtlto_link / "report.png")
    counts = browser.colours(dtlto_link / "report.png")
    red = tuple(int(drawing.CRITICAL_COLOUR[i : i + 2], 16) for i in (1, 3, 5))
    assert counts[red] > 200, "no critical path drawn"
    assert counts[tuple(int(drawing.SLICE_COLOUR[i : i + 2], 16) for i in (1, 3, 5))] > 0 or (
        done.stdout.count("  at ") == 3
    ), "no other job drawn"


def test_the_meta_a_one_command_link_wrote_is_inspected_with_its_trace(
    dtlto_link: Path, llvm: Llvm, dist_lto_cmd: list[str]
) -> None:
    """`dist-lto link --out-dir DIR -- LINK LINE` writes the meta itself: no build system
    anywhere, members named from the archive it prepared."""
    done = subprocess.run([*dist_lto_cmd, "link", "--out-dir", "app.lto", "--trace", "lt.json",
                           "--quiet", "--", llvm.clang, "-fuse-ld=lld", "-O2", "main.o",
                           "libstats.a", "-lm", "-o", "app"],
                          cwd=dtlto_link, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = run_cli(["inspect", "app.lto/meta.json", "--trace", "lt.json"], cwd=dtlto_link)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    most = lines.index("most-imported modules (imported by how many backends, top 10):")
    assert sorted(lines[most + 1 : most + 3]) == [
        "       1  libstats.a(stats.o)", "       1  libstats.a(text.o)"]  # fmt: skip
    path = done.stdout.split("critical path (")[1].splitlines()[1:]
    assert path[-1].endswith("final link (link, link)")
