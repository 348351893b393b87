#!/usr/bin/env python3
"""Real Buck2 building Lua and zstd with our rules: distributed against in-process ThinLTO.

A scratch Buck2 project (a copy of this one's prelude, toolchain and dist-lto sources)
gets a package per workload, holding a copy of its Debian source tree and a BUCK file:
a `cxx_library` of the library units (each source with its own flags, the native
units with `-fno-lto`) and two binaries of the main units linking it, `NAME`
(`dist_lto = True`: prepare, plan, one opt action per module, final link, each a
Buck2 action) and `NAME-inprocess` (`lto = True`: one link action, LLD running the
backends on its threads). Every figure is the same Buck2 binary, local execution, the
client's wall clock; a new daemon in a new isolation dir (so an empty buck-out) for each
full build, and one per round and workload for the link and incremental builds:

    full         `buck2 build //NAME:BIN` from nothing: every compile and the link
    link         `buck2 build //NAME:BIN` once the library is built: the main units'
                 compiles and the link
    incremental  one library source changed (a new exported function), then the same
                 build again; the actions it ran, counted by category

Each build's `tail` is the part of it after its last compile ended (from the event
log): what the link costs beyond what overlapped the compiles.

The two binaries alternate which goes first, round by round. Each built binary passes
the workload's functional check. Last lines: `buck2-dist/inprocess: <ratio>`, the
median full-build wall time of the distributed links over the in-process ones, summed
over the workloads, and `buck2-incremental-dist/inprocess: <ratio>`, the same for the
incremental builds. The distributed links' opt actions go through the opt worker
unless `--no-worker` (`-c dist_lto.opt_worker=false`).

Usage: .venv/bin/python bench/buck2.py [--workloads lua,zstd] [--rounds 3]
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support import workloads
from support.real_buck2 import Buck2, scratch_project

VARIANTS = {"dist": "", "inprocess": "-inprocess"}
"""Each variant's binary target: the workload's name and this suffix."""

SOURCE_TREES = {"lua": ("src",), "zstd": ("lib", "programs")}
"""The parts of each Debian source tree a build reads, copied into the package."""

HEADERS = {"lua": ["src/*.h"], "zstd": ["lib/**/*.h", "programs/*.h"]}

EDITED = {"lua": "src/lstring.c", "zstd": "lib/common/entropy_common.c"}
"""The library source an incremental round changes."""

LINK_CATEGORIES = ("thin_lto_prepare", "thin_lto_plan", "thin_lto_opt", "thin_lto_link", "cxx_link")
CATEGORIES = ("cxx_compile", "archive", *LINK_CATEGORIES)

EXTRA_CONFIG: dict[str, str] = {}
"""`-c` values of every build, beside the machine's (`--no-worker`)."""


def _star(value: object) -> str:
    """A Starlark literal of strings, lists and tuples (JSON spells them alike)."""
    if isinstance(value, tuple):
        return "(" + ", ".join(_star(v) for v in value) + ")"
    return orjson.dumps(value).decode()


def add_workload(root: Path, name: str) -> None:
    """Package `name` in the project at `root`: its sources (without the upstream BUCK
    files, which would split it into packages of their own) and its BUCK file."""
    src = workloads.source_dir(name)
    pkg = root / name
    for tree in SOURCE_TREES[name]:
        shutil.copytree(src / tree, pkg / tree, ignore=shutil.ignore_patterns("BUCK"))
    main, lib, link_flags = workloads.units(name, pkg)

    def entry(unit: workloads.Unit) -> str:
        # Flags name directories relative to the project root: Buck2 runs actions there.
        flags = [f.replace(f"{root}/", "") for f in unit.flags]
        source = str(Path(unit.source).relative_to(pkg))
        return _star((source, flags if unit.lto else [*flags, "-fno-lto"]))

    headers = f"glob({_star(HEADERS[name])})"
    srcs = "[\n" + "".join(f"        {entry(u)},\n" for u in main) + "    ]"
    lib_srcs = "[\n" + "".join(f"        {entry(u)},\n" for u in lib) + "    ]"
    text = [
        f'cxx_library(\n    name = "{name}-lib",\n    srcs = {lib_srcs},\n'
        f"    headers = {headers},\n)\n"
    ]
    for variant, suffix in VARIANTS.items():
        mode = "dist_lto = True" if variant == "dist" else "lto = True"
        text.append(
            f'\ncxx_binary(\n    name = "{name}{suffix}",\n    srcs = {srcs},\n'
            f'    headers = {headers},\n    deps = [":{name}-lib"],\n'
            f"    linker_flags = {_star(link_flags)},\n    {mode},\n)\n"
        )
    (pkg / "BUCK").write_text("".join(text))


@dataclass(frozen=True)
class Built:
    """One timed build: its wall time, the part after its last compile, the binary."""

    wall: float
    tail: float
    exe: Path


class Session:
    """A new daemon in a new isolation dir (so an empty buck-out); `close()` kills it and
    deletes its buck-out, so no measurement inherits another's outputs."""

    def __init__(self, project: Path) -> None:
        self.buck = Buck2(project, isolation_dir=f"bench-{uuid.uuid4().hex[:10]}")
        self.buck.config.update(EXTRA_CONFIG)
        self.buck("server", config=False)  # the daemon's start is not the build's

    def build(self, target: str) -> Built:
        start = time.perf_counter()
        outputs = self.buck.outputs(target)
        wall = time.perf_counter() - start
        return Built(wall, self.tail(), next(iter(outputs.values())))

    def tail(self) -> float:
        """Seconds from the end of the last build's last compile to the end of its last
        action: the link, less what of it overlapped the compiles."""
        proc = self.buck("log", "show", config=False)
        last_compile = last_action = 0.0
        for line in proc.stdout.splitlines():
            if '"SpanEnd"' not in line or '"ActionExecution"' not in line:
                continue
            event = orjson.loads(line)["Event"]
            secs, nanos = event["timestamp"]
            end = secs + nanos / 1e9
            category = event["data"]["SpanEnd"]["data"]["ActionExecution"]["name"]["category"]
            last_action = max(last_action, end)
            if category == "cxx_compile":
                last_compile = max(last_compile, end)
        return last_action - last_compile if last_compile else 0.0

    def ran(self) -> collections.Counter[str]:
        """The last build's actions that ran, by category."""
        return collections.Counter(r.category for r in self.buck.what_ran())

    def critical_path(self) -> dict[str, float]:
        """Seconds of the last build's critical path spent running actions, by category."""
        proc = self.buck("log", "critical-path", "--format", "json", config=False)
        spent: dict[str, float] = collections.defaultdict(float)
        for line in proc.stdout.splitlines():
            if line.startswith("{"):
                row = orjson.loads(line)
                if row.get("kind") == "action":
                    spent[row["category"]] += row["user_duration"] / 1e6
        return dict(spent)

    def close(self) -> None:
        self.buck.kill()
        shutil.rmtree(self.buck.project / "buck-out" / self.buck.isolation_dir, ignore_errors=True)


@dataclass
class Figures:
    """One workload's measurements, per variant, one entry per round."""

    full: dict[str, list[Built]] = field(default_factory=lambda: {v: [] for v in VARIANTS})
    link: dict[str, list[Built]] = field(default_factory=lambda: {v: [] for v in VARIANTS})
    incremental: dict[str, list[Built]] = field(default_factory=lambda: {v: [] for v in VARIANTS})
    ran: dict[str, collections.Counter[str]] = field(default_factory=dict)
    critical: dict[str, dict[str, float]] = field(default_factory=dict)


class Workload:
    """One workload's package in the scratch project, measured round by round."""

    def __init__(self, project: Path, name: str) -> None:
        self.project = project
        self.name = name
        add_workload(project, name)
        self.edited = project / name / EDITED[name]
        self.original = self.edited.read_text()
        self.edits = 0
        self.figures = Figures()

    def target(self, variant: str) -> str:
        return f"//{self.name}:{self.name}{VARIANTS[variant]}"

    def checked(self, built: Built) -> Built:
        workloads.check_binary(self.name, built.exe)
        return built

    def edit(self) -> None:
        """Change the library source: one more exported function, so its bitcode, its
        summary and the link's index all change."""
        self.edits += 1
        n = self.edits
        self.edited.write_text(
            f"{self.original}\nint dist_lto_bench_edit_{n}(int x);\n"
            f"int dist_lto_bench_edit_{n}(int x) {{ return x * {n} + 1; }}\n"
        )

    def round(self, order: list[str]) -> None:
        f = self.figures
        for variant in order:
            session = Session(self.project)
            try:
                f.full[variant].append(self.checked(session.build(self.target(variant))))
                f.critical[variant] = session.critical_path()
            finally:
                session.close()
        session = Session(self.project)
        try:
            session.build(f"//{self.name}:{self.name}-lib")
            for variant in order:
                f.link[variant].append(self.checked(session.build(self.target(variant))))
            for variant in order:
                self.edit()
                f.incremental[variant].append(self.checked(session.build(self.target(variant))))
                f.ran[variant] = session.ran()
        finally:
            session.close()
            self.edited.write_text(self.original)


def _row(label: str, values: list[str]) -> str:
    return f"{label:26}" + "".join(f"{v:>14}" for v in values)


def report(loads: list[Workload], rounds: int) -> None:
    kinds = ("full", "link", "incremental")
    worker = "off" if EXTRA_CONFIG.get("dist_lto.opt_worker") == "false" else "on"
    print(f"# opt worker {worker}")
    print(f"# wall time in s of `buck2 build`, {rounds} rounds, local execution,"
          f" {os.cpu_count()} CPUs; load average at the end: {os.getloadavg()[0]:.2f}")  # fmt: skip
    print("# (tail: the part after the build's last compile ended)")
    for load in loads:
        f = load.figures
        print(f"\n{load.name}")
        print(_row("", [f"{v}" for v in VARIANTS for _ in ("wall", "tail")]))
        print(_row("", [k for _ in VARIANTS for k in ("wall", "tail")]))
        for kind in kinds:
            series = getattr(f, kind)
            for i in range(rounds):
                cells = [
                    f"{getattr(series[v][i], a):.2f}" for v in VARIANTS for a in ("wall", "tail")
                ]
                print(_row(f"{kind} round {i + 1}", cells))
            for label, pick in (("median", statistics.median), ("fastest", min)):
                cells = [f"{pick(getattr(b, a) for b in series[v]):.2f}"
                         for v in VARIANTS for a in ("wall", "tail")]  # fmt: skip
                print(_row(f"{kind} {label}", cells))
        for variant in VARIANTS:
            ran = f.ran[variant]
            counts = ", ".join(f"{c} {ran[c]}" for c in CATEGORIES if ran[c])
            others = sum(n for c, n in ran.items() if c not in CATEGORIES)
            print(f"incremental {variant}: ran {counts}" + (f", other {others}" if others else ""))
        for variant in VARIANTS:
            spent = f.critical[variant]
            shown = ", ".join(
                f"{c} {s:.2f}" for c, s in sorted(spent.items(), key=lambda kv: -kv[1])
            )
            print(f"critical path of the last full {variant} build (s running): {shown}")
    print()
    for kind in kinds:
        for label, pick in (("median", statistics.median), ("fastest", min)):
            total = {v: sum(pick(b.wall for b in getattr(w.figures, kind)[v]) for w in loads)
                     for v in VARIANTS}  # fmt: skip
            print(f"{kind} {label}: dist/inprocess: {total['dist'] / total['inprocess']:.3f}")
    total = {v: sum(statistics.median(b.wall for b in w.figures.full[v]) for w in loads)
             for v in VARIANTS}  # fmt: skip
    print(f"buck2-dist/inprocess: {total['dist'] / total['inprocess']:.3f}")
    total = {v: sum(statistics.median(b.wall for b in w.figures.incremental[v]) for w in loads)
             for v in VARIANTS}  # fmt: skip
    print(f"buck2-incremental-dist/inprocess: {total['dist'] / total['inprocess']:.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="lua,zstd")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--no-worker", action="store_true", help="opt actions without the opt worker"
    )
    args = parser.parse_args()
    if args.no_worker:
        EXTRA_CONFIG["dist_lto.opt_worker"] = "false"
    with tempfile.TemporaryDirectory(prefix="bench-buck2-") as tmp:
        project = scratch_project(Path(tmp))
        loads = [Workload(project, name) for name in args.workloads.split(",")]
        variants = list(VARIANTS)
        for round_ in range(args.rounds):
            order = variants[round_ % 2 :] + variants[: round_ % 2]
            for load in loads:
                load.round(order)
                print(f"# round {round_ + 1} {load.name} done", file=sys.stderr, flush=True)
        report(loads, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
