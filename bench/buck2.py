#!/usr/bin/env python3
"""Real Buck2 building Lua and zstd six distributed ways, each against in-process ThinLTO.

Scratch Buck2 projects (ours and its variants, upstream) get a package
per workload, holding a copy of its Debian source tree and a BUCK file: a
`cxx_library` of the library units (each source with its own flags, the native units
with `-fno-lto`) and binaries of the main units linking it.

    ours                 a copy of this project (our prelude): `cxx_binary(dist_lto =
                         True)`: plan, one opt action per module (run by the opt
                         worker), final link
    ours-batched         the same in another copy whose small modules share opt
                         actions (`[dist_lto] opt_batch_bytes = 32768`): what
                         batches give
    ours-noworker        the same in another copy whose opt actions run as commands
                         (`[dist_lto] opt_worker = false`): what the worker gives
    ours-forked          the same in another copy whose worker forks each backend's
                         clang (`[dist_lto] opt_compile_server = false`): what its
                         compile servers give
    ours-queued          the same in another copy whose opt actions all go to the
                         worker at once (`[dist_lto] opt_queue = true`), compiled
                         largest first: what Buck2's hand-over of a slot from one
                         backend to the next costs
    ours-noahead         the same in another copy whose worker compiles a backend only
                         when its request comes (`[dist_lto] opt_run_ahead = false`):
                         what its spare turns and backends run ahead give
    ours-linkbatch       the same in another copy whose link's backends go to the worker
                         in one queued action beside the largest module's
                         (`opt_queue = true`, `opt_batch_bytes = 1000000000`),
                         compiled side by side: what an action per module costs
    inprocess            the same project, `cxx_binary(lto = True)`: one link action,
                         LLD running the backends on its threads
    upstream             a copy of examples/upstream (Buck2's bundled prelude, our tools
                         in its toolchain): `cxx_binary(enable_distributed_thinlto =
                         True)`, upstream's Starlark deciding each action's inputs
    fine                 the same project, `dist_lto_cxx_binary`: our phases over the
                         upstream libraries
    upstream-inprocess   the same project, upstream's `cxx_binary` without distribution

Every figure is the same Buck2 binary, local execution, the client's wall clock; a new
daemon in a new isolation dir (so an empty buck-out) for each full build, and one per
round, workload and project for the link and incremental builds:

    full         `buck2 build //NAME:BIN` from nothing: every compile and the link
    link         `buck2 build //NAME:BIN` once the library is built: the main units'
                 compiles and the link
    incremental  one library source changed (a new exported function), then the same
                 build again; the actions it ran, counted by category

Each build's `tail` is the part of it after its last compile ended (from the event
log): what the link costs beyond what overlapped the compiles. The last round's full
build of each variant also says where its time went (bench/buck2_gap.py): the CPU of
its link actions, each run again, against the in-process link's, and of its backends
alone (the bare clang command each opt action wraps); how many actions it ran and what
each cost outside its command; when its longest backend started after the last
compile (in-process LLD starts its biggest first; not for ours-queued, whose actions'
times in Buck2 hold their wait in the worker).

Inside every full build, the CPU of its backends is also taken: the opt worker's
compilers (its log's `cpu:` line) for ours, and for in-process the link's LLD (which
the in-process binary runs through a shell wrapper, `--ld-path`, that records its
child's user + system time with `times`). Ours' figure leaves out the index step and
the final link, which in-process LLD's includes (the worker's log gives its planner,
the plans and their index steps apart, and what the worker took to start). So is the
CPU of Buck2's daemon and of its forkserver over each full build (`/proc`), set
against the number of actions the build ran.

Before the first round, each variant makes one full build of each workload that is not
measured (the warm-up): the first build on a machine also builds what the tools build
once per user (the compile server, the package's zip) and reads every program and source
from disk. The variants then rotate which goes first, round by round, and the number of
rounds is rounded up to a multiple of the number of variants, so that each variant
builds first, second, ... equally often (of two builds one after the other, the second
is often the faster by a few percent: docs/benchmarks.md). Each built binary passes the
workload's functional check. The last lines, per distributed variant and workload:
`buck2-incremental-opt/VARIANT/WORKLOAD: ran N of M` (the opt actions the one-source
edit reran, of those the full build ran: the last round's), and
`buck2-full/VARIANT/WORKLOAD: R of in-process` (median full-build wall time over that of
the in-process build of the same project); per workload `buck2-backends-cpu/WORKLOAD:
ours' compile servers X s, in-process link Y s, ratio R` and `buck2-daemon-cpu/WORKLOAD:
ours X s over N actions, in-process Y s over M; Z ms per action more` (medians over the
full builds; the difference divided by the actions ours runs more, which does not make
it a cost per action: docs/benchmarks.md); then `buck2-dist/inprocess: <ratio>` and
`buck2-incremental-dist/inprocess: <ratio>`, ours over in-process, full and incremental
builds, summed over the workloads, with the full builds' ratio also round by round and
the median of those (`buck2-dist/inprocess by round: ...; median M`: how far one round
moves it) and the ratio's 90% interval over the rounds drawn again with replacement
(`buck2-dist/inprocess 90% interval, rounds resampled: L-H`: how far the scatter of
this run's rounds moves it, not how the machine's pace drifts from run to run); and the
same for ours-batched, ours-noworker, ours-forked, ours-queued, ours-noahead and
ours-linkbatch.

The scratch projects live in `--dir` (default: the system's temporary directory). The
header says what a new file costs there: the CPU of creating files and directories in
it, measured before the first build and after the last. Every file a build writes pays
that, and ours writes more files than in-process ThinLTO (an index, an object and their
directories per module; docs/benchmarks.md). On ext4 without a journal that cost rises
several times for minutes after many files are deleted, so every buck-out stays until
the run ends (`Session`), and a run started just after another one's cleanup pays for
it (the header shows it).

Usage: .venv/bin/python bench/buck2.py [--workloads lua,zstd] [--rounds 4]
                                       [--variants ours,inprocess,...] [--dir DIR]
"""

from __future__ import annotations

import argparse
import collections
import os
import random
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

import buck2_gap
from support import workloads
from support.real_buck2 import Buck2, scratch_project, upstream_scratch_project

VARIANTS = {
    "ours": ("ours", ""),
    "ours-batched": ("ours-batched", ""),
    "ours-noworker": ("ours-noworker", ""),
    "ours-forked": ("ours-forked", ""),
    "ours-queued": ("ours-queued", ""),
    "ours-noahead": ("ours-noahead", ""),
    "ours-linkbatch": ("ours-linkbatch", ""),
    "inprocess": ("ours", "-inprocess"),
    "upstream": ("upstream", ""),
    "fine": ("upstream", "-fine"),
    "upstream-inprocess": ("upstream", "-inprocess"),
}
"""Each variant's project and binary target: the workload's name and this suffix."""

BASELINE = {
    "ours": "inprocess",
    "ours-batched": "inprocess",
    "ours-noworker": "inprocess",
    "ours-forked": "inprocess",
    "ours-queued": "inprocess",
    "ours-noahead": "inprocess",
    "ours-linkbatch": "inprocess",
    "upstream": "upstream-inprocess",
    "fine": "upstream-inprocess",
}
"""Each distributed variant's in-process twin, in the same project."""

COPIES = {
    "ours-batched": "[dist_lto]\nopt_batch_bytes = 32768\n",
    "ours-noworker": "[dist_lto]\nopt_worker = false\n",
    "ours-forked": "[dist_lto]\nopt_compile_server = false\n",
    "ours-queued": "[dist_lto]\nopt_queue = true\n",
    "ours-noahead": "[dist_lto]\nopt_run_ahead = false\n",
    "ours-linkbatch": "[dist_lto]\nopt_queue = true\nopt_batch_bytes = 1000000000\n",
}
"""The copies of this project a variant builds in, by their `.buckconfig.local`."""

QUEUED = {variant for variant, config in COPIES.items() if "opt_queue = true" in config}
"""Variants whose opt actions wait in the worker: Buck2's times for them hold the wait."""

OPT_CATEGORIES = (
    "thin_lto_opt",
    "thin_lto_opt_object_executable",
    "thin_lto_opt_archive_executable",
)
"""Opt actions (one backend each): ours and fine, upstream's object and archive member.
Upstream's `thin_lto_opt_copy_executable` binds a native member, optimising nothing."""

SOURCE_TREES = {"lua": ("src",), "zstd": ("lib", "programs")}
"""The parts of each Debian source tree a build reads, copied into the package."""

HEADERS = {"lua": ["src/*.h"], "zstd": ["lib/**/*.h", "programs/*.h"]}

EDITED = {"lua": "src/lstring.c", "zstd": "lib/common/entropy_common.c"}
"""The library source an incremental round changes."""

LINK_CATEGORIES = ("thin_lto_prepare", "thin_lto_plan", "thin_lto_opt", "thin_lto_link", "cxx_link")
UPSTREAM_CATEGORIES = (
    *(
        f"thin_lto_{c}_executable"
        for c in ("prepare", "index", "opt_object", "opt_archive", "opt_copy", "link")
    ),
    "cxx_link_executable",
)
"""Upstream's link actions: its categories get the link's kind as a suffix."""
COMPILE_CATEGORIES = ("cxx_compile", "c_compile")
CATEGORIES = (*COMPILE_CATEGORIES, "archive", *LINK_CATEGORIES, *UPSTREAM_CATEGORIES)


def _star(value: object) -> str:
    """A Starlark literal of strings, lists and tuples (JSON spells them alike)."""
    if isinstance(value, tuple):
        return "(" + ", ".join(_star(v) for v in value) + ")"
    return orjson.dumps(value).decode()


def timed_lld(root: Path) -> Path:
    """A shell wrapper of ld.lld in project `root` that appends its own and its child's
    user and system seconds to `link_cpu_file(root)` (the shell's `times`, not in a
    pipeline: a subshell would print its own)."""
    wrapper = root / ".bench" / "ld.lld"
    if not wrapper.exists():
        wrapper.parent.mkdir(exist_ok=True)
        wrapper.write_text(
            "#!/bin/sh\n"
            f'"{workloads.LLVM_BIN}/ld.lld" "$@"\n'
            "status=$?\n"
            f'times >> "{link_cpu_file(root)}"\n'
            'exit "$status"\n'
        )
        wrapper.chmod(0o755)
    return wrapper


def link_cpu_file(root: Path) -> Path:
    return root / ".bench" / "link-cpu"


def take_link_cpu(root: Path) -> float | None:
    """The CPU seconds recorded by `timed_lld` since the last call, summed; None if none."""
    path = link_cpu_file(root)
    if not path.exists():
        return None
    total = 0.0
    # Two lines a link: the shell's own times, then its children's (`0m9.12s 0m0.45s`).
    for line in path.read_text().splitlines()[1::2]:
        for field_ in line.split():
            minutes, seconds = field_.rstrip("s").split("m")
            total += int(minutes) * 60 + float(seconds)
    path.unlink()
    return total


def add_workload(root: Path, name: str, project: str) -> None:
    """Package `name` in the `project` ("ours" or "upstream") at `root`: its sources
    (without the upstream BUCK files, which would split it into packages of their own)
    and its BUCK file."""
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
    common = (
        f'    srcs = {srcs},\n    headers = {headers},\n    deps = [":{name}-lib"],\n'
        f"    linker_flags = {_star(link_flags)},\n"
    )
    if project.startswith("ours"):
        measured = f"    linker_flags = {_star([*link_flags, f'--ld-path={timed_lld(root)}'])},\n"
        text = [f'cxx_library(\n    name = "{name}-lib",\n    srcs = {lib_srcs},\n'
                f"    headers = {headers},\n)\n"]  # fmt: skip
        text.append(f'\ncxx_binary(\n    name = "{name}",\n{common}    dist_lto = True,\n)\n')
        inprocess = common.replace(f"    linker_flags = {_star(link_flags)},\n", measured)
        text.append(
            f'\ncxx_binary(\n    name = "{name}-inprocess",\n{inprocess}    lto = True,\n)\n'
        )
    else:
        text = [
            'load("@dist_lto//upstream:cxx_binary.bzl", "dist_lto_cxx_binary")\n\n'
            f'cxx_library(\n    name = "{name}-lib",\n    srcs = {lib_srcs},\n'
            f'    headers = {headers},\n    preferred_linkage = "static",\n)\n'
        ]
        for suffix, distributed in (("", True), ("-inprocess", False)):
            text.append(
                f'\ncxx_binary(\n    name = "{name}{suffix}",\n{common}'
                f"    enable_distributed_thinlto = {distributed},\n)\n"
            )
        text.append(f'\ndist_lto_cxx_binary(\n    name = "{name}-fine",\n{common})\n')
    (pkg / "BUCK").write_text("".join(text))


@dataclass(frozen=True)
class Built:
    """One timed build: its wall time, the part after its last compile, the binary."""

    wall: float
    tail: float
    exe: Path
    daemon_cpu: float | None = None
    """CPU seconds of Buck2's daemon and its forkserver over the build (`daemon_cpu`)."""


def daemon_cpu(pids: list[int | None]) -> float | None:
    """User + system seconds so far of these processes (all their threads; not their
    children, whose CPU the actions' own figures hold), or None if one has gone."""
    total = 0
    for pid in pids:
        if pid is None:
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            return None
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


class Session:
    """A new daemon in a new isolation dir (so an empty buck-out), with an opt worker
    reuse store of its own (so a full build reuses nothing an earlier one kept, and no
    worker starts by pruning the slots of every build before it); `close()` kills the
    daemon.

    Its buck-out stays until the run ends, with the scratch projects: after tens of
    thousands of files are deleted, a new file costs several times more on ext4 without
    a journal for minutes (the allocator skips recently deleted inodes), and a build
    that followed would pay for the bench's cleanup, ours more than in-process since it
    writes more files."""

    def __init__(self, project: Path) -> None:
        isolation = f"bench-{uuid.uuid4().hex[:10]}"
        self.buck = Buck2(project, isolation_dir=isolation)
        self.buck.config["dist_lto.opt_reuse_dir"] = f"buck-out/{isolation}/dist_lto_reuse"
        self.buck("server", config=False)  # the daemon's start is not the build's
        status = orjson.loads(self.buck("status", config=False).stdout)
        self.daemon_pids = [status["process_info"]["pid"], status.get("forkserver_pid")]
        """Buck2's daemon and the forkserver that spawns its local commands."""

    def build(self, target: str) -> Built:
        before = daemon_cpu(self.daemon_pids)
        start = time.perf_counter()
        outputs = self.buck.outputs(target)
        wall = time.perf_counter() - start
        after = daemon_cpu(self.daemon_pids)
        spent = after - before if after is not None and before is not None else None
        return Built(wall, self.tail(), next(iter(outputs.values())), spent)

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
            if category in COMPILE_CATEGORIES:
                last_compile = max(last_compile, end)
        return last_action - last_compile if last_compile else 0.0

    def gap(self) -> buck2_gap.Gap:
        """Where the last build's time went (its link actions run again for their CPU)."""
        events = self.buck("log", "show", config=False).stdout
        what_ran = self.buck("log", "what-ran", "--format", "json", config=False).stdout
        return buck2_gap.measure(
            events,
            what_ran,
            self.buck.project,
            LINK_CATEGORIES + UPSTREAM_CATEGORIES,
            slots=os.cpu_count() or 1,
        )

    def build_id(self) -> str:
        """The last build's id (Buck2's trace id: its workers' log directories)."""
        for line in self.buck("log", "show", config=False).stdout.splitlines():
            if line.startswith("{"):
                event = orjson.loads(line).get("Event")
                if event and event.get("trace_id"):
                    return str(event["trace_id"])
        return ""

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


@dataclass
class Figures:
    """One workload's measurements, per variant, one entry per round."""

    variants: list[str]
    full: dict[str, list[Built]] = field(default_factory=dict)
    link: dict[str, list[Built]] = field(default_factory=dict)
    incremental: dict[str, list[Built]] = field(default_factory=dict)
    ran: dict[str, collections.Counter[str]] = field(default_factory=dict)
    full_ran: dict[str, collections.Counter[str]] = field(default_factory=dict)
    critical: dict[str, dict[str, float]] = field(default_factory=dict)
    gap: dict[str, buck2_gap.Gap] = field(default_factory=dict)
    worker: dict[str, buck2_gap.WorkerCpu | None] = field(default_factory=dict)
    """The last full build's opt worker CPU, its compilers' and its planner's
    (`buck2_gap.worker_cpu`)."""
    backends_cpu: dict[str, list[float]] = field(default_factory=dict)
    """Each full build's backend CPU: ours' compile servers, in-process LLD's link."""

    def __post_init__(self) -> None:
        for series in (self.full, self.link, self.incremental):
            series.update({v: [] for v in self.variants})


def opt_count(ran: collections.Counter[str]) -> int:
    return sum(ran[c] for c in OPT_CATEGORIES)


class Workload:
    """One workload's packages in the scratch projects, measured round by round."""

    def __init__(self, projects: dict[str, Path], name: str, variants: list[str]) -> None:
        self.projects = projects
        self.name = name
        self.variants = variants
        self.edited: dict[str, Path] = {}
        for kind, root in projects.items():
            add_workload(root, name, kind)
            self.edited[kind] = root / name / EDITED[name]
        self.original = next(iter(self.edited.values())).read_text()
        self.edits = 0
        self.figures = Figures(variants)

    def target(self, variant: str) -> str:
        return f"//{self.name}:{self.name}{VARIANTS[variant][1]}"

    def project(self, variant: str) -> Path:
        return self.projects[VARIANTS[variant][0]]

    def checked(self, built: Built) -> Built:
        workloads.check_binary(self.name, built.exe)
        return built

    def edit(self, kind: str) -> None:
        """Change the library source: one more exported function, so its bitcode, its
        summary and the link's index all change."""
        self.edits += 1
        n = self.edits
        self.edited[kind].write_text(
            f"{self.original}\nint dist_lto_bench_edit_{n}(int x);\n"
            f"int dist_lto_bench_edit_{n}(int x) {{ return x * {n} + 1; }}\n"
        )

    def take_backends_cpu(self, variant: str, trace: str, linked: float | None) -> None:
        """The backend CPU of the full build just made (`Figures.backends_cpu`): its
        worker's compilers', found by the build's `trace` id, or its in-process link's
        (`linked`)."""
        if variant == "inprocess":
            cpu = linked
        elif variant.startswith("ours") and variant != "ours-noworker":
            worker = buck2_gap.worker_cpu(trace, wait=10.0) if trace else None
            cpu = worker.compilers if worker is not None else None
        else:
            return
        if cpu is not None:
            self.figures.backends_cpu.setdefault(variant, []).append(cpu)

    def warm_up(self, order: list[str]) -> None:
        """One full build of each variant, checked and not measured."""
        for variant in order:
            session = Session(self.project(variant))
            try:
                self.checked(session.build(self.target(variant)))
            finally:
                session.close()

    def round(self, order: list[str], last: bool) -> None:
        f = self.figures
        for variant in order:
            session = Session(self.project(variant))
            build_id = trace = ""
            linked: float | None = None
            take_link_cpu(self.project(variant))  # none from an earlier build
            try:
                f.full[variant].append(self.checked(session.build(self.target(variant))))
                linked = take_link_cpu(self.project(variant))  # before `gap` links again
                trace = session.build_id()
                f.critical[variant] = session.critical_path()
                f.full_ran[variant] = session.ran()
                if last:
                    f.gap[variant] = session.gap()
                    build_id = session.build_id()
            finally:
                session.close()
            if build_id:
                f.worker[variant] = buck2_gap.worker_cpu(build_id, wait=10.0)
            self.take_backends_cpu(variant, trace, linked)
        for kind in self.projects:
            mine = [v for v in order if VARIANTS[v][0] == kind]
            if not mine:
                continue
            session = Session(self.projects[kind])
            try:
                session.build(f"//{self.name}:{self.name}-lib")
                for variant in mine:
                    f.link[variant].append(self.checked(session.build(self.target(variant))))
                for variant in mine:
                    self.edit(kind)
                    f.incremental[variant].append(self.checked(session.build(self.target(variant))))
                    f.ran[variant] = session.ran()
            finally:
                session.close()
                self.edited[kind].write_text(self.original)


def file_cost(where: Path, dirs: int = 40, files: int = 25) -> float:
    """Microseconds of CPU (user + system) per new file or directory below `where`."""
    start = time.process_time()
    with tempfile.TemporaryDirectory(prefix="file-cost-", dir=where) as tmp:
        for d in range(dirs):
            sub = Path(tmp) / str(d)
            sub.mkdir()
            for f in range(files):
                (sub / str(f)).write_bytes(b"x")
        spent = time.process_time() - start
    return spent / (dirs * (files + 1)) * 1e6


def filesystem(where: Path) -> str:
    """The type of the filesystem mounted at or above `where` (/proc/self/mounts)."""
    best, kind = "", "unknown"
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        mount = fields[1]
        inside = str(where) == mount or str(where).startswith(mount.rstrip("/") + "/")
        if len(fields) > 2 and inside and len(mount) > len(best):
            best, kind = mount, fields[2]
    return kind


def _row(label: str, values: list[str]) -> str:
    return f"{label:26}" + "".join(f"{v:>20}" for v in values)


def report(loads: list[Workload], rounds: int, variants: list[str], where: str) -> None:
    kinds = ("full", "link", "incremental")
    print(f"# wall time in s of `buck2 build`, {rounds} rounds after a warm-up build, local"
          f" execution, {os.cpu_count()} CPUs;"
          f" load average at the end: {os.getloadavg()[0]:.2f}")  # fmt: skip
    print(f"# {where}")
    print("# (tail: the part after the build's last compile ended)")
    for load in loads:
        f = load.figures
        print(f"\n{load.name}")
        print(_row("", [f"{v}" for v in variants for _ in ("wall", "tail")]))
        print(_row("", [k for _ in variants for k in ("wall", "tail")]))
        for kind in kinds:
            series = getattr(f, kind)
            for i in range(rounds):
                cells = [
                    f"{getattr(series[v][i], a):.2f}" for v in variants for a in ("wall", "tail")
                ]
                print(_row(f"{kind} round {i + 1}", cells))
            for label, pick in (("median", statistics.median), ("fastest", min)):
                cells = [f"{pick(getattr(b, a) for b in series[v]):.2f}"
                         for v in variants for a in ("wall", "tail")]  # fmt: skip
                print(_row(f"{kind} {label}", cells))
        for variant in variants:
            ran = f.ran[variant]
            counts = ", ".join(f"{c} {ran[c]}" for c in CATEGORIES if ran[c])
            others = sum(n for c, n in ran.items() if c not in CATEGORIES)
            print(f"incremental {variant}: ran {counts}" + (f", other {others}" if others else ""))
        for variant in variants:
            spent = f.critical[variant]
            shown = ", ".join(
                f"{c} {s:.2f}" for c, s in sorted(spent.items(), key=lambda kv: -kv[1])
            )
            print(f"critical path of the last full {variant} build (s running): {shown}")
        for variant in variants:
            if variant in f.gap:
                baseline = f.gap.get(BASELINE.get(variant, ""))
                lines = buck2_gap.describe(f.gap[variant], baseline, f.worker.get(variant),
                                           queued=variant in QUEUED)  # fmt: skip
                for line in lines:
                    print(f"last full {variant} build: {line}")
    print()
    for variant, baseline in BASELINE.items():
        if variant not in variants:
            continue
        for load in loads:
            f = load.figures
            print(f"buck2-incremental-opt/{variant}/{load.name}: ran {opt_count(f.ran[variant])}"
                  f" of {opt_count(f.full_ran[variant])}")  # fmt: skip
        if baseline not in variants:
            continue
        for load in loads:
            f = load.figures
            ratio = statistics.median(b.wall for b in f.full[variant]) / statistics.median(
                b.wall for b in f.full[baseline]
            )
            print(f"buck2-full/{variant}/{load.name}: {ratio:.3f} of in-process")
    for load in loads:
        cpu = load.figures.backends_cpu
        if "inprocess" in cpu and "ours" in cpu:
            ours_cpu, theirs = statistics.median(cpu["ours"]), statistics.median(cpu["inprocess"])
            print(f"buck2-backends-cpu/{load.name}: ours' compile servers {ours_cpu:.2f} s,"
                  f" in-process link {theirs:.2f} s, ratio {ours_cpu / theirs:.3f}"
                  " (inside the full builds, medians)")  # fmt: skip
        daemon = {
            v: [b.daemon_cpu for b in load.figures.full.get(v, []) if b.daemon_cpu is not None]
            for v in ("ours", "inprocess")
        }
        ran = {v: sum(load.figures.full_ran.get(v, {}).values()) for v in daemon}
        if all(daemon.values()) and ran["ours"] > ran["inprocess"]:
            ours_d, theirs_d = (statistics.median(daemon[v]) for v in ("ours", "inprocess"))
            extra = (ours_d - theirs_d) / (ran["ours"] - ran["inprocess"]) * 1e3
            print(f"buck2-daemon-cpu/{load.name}: ours {ours_d:.2f} s over {ran['ours']} actions,"
                  f" in-process {theirs_d:.2f} s over {ran['inprocess']}; {extra:.1f} ms per"
                  " action more (inside the full builds, medians)")  # fmt: skip
    for ours, label in (("ours", "dist"), ("ours-batched", "dist-batched"),
                        ("ours-noworker", "dist-noworker"), ("ours-forked", "dist-forked"),
                        ("ours-queued", "dist-queued"),
                        ("ours-noahead", "dist-noahead"),
                        ("ours-linkbatch", "dist-linkbatch")):  # fmt: skip
        if ours not in variants or "inprocess" not in variants:
            continue
        for kind, prefix in (("full", "buck2"), ("incremental", "buck2-incremental")):
            walls = {
                v: [[b.wall for b in getattr(w.figures, kind)[v]] for w in loads]
                for v in (ours, "inprocess")
            }
            print(f"{prefix}-{label}/inprocess: {headline(walls[ours], walls['inprocess']):.3f}")
            if kind == "full":  # the same, round by round: how far one round moves it
                both = min(len(series) for v in walls for series in walls[v])
                paired = {v: [series[:both] for series in walls[v]] for v in walls}
                by_round = [
                    sum(series[i] for series in paired[ours])
                    / sum(series[i] for series in paired["inprocess"])
                    for i in range(both)
                ]
                shown = ", ".join(f"{r:.3f}" for r in by_round)
                median = f"; median {statistics.median(by_round):.3f}" if by_round else ""
                print(f"{prefix}-{label}/inprocess by round: {shown}{median}")
                if both > 1:
                    low, high = paired_interval(paired[ours], paired["inprocess"])
                    print(f"{prefix}-{label}/inprocess 90% interval, rounds resampled:"
                          f" {low:.3f}-{high:.3f}")  # fmt: skip


def headline(ours: list[list[float]], theirs: list[list[float]]) -> float:
    """The sum over workloads of the median wall times, `ours` over `theirs` (each a
    list per workload of one time per round)."""
    return sum(statistics.median(w) for w in ours) / sum(statistics.median(w) for w in theirs)


def paired_interval(
    ours: list[list[float]], theirs: list[list[float]], resamples: int = 2000
) -> tuple[float, float]:
    """The 5th and 95th percentiles of the `headline` ratio over `resamples` draws of
    the rounds with replacement, the same rounds for both variants and every workload:
    how far the scatter of one run's rounds moves the ratio. Seeded, so a report is
    reproducible."""
    rounds = len(ours[0])
    draw = random.Random(0)
    ratios = []
    for _ in range(resamples):
        picked = [draw.randrange(rounds) for _ in range(rounds)]
        ratios.append(
            headline(
                [[w[i] for i in picked] for w in ours], [[w[i] for i in picked] for w in theirs]
            )
        )
    ratios.sort()
    return ratios[resamples // 20], ratios[resamples - 1 - resamples // 20]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="lua,zstd")
    parser.add_argument("--rounds", type=int, default=4,
                        help="rounded up to a multiple of the number of variants")  # fmt: skip
    parser.add_argument("--variants", default="ours,inprocess",
                        help=f"of {', '.join(VARIANTS)} (default: %(default)s)")  # fmt: skip
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()),
                        help="where the scratch projects go (default: %(default)s)")  # fmt: skip
    args = parser.parse_args()
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {unknown[0]!r} (known: {', '.join(VARIANTS)})")
    base = args.dir.resolve()
    before = file_cost(base)
    with tempfile.TemporaryDirectory(prefix="bench-buck2-", dir=base) as tmp:
        kinds = {VARIANTS[v][0] for v in variants}
        projects = {}
        if "ours" in kinds:
            projects["ours"] = scratch_project(Path(tmp) / "ours")
        for kind, config in COPIES.items():
            if kind in kinds:
                projects[kind] = scratch_project(Path(tmp) / kind, {".buckconfig.local": config})
        if "upstream" in kinds:
            projects["upstream"] = upstream_scratch_project(Path(tmp) / "upstream")
        loads = [Workload(projects, name, variants) for name in args.workloads.split(",")]
        for load in loads:
            load.warm_up(variants)
            print(f"# warm-up {load.name} done", file=sys.stderr, flush=True)
        rounds = -(-max(args.rounds, 1) // len(variants)) * len(variants)
        for round_ in range(rounds):
            shift = round_ % len(variants)
            order = variants[shift:] + variants[:shift]
            for load in loads:
                load.round(order, last=round_ == rounds - 1)
                print(f"# round {round_ + 1} {load.name} done", file=sys.stderr, flush=True)
        where = (f"projects in {base} ({filesystem(base)}): a new file or directory there costs"
                 f" {before:.0f} us of CPU before the first build, {file_cost(base):.0f} us"
                 " after the last")  # fmt: skip
        report(loads, rounds, variants, where)
    return 0


if __name__ == "__main__":
    sys.exit(main())
