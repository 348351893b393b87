#!/usr/bin/env python3
"""Real Buck2 on the generated workload (bench/gen_workload.py) at thousands of modules.

For each N, both scratch projects (ours: a copy of this project; upstream: of
examples/upstream) get the workload's packages, and each variant is built

    full         `buck2 build //scale/app:BIN` in a new daemon (new isolation dir, empty
                 buck-out): every compile, archive and the link
    incremental  one leaf module edited (a new exported function), the same build again
                 in the same daemon

with the variants of bench/buck2.py: `ours` (our prelude, `dist_lto = True`),
`inprocess` (the same project, `lto = True`), `upstream` (upstream's
`enable_distributed_thinlto` with our tools), `fine` (`dist_lto_cxx_binary` on the
upstream libraries) and `upstream-inprocess`. Every binary must print the checksum the
generator computed.

Per build: the client's wall time; analysis (the summed durations of Buck2's Analysis
spans) and dynamic analysis (its deferred evaluations: the dynamic_output lambdas that
declare the opt actions), from `buck2 log show`; the actions that ran; the plan
action's time (`thin_lto_plan`, upstream's `thin_lto_index_executable`) and peak
memory; the daemon's peak RSS (the last snapshot's `buck2_max_rss`); and the largest
peak RSS of any process of the link's actions (prepare, plan, opt, final link; for an
in-process build, the linker). Per-process peaks are the kernel's VmHWM, read every
20 ms from /proc for every process whose working directory is in the project (so other
builds on the machine are not counted); a process that lives less than that may be
missed, which only the smallest backends do. Buck2 itself records no per-action memory
without cgroup resource control.

The last lines, per N, variant and build kind:
`buck2-scale/<N>/<variant>/<full|incremental>: dist/inprocess X, peak MiB a/b`:
the wall time over that of the in-process build of the same project and kind, and the
largest link-phase process's peak RSS over the in-process link's (the linker's) peak.

Usage: .venv/bin/python bench/scale.py [--n 2000] [--variants ours,inprocess,...]
                                       [--records DIR] [--seed 1]
       .venv/bin/python bench/scale.py --n 10000 --report-from DIR
(`--records DIR` keeps each build's `buck2 log show` as DIR/N-VARIANT-KIND.jsonl, the
record bench/farm_model.py reads, and what was measured beside it; `--report-from DIR`
prints the table and ratios from those, for a run that was stopped or done in parts.)
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import gen_workload as gw
from buck2 import Session
from support.real_buck2 import scratch_project, upstream_scratch_project

VARIANTS = {
    "ours": ("ours", "app"),
    "inprocess": ("ours", "app-inprocess"),
    "upstream": ("upstream", "app"),
    "fine": ("upstream", "app-fine"),
    "upstream-inprocess": ("upstream", "app-inprocess"),
}
"""Each variant's project and binary target in the app package."""

BASELINE = {
    "ours": "inprocess",
    "inprocess": "inprocess",
    "upstream": "upstream-inprocess",
    "fine": "upstream-inprocess",
    "upstream-inprocess": "upstream-inprocess",
}
"""Each variant's in-process twin, in the same project."""

RAN_KINDS = (1, 2, 4, 8)
"""Buck2's execution kinds of an action that ran: local, remote, simple (a write or a
symlinked dir, in the daemon), local worker. The others are cache hits and skips."""

PLAN_CATEGORIES = ("thin_lto_plan", "thin_lto_index_executable")
COMPILE_CATEGORIES = ("cxx_compile", "c_compile")
OPT_CATEGORIES = (
    "thin_lto_opt",
    "thin_lto_opt_object_executable",
    "thin_lto_opt_archive_executable",
)
KINDS = ("full", "incremental")
MIB = 1 << 20


def role(cmdline: list[str]) -> str:
    """What a process of the build does, from its command line."""
    exe = os.path.basename(cmdline[0]) if cmdline else ""
    text = " ".join(cmdline)
    if "--thinlto-index-only" in text:
        return "plan"  # the index step's driver, started by the plan action
    if exe in ("ld.lld", "lld", "ld"):
        return "link"  # the final link, or an index step (its flags are in a response file)
    if "-fthinlto-index=" in text:
        return "opt"
    if "dist_lto" in text or "dist-lto" in text:
        if "opt-worker" in text or "opt_worker" in text:
            return "opt"
        if " plan" in text:
            return "plan"
        if " prepare" in text or " copy" in text:
            return "prepare"
        return "tool"
    if exe.startswith("clang") and " -c " in f" {text} " and "-x ir" not in text:
        return "compile"
    if exe.startswith("buck2"):
        return "buck2"
    return "other"


class Peaks:
    """Per-process peak RSS (VmHWM) of the processes working in one project, by role."""

    def __init__(self, project: Path) -> None:
        self.project = str(project.resolve())
        self.by_pid: dict[int, tuple[str, int]] = {}
        self.argv: dict[int, list[str]] = {}
        self._elsewhere: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Peaks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = os.getpid()
        while not self._stop.is_set():
            for name in os.listdir("/proc"):
                if name.isdigit() and int(name) != me and int(name) not in self._elsewhere:
                    self._sample(int(name))
            self._stop.wait(0.02)

    def _sample(self, pid: int) -> None:
        try:
            if pid not in self.by_pid:
                cwd = os.readlink(f"/proc/{pid}/cwd")
                if not cwd.startswith(self.project):
                    self._elsewhere.add(pid)  # a process does not move into the project
                    return
            with open(f"/proc/{pid}/status", "rb") as f:
                status = f.read()
            hwm = next((int(line.split()[1]) * 1024 for line in status.splitlines()
                        if line.startswith(b"VmHWM:")), 0)  # fmt: skip
            known = self.by_pid.get(pid)
            if known is None:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
                known = (role(argv), 0)
                self.argv[pid] = argv
            self.by_pid[pid] = (known[0], max(known[1], hwm))
        except (OSError, ValueError):
            return

    def peak(self, *roles: str) -> int:
        return max((hwm for r, hwm in self.by_pid.values() if r in roles), default=0)


LINK_ROLES = ("link", "opt", "plan", "prepare", "tool")


@dataclass
class Record:
    """What one build's event log says."""

    analysis: float = 0.0
    dynamic: float = 0.0
    actions: collections.Counter[str] = field(default_factory=collections.Counter)
    """Actions that ran (locally, remotely, in a worker), by category."""
    cached: int = 0
    """Actions whose result came from a cache or that were skipped."""
    plan_time: float = 0.0
    daemon_peak: int = 0
    tail: float = 0.0
    """Seconds from the last compile's end to the last action's end: the link's part."""
    opt_daemon_ms: float = 0.0
    """The daemon's CPU from the first opt action's start to the last one's end, per opt
    action that ran (from its periodic snapshots: about a second apart); 0 unless at
    least MANY_OPT_ACTIONS ran, since the phase is then mostly theirs."""


MANY_OPT_ACTIONS = 100


def _stamp(event: dict[str, object]) -> float:
    secs, nanos = event["timestamp"]  # type: ignore[misc]
    return float(secs) + nanos / 1e9


def read_record(lines: list[str]) -> Record:
    record = Record()
    cpu: list[tuple[float, float]] = []  # (time, the daemon's CPU seconds so far)
    opt_spans: list[tuple[float, float]] = []
    last_compile = last_action = 0.0
    for line in lines:
        if not line.startswith("{"):
            continue
        if '"SpanEnd"' in line:
            event = orjson.loads(line)["Event"]
            end = event["data"]["SpanEnd"]
            data = end.get("data", {})
            if "Analysis" in data:
                record.analysis += end.get("duration_us", 0) / 1e6
            elif "DeferredEvaluation" in data:
                record.dynamic += end.get("duration_us", 0) / 1e6
            elif "ActionExecution" in data:
                action = data["ActionExecution"]
                category = action["name"]["category"]
                last_action = max(last_action, _stamp(event))
                if category in COMPILE_CATEGORIES:
                    last_compile = max(last_compile, _stamp(event))
                if action.get("execution_kind") not in RAN_KINDS:
                    record.cached += 1
                    continue
                record.actions[category] += 1
                if category in PLAN_CATEGORIES:
                    record.plan_time += action.get("wall_time_us", 0) / 1e6
                if category in OPT_CATEGORIES:
                    stop = _stamp(event)
                    opt_spans.append((stop - end.get("duration_us", 0) / 1e6, stop))
        elif '"Snapshot"' in line:
            event = orjson.loads(line)["Event"]
            snapshot = event["data"]["Instant"]["data"].get("Snapshot")
            if snapshot:
                record.daemon_peak = max(record.daemon_peak, snapshot.get("buck2_max_rss", 0))
                used = snapshot.get("buck2_user_cpu_us", 0) + snapshot.get("buck2_system_cpu_us", 0)
                cpu.append((_stamp(event), used / 1e6))
    if last_compile:
        record.tail = last_action - last_compile
    if len(opt_spans) >= MANY_OPT_ACTIONS and cpu:
        first = min(start for start, _ in opt_spans)
        last = max(stop for _, stop in opt_spans)

        def at(t: float) -> float:
            return min(cpu, key=lambda point: abs(point[0] - t))[1]

        record.opt_daemon_ms = (at(last) - at(first)) / len(opt_spans) * 1000
    return record


@dataclass
class Measured:
    wall: float
    record: Record
    plan_peak: int
    link_peak: int
    largest: int
    largest_role: str


def measure(
    session: Session, target: str, project: Path, expected: str, keep: Path | None
) -> Measured:
    with Peaks(project) as peaks:
        built = session.build(target)
    out = subprocess.run([str(built.exe)], capture_output=True, text=True, check=True).stdout
    if out != expected:
        raise AssertionError(f"{target} printed {out!r}, not {expected!r}")
    log = session.buck("log", "show", config=False).stdout
    if keep is not None:
        keep.write_text(log)
        processes = [{"pid": pid, "role": r, "peak": hwm, "argv": peaks.argv.get(pid, [])[:8]}
                     for pid, (r, hwm) in sorted(peaks.by_pid.items())]  # fmt: skip
        keep.with_suffix(".peaks.json").write_bytes(orjson.dumps(processes))
    record = read_record(log.splitlines())
    largest_role = max(LINK_ROLES, key=lambda r: peaks.peak(r))
    measured = Measured(
        wall=built.wall,
        record=record,
        plan_peak=peaks.peak("plan"),
        link_peak=peaks.peak("link"),
        largest=peaks.peak(*LINK_ROLES),
        largest_role=largest_role,
    )
    if keep is not None:  # so that `--report-from` can print a run that did not finish
        fields = {k: v for k, v in vars(measured).items() if k != "record"}
        keep.with_suffix(".result.json").write_bytes(orjson.dumps(fields))
    return measured


def kept_results(records: Path, n: int) -> dict[str, dict[str, Measured]]:
    """The builds a run with `--records` kept for N, in the order of VARIANTS."""
    results: dict[str, dict[str, Measured]] = {}
    for variant in VARIANTS:
        for build in KINDS:
            stem = records / f"{n}-{variant}-{build}"
            log = stem.with_suffix(".jsonl")
            if not log.exists():
                continue
            lines = log.read_text().splitlines()
            record = read_record(lines)
            result = stem.with_suffix(".result.json")
            if result.exists():
                fields = orjson.loads(result.read_bytes())
            else:  # kept before results were: the command's span and the peaks kept
                fields = _from_peaks(stem.with_suffix(".peaks.json"), _command_seconds(lines))
            results.setdefault(variant, {})[build] = Measured(record=record, **fields)
    return results


def _command_seconds(lines: list[str]) -> float:
    """The build command's duration, from its span in the event log."""
    for line in lines:
        if '"SpanEnd"' in line and '"Command"' in line:
            end = orjson.loads(line)["Event"]["data"]["SpanEnd"]
            if "Command" in end.get("data", {}):
                return float(end["duration_us"]) / 1e6
    return 0.0


def _from_peaks(path: Path, wall: float) -> dict[str, object]:
    by_role: dict[str, int] = collections.defaultdict(int)
    for process in orjson.loads(path.read_bytes()):
        by_role[process["role"]] = max(by_role[process["role"]], process["peak"])
    largest_role = max(LINK_ROLES, key=lambda r: by_role[r])
    largest = max(by_role[r] for r in LINK_ROLES)
    return {"wall": wall, "plan_peak": by_role["plan"], "link_peak": by_role["link"],
            "largest": largest, "largest_role": largest_role}  # fmt: skip


def run(
    n: int, seed: int, variants: list[str], records: Path | None
) -> dict[str, dict[str, Measured]]:
    w = gw.generate(seed, n)
    expected = f"checksum {w.checksum():016x}\n"
    results: dict[str, dict[str, Measured]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        projects: dict[str, Path] = {}
        for kind in sorted({VARIANTS[v][0] for v in variants}):
            make = scratch_project if kind == "ours" else upstream_scratch_project
            projects[kind] = make(Path(tmp) / kind)
            gw.write_project(w, projects[kind], kind)
        for k, variant in enumerate(variants):
            kind, binary = VARIANTS[variant]
            project = projects[kind]
            edited = project / gw.PACKAGE / w.edited
            original = edited.read_text()
            target = f"//{gw.PACKAGE}/app:{binary}"
            session = Session(project)
            results[variant] = {}
            try:
                for build in KINDS:
                    if build == "incremental":
                        gw.edit(edited, k + 1)
                    keep = records / f"{n}-{variant}-{build}.jsonl" if records else None
                    results[variant][build] = measure(session, target, project, expected, keep)
                    m = results[variant][build]
                    print(f"# {n} {variant} {build}: {m.wall:.1f} s", file=sys.stderr, flush=True)
            finally:
                session.close()
                edited.write_text(original)
            shutil.rmtree(project / "buck-out", ignore_errors=True)
    return results


def report(n: int, results: dict[str, dict[str, Measured]]) -> None:
    print(f"\n# N = {n}: wall, tail (after the last compile) and analysis in s, memory in MiB,"
          f" daemon/opt the daemon's CPU ms per opt action over their span; {os.cpu_count()} CPUs,"
          f" load average at the end {os.getloadavg()[0]:.2f}")  # fmt: skip
    head = ("variant", "build", "wall", "tail", "analysis", "dynamic", "actions", "plan s",
            "plan MiB", "daemon MiB", "daemon/opt", "largest MiB", "(what)")  # fmt: skip
    print("".join(f"{h:>12}" for h in head))
    for variant, builds in results.items():
        for build, m in builds.items():
            r = m.record
            cells = [variant, build, f"{m.wall:.1f}", f"{r.tail:.1f}", f"{r.analysis:.2f}",
                     f"{r.dynamic:.2f}",
                     str(sum(r.actions.values())), f"{r.plan_time:.2f}",
                     f"{m.plan_peak / MIB:.0f}", f"{r.daemon_peak / MIB:.0f}",
                     f"{r.opt_daemon_ms:.1f}" if r.opt_daemon_ms else "-", f"{m.largest / MIB:.0f}",
                     m.largest_role]  # fmt: skip
            print("".join(f"{c:>12}" for c in cells))
    for variant, builds in results.items():
        for build, m in builds.items():
            top = ", ".join(f"{c} {k}" for c, k in m.record.actions.most_common(5))
            print(f"# {variant} {build} ran: {top}; cached or skipped {m.record.cached}")
    print()
    for variant, builds in results.items():
        base = results.get(BASELINE[variant])
        if base is None:
            continue
        for build, m in builds.items():
            b = base[build]
            link = base["full"].link_peak
            print(f"buck2-scale/{n}/{variant}/{build}: dist/inprocess {m.wall / b.wall:.3f},"
                  f" peak MiB {m.largest / MIB:.0f}/{link / MIB:.0f}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", default="2000", help="module counts, comma-separated")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--records", type=Path, help="keep each build's event log here")
    parser.add_argument("--report-from", type=Path, metavar="DIR",
                        help="build nothing; print what `--records DIR` kept")  # fmt: skip
    args = parser.parse_args()
    if args.report_from:
        for n in (int(x) for x in args.n.split(",")):
            report(n, kept_results(args.report_from, n))
        return 0
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {unknown[0]!r} (known: {', '.join(VARIANTS)})")
    if args.records:
        args.records.mkdir(parents=True, exist_ok=True)
    # Each baseline first, so a distributed build's ratio exists even if a later one fails.
    ordered = sorted(variants, key=lambda v: (BASELINE[v] != v, variants.index(v)))
    for n in (int(x) for x in args.n.split(",")):
        report(n, run(n, args.seed, ordered, args.records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
