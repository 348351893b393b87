#!/usr/bin/env python3
"""What a build farm gives: a link's wall time with W remote workers, from its own record.

The model. A distributed ThinLTO link is an index step and a final link on the local
machine with the backends between them. Given one build's record, each backend's
measured time `d` and the order the rules or the distributor issue them, W workers
take the backends in that order, each the next one as soon as one is free (list
scheduling), each backend occupying its worker for `d + o`, where `o` is a per-action
remote overhead (upload, queue, download, the worker's own setup) measured on
BuildBarn. So

    wall(W) = local + makespan(list-schedule(d_1 + o, ..., d_n + o; W))

`local` is the index step, the final link and whatever else the link runs on this
machine. In-process ThinLTO on C cores is modelled as `local + max(sum(d) / C, max(d))`:
its backends' CPU over its threads, the largest backend as the floor. Assumed: the
workers are as fast as the machine that recorded `d`; the engine is not the
bottleneck; the local steps do not change with W.

Workers that share the recording machine (the check below: W BuildBarn workers, the
engine and the client on this host's cores) do not each have a core: a backend's time
there is what it takes while W backends run at once on this host. So the record that
predicts W such workers is taken with W jobs at a time (`distribute --jobs=W`), in the
same CPU group as the engine (Linux's autogroup scheduler gives each session one
share, so the engine runs in the check's own session). `o`, measured with one worker
against a one-job record, carries the engine's and the client's CPU per action as it
is paid while a core is free. Once the workers are as many as the cores (W >= C) that
CPU comes out of the cores the backends use, so the backends also take at least the
record's span plus `n * h / A`: `h` the engine's and the client's CPU per action
(measured from /proc on the link with one worker), `A` the cores the record's
processes got (their CPU over the record's wall time):

    wall(W) = local + max(makespan(d + o; W), makespan(d; W) + n * h / A)   if W >= C

Records:
- a `dist-lto distribute --trace` of the link (its job slices give `d` and the issue
  order; `--wall S`, the link's measured wall time, gives `local` as S minus the
  trace's span of jobs, which with one job at a time is the sum of `d`);
- a Buck2 event log (`buck2 log show`, e.g. one kept by `bench/scale.py --records`):
  the opt actions' times in the order they started, the plan action (index step) and
  the final link action as `local`.

Subcommands:

    predict RECORD [--wall S] [--workers 10,100,1000] [--overhead O] [--label L]
            [--times K [--largest S]]
        prints `farm-model/<L>/<W>: predicted P s` per W and the in-process figures;
        with --times, for a program K times as large as the record's (`extrapolated`)
    check [--n 500] [--attempts 3] [--own-sessions]
        on a BuildBarn engine started here (loopback, one then two workers, each one
        action at a time): `o` from Lua's link with one worker, then for the generated
        workload and zstd, `farm-model/<workload>/<W>: predicted P s, measured M s`
        for W = 1 and 2; then, per workload, W = 2 predicted with `o` from that
        workload's own one-worker link. Each link's record is a local run at W jobs
        taken just before and again just after the remote link (the machine's load
        moves; the prediction is the mean of the two); the CPU that the engine and the
        client spent per action and that other processes took meanwhile are printed
        with each point (from /proc); a point is retried (--attempts) while other
        processes took over a quarter core. --own-sessions: each engine process in a
        session, so a CPU share, of its own, unlike the local records
"""

from __future__ import annotations

import argparse
import heapq
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    from support import buildbarn

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

OPT_CATEGORIES = (
    "thin_lto_opt",
    "thin_lto_opt_object_executable",
    "thin_lto_opt_archive_executable",
)
"""Opt actions (one backend each) of our rules and of upstream's."""
INDEX_CATEGORIES = ("thin_lto_plan", "thin_lto_index_executable")
FINAL_LINK_CATEGORIES = ("thin_lto_link", "thin_lto_link_executable")


@dataclass(frozen=True)
class Record:
    """One link as the model sees it: local seconds and the backends' seconds in the
    order they are issued."""

    local: float
    backends: tuple[float, ...]


def makespan(durations: list[float] | tuple[float, ...], workers: int, overhead: float) -> float:
    """List scheduling: each backend, in order, goes to the worker free first."""
    if not durations:
        return 0.0
    free = [0.0] * min(workers, len(durations))
    for d in durations:
        heapq.heappush(free, heapq.heappop(free) + d + overhead)
    return max(free)


def predict(record: Record, workers: int, overhead: float) -> float:
    return record.local + makespan(record.backends, workers, overhead)


def predict_shared(
    record: Record, workers: int, overhead: float, host_cpu: float, cores: float, host_cores: int
) -> float:
    """W workers on the machine that took `record` at W jobs (`cores`: the cores its
    processes got meanwhile). Each worker is bound as on a farm; when they are at least
    as many as the machine's cores they fill every core the link gets, and the engine's
    and the client's CPU (`host_cpu` per action) comes out of the same cores, so the
    backends also take at least the record's span plus that CPU over `cores`."""
    bound = predict(record, workers, overhead)
    if workers < host_cores:
        return bound
    span = makespan(record.backends, workers, 0.0)
    return max(bound, record.local + span + len(record.backends) * host_cpu / cores)


def in_process(record: Record, threads: int) -> float:
    if not record.backends:
        return record.local
    return record.local + max(sum(record.backends) / threads, max(record.backends))


def from_trace(trace: dict, wall: float) -> Record:
    """A record from a `distribute --trace` document and the link's wall time."""
    jobs = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "job"]
    if not jobs:
        raise ValueError("the trace has no job slices")
    jobs.sort(key=lambda e: e["ts"])
    span = (max(e["ts"] + e["dur"] for e in jobs) - jobs[0]["ts"]) / 1e6
    return Record(local=wall - span, backends=tuple(e["dur"] / 1e6 for e in jobs))


def from_buck2_log(lines: list[str]) -> Record:
    """A record from `buck2 log show`: opt actions in the order they started, the index
    step and the final link as the local part."""
    opts: list[tuple[float, float]] = []
    local = 0.0
    for line in lines:
        if '"SpanEnd"' not in line or '"ActionExecution"' not in line:
            continue
        action = orjson.loads(line)["Event"]["data"]["SpanEnd"]["data"]["ActionExecution"]
        category = action["name"]["category"]
        seconds = action.get("wall_time_us", 0) / 1e6
        if category in OPT_CATEGORIES:
            commands = action.get("commands") or [{}]
            start = commands[-1].get("details", {}).get("metadata", {}).get("start_time", [0, 0])
            opts.append((start[0] + start[1] / 1e9, seconds))
        elif category in INDEX_CATEGORIES or category in FINAL_LINK_CATEGORIES:
            local += seconds
    if not opts:
        raise ValueError("the event log has no opt actions that ran")
    opts.sort(key=lambda o: o[0])
    return Record(local=local, backends=tuple(d for _, d in opts))


def extrapolated(record: Record, times: int, largest: float | None) -> Record:
    """`record` for a program `times` as large made of the same kinds of modules and one
    very large module: every other backend `times` over, in the record's order, the
    largest once (taking `largest` seconds, if given: it grows its own way), the local
    steps `times` as long (the index step and final link grow with the modules)."""
    big = record.backends.index(max(record.backends))
    backends: list[float] = []
    for i, d in enumerate(record.backends):
        if i == big:
            backends.append(d if largest is None else largest)
        else:
            backends += [d] * times
    return Record(local=record.local * times, backends=tuple(backends))


def read_record(path: Path, wall: float | None) -> Record:
    if path.suffix == ".jsonl":
        return from_buck2_log(path.read_text().splitlines())
    if wall is None:
        raise SystemExit(f"{path}: a distribute trace needs --wall (the link's wall time)")
    return from_trace(orjson.loads(path.read_bytes()), wall)


def report_predictions(label: str, record: Record, workers: list[int], overhead: float) -> None:
    d = record.backends
    print(f"# {label}: {len(d)} backends, sum {sum(d):.1f} s, largest {max(d):.2f} s,"
          f" local {record.local:.2f} s, overhead {overhead * 1000:.0f} ms per action")  # fmt: skip
    for w in workers:
        print(f"farm-model/{label}/{w}: predicted {predict(record, w, overhead):.1f} s")
    for cores in (2, 64):
        print(f"farm-model/{label}/inprocess-{cores}-cores: predicted"
              f" {in_process(record, cores):.1f} s")  # fmt: skip
    big = max(workers)
    span = makespan(d, big, overhead)
    print(f"# at W = {big}: local {record.local:.2f} s, backends {span:.2f} s"
          f" (the largest backend {max(d):.2f} s + overhead)")  # fmt: skip


# -- the check on BuildBarn ------------------------------------------------------------


DIST_LTO = str(Path(sys.executable).parent / "dist-lto")
TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu(stat: str) -> tuple[float, float]:
    """CPU seconds of a process from its /proc/PID/stat line: its own (user + system)
    and its waited-for children's (a BuildBarn runner's are the compilers it ran)."""
    fields = stat.rsplit(")", 1)[1].split()  # the name, in parentheses, may hold anything
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return (utime + stime) / TICKS, (cutime + cstime) / TICKS


def machine_busy(stat: str) -> float:
    """CPU seconds all cores spent busy since boot, from /proc/stat's `cpu` line (user,
    nice, system, irq, softirq, and steal: time the hypervisor gave to other guests;
    idle and iowait apart)."""
    ticks = [int(t) for t in stat.splitlines()[0].split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / TICKS


@dataclass(frozen=True)
class HostCpu:
    """CPU seconds spent on this host during a remote link, by who spent them."""

    client: float
    """The link: clang's driver, LLD (index step, final link), the distributor."""
    engine: float
    """BuildBarn's own processes (storage, scheduler, workers, runners)."""
    backends: float
    """The compilers the runners ran."""
    others: float
    """Everything else: other users' work on this machine, other guests' on its host."""

    def per_action(self, actions: int) -> float:
        """The host's CPU per action beyond the backends: the engine's and the client's."""
        return (self.engine + self.client) / actions


@dataclass(frozen=True)
class Snapshot:
    """CPU seconds spent so far: per engine process (its own, its children's), by this
    process's waited-for children, by the whole machine."""

    engine: dict[str, tuple[float, float]]
    children: float
    busy: float

    @classmethod
    def take(cls, pids: dict[str, int]) -> Snapshot:
        engine = {name: process_cpu(Path(f"/proc/{pid}/stat").read_text())
                  for name, pid in pids.items()}  # fmt: skip
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        busy = machine_busy(Path("/proc/stat").read_text())
        return cls(engine, children.ru_utime + children.ru_stime, busy)

    def until(self, later: Snapshot) -> HostCpu:
        """Who spent the CPU between this snapshot and `later` (the link being this
        process's only child to end meanwhile)."""
        own = sum(later.engine[n][0] - self.engine[n][0] for n in later.engine)
        compiled = sum(later.engine[n][1] - self.engine[n][1] for n in later.engine)
        client = later.children - self.children
        others = later.busy - self.busy - own - compiled - client
        return HostCpu(client=client, engine=own, backends=compiled, others=max(others, 0.0))


@dataclass
class Link:
    """A link to time: its directory, its inputs and flags."""

    name: str
    root: Path
    inputs: list[str]

    def run(self, distribute: list[str]) -> float:
        from support import workloads

        (self.root / "prog").unlink(missing_ok=True)
        started = time.monotonic()
        proc = subprocess.run(
            [workloads.CLANG, "-flto=thin", "-fuse-ld=lld", "-O2", *self.inputs, "-o", "prog",
             f"-fthinlto-distributor={DIST_LTO}", "-Xthinlto-distributor=distribute",
             *(f"-Xthinlto-distributor={a}" for a in distribute)],
            cwd=self.root, capture_output=True, text=True,
        )  # fmt: skip
        seconds = time.monotonic() - started
        if proc.returncode != 0:
            raise SystemExit(f"{self.name}: link failed ({' '.join(distribute)}):\n{proc.stderr}")
        return seconds

    def record(self, jobs: int) -> Record:
        """The link's record: `jobs` backends at a time here, no cache."""
        trace = self.root / "trace.json"
        wall = self.run([f"--jobs={jobs}", "--no-cache", f"--trace={trace}"])
        return from_trace(orjson.loads(trace.read_bytes()), wall)


def workload_link(name: str, work: Path, n: int) -> Link:
    """Lua or zstd from Debian's sources, or the generated workload of `n` modules."""
    from support import workloads

    if name in ("lua", "zstd"):
        b = workloads.build(name, work / name)
        return Link(name, b.root, [*b.objects, *b.native, *b.link_flags])
    import gen_workload as gw

    w = gw.generate(1, n)
    pkg = work / "gen"
    gw.write_sources(w, pkg)
    includes = [f"-I{pkg / lib.name}" for lib in w.libraries]
    units = ["app/main.c", *(f"{lib.name}/{s}" for lib in w.libraries for s in lib.sources)]
    procs: list[subprocess.Popen[bytes]] = []
    for unit in units:
        cmd = [workloads.CLANG, "-O2", "-flto=thin", *includes, "-c", unit,
               "-o", unit[:-2] + ".o"]  # fmt: skip
        procs.append(subprocess.Popen(cmd, cwd=pkg))
        if len(procs) >= 2 and procs.pop(0).wait() != 0:
            raise SystemExit(f"compiling the generated workload failed ({unit})")
    if any(p.wait() != 0 for p in procs):
        raise SystemExit("compiling the generated workload failed")
    return Link(f"generated-{n}", pkg, [u[:-2] + ".o" for u in units])


def remote_link(link: Link, engine_address: str) -> float:
    """One link with every backend on the engine: a new instance, so no action cache."""
    instance = f"farm-{uuid.uuid4().hex[:8]}"
    return link.run([f"--remote={engine_address}", f"--instance={instance}", "--jobs=16",
                     "--no-cache"])  # fmt: skip


QUIET = 0.25
"""Other processes' CPU, in cores, up to which a point counts as taken on a quiet machine."""


@dataclass(frozen=True)
class Taken:
    """A record taken here, with the cores the link's processes and other processes got
    meanwhile (CPU seconds over the link's wall time)."""

    record: Record
    cores: float
    others: float


@dataclass(frozen=True)
class Point:
    """One checked link at W workers: its records at W jobs here, taken just before and
    just after the remote link, the remote link's wall time and the host's CPU meanwhile."""

    before: Taken
    after: Taken
    measured: float
    cpu: HostCpu
    attempts: int = 1

    @property
    def others(self) -> float:
        """The most cores other processes took during either record or the remote link."""
        return max(self.before.others, self.cpu.others / self.measured, self.after.others)

    def predict(self, workers: int, overhead: float, host_cpu: float) -> float:
        """The mean of the two records' predictions (`predict_shared`): a load that
        drifts during the measurement moves them in opposite directions."""
        cores = os.cpu_count() or 1
        return (
            sum(
                predict_shared(t.record, workers, overhead, host_cpu, t.cores, cores)
                for t in (self.before, self.after)
            )
            / 2
        )

    def overhead(self) -> float:
        """The per-action overhead that makes the model meet this link (with one worker)."""
        return sum(own_overhead(t.record, self.measured) for t in (self.before, self.after)) / 2

    def host_cpu(self) -> float:
        """The engine's and the client's CPU per action during the remote link."""
        return self.cpu.per_action(len(self.before.record.backends))


def own_overhead(record: Record, one_worker: float) -> float:
    """The per-action overhead that makes the model meet a link measured with one worker."""
    return (one_worker - record.local - sum(record.backends)) / len(record.backends)


def quietest(attempt: Callable[[], Point], attempts: int) -> Point:
    """The first point taken with other processes under `QUIET` cores, else the one
    they disturbed least, of up to `attempts` tries."""
    best = attempt()
    tried = 1
    while best.others > QUIET and tried < attempts:
        point = attempt()
        tried += 1
        if point.others < best.others:
            best = point
    return replace(best, attempts=tried)


def timed_record(link: Link, engine: buildbarn.Engine, jobs: int) -> Taken:
    """The link's record at `jobs` jobs, and the cores it and other processes got."""
    start, started = Snapshot.take(engine.pids), time.monotonic()
    record = link.record(jobs)
    spent = start.until(Snapshot.take(engine.pids))
    wall = time.monotonic() - started
    return Taken(record, spent.client / wall, spent.others / wall)


def measure(link: Link, engine: buildbarn.Engine, workers: int) -> Point:
    """The link's records at `workers` jobs around its remote link on `engine`."""
    before = timed_record(link, engine, workers)
    start = Snapshot.take(engine.pids)
    measured = remote_link(link, engine.address)
    cpu = start.until(Snapshot.take(engine.pids))
    after = timed_record(link, engine, workers)
    return Point(before, after, measured, cpu)


def describe(label: str, workers: int, point: Point) -> str:
    b, a = point.before, point.after
    d = b.record.backends
    return (f"# {label} at {workers} job(s) here: {len(d)} backends, sum {sum(d):.2f} s"
            f" before, {sum(a.record.backends):.2f} s after, largest {max(d):.2f} s,"
            f" local {b.record.local:.2f} s, the link's processes {b.cores:.2f} and"
            f" {a.cores:.2f} cores; remote: engine + client CPU {point.host_cpu() * 1000:.0f} ms"
            f" per action, backends' CPU {point.cpu.backends:.1f} s; other processes up to"
            f" {point.others:.2f} cores (try {point.attempts})")  # fmt: skip


def check(n: int, attempts: int, own_sessions: bool) -> None:
    from support import buildbarn

    buildbarn.build()
    names = ("lua", "generated", "zstd")
    with tempfile.TemporaryDirectory(prefix="farm-model-") as tmp:
        work = Path(tmp)
        links = {name: workload_link(name, work, n) for name in names}
        # the engine in this process's session (Linux autogroup gives a session one CPU
        # share): it and the local records compete for the same share
        engine = buildbarn.start(work / "engine", workers=1, own_sessions=own_sessions)
        points: dict[tuple[str, int], Point] = {}
        one_job: dict[str, Taken] = {}
        overhead = 0.0
        try:
            for workers in (1, 2):
                if workers == 2:
                    engine.start_worker("w2")
                for name, link in links.items():
                    if workers == 2:  # what a one-job record would predict, for comparison
                        one_job[name] = timed_record(link, engine, 1)
                    point = quietest(partial(measure, link, engine, workers), attempts)
                    points[(name, workers)] = point
                    if (name, workers) == ("lua", 1):
                        overhead = point.overhead()
                        print(f"# per-action remote overhead from Lua with one worker:"
                              f" {overhead * 1000:.0f} ms ({len(point.before.record.backends)}"
                              f" backends, measured {point.measured:.2f} s)")  # fmt: skip
                    print(describe(link.name, workers, point))
                    if name != "lua":
                        host_cpu = points[(name, 1)].host_cpu()
                        print(outcome(link.name, workers, point, overhead, host_cpu))
                    sys.stdout.flush()
        finally:
            engine.stop()
    for name in names:
        label = links[name].name
        own = points[(name, 1)].overhead()
        point = points[(name, 2)]
        q, m = predict(one_job[name].record, 2, own), point.measured
        print(outcome(label, 2, point, own, points[(name, 1)].host_cpu())[:-1]
              + f"; overhead {own * 1000:.0f} ms from its own one-worker link; from a one-job"
              f" record {q:.1f} s, {(q - m) / m:+.0%}, other processes {one_job[name].others:.2f}"
              " cores)")  # fmt: skip


def outcome(label: str, workers: int, point: Point, overhead: float, host_cpu: float) -> str:
    """`farm-model/<label>/<W>: predicted P s, measured M s (deviation; ...)`."""
    p, m = point.predict(workers, overhead, host_cpu), point.measured
    bound = point.predict(workers, overhead, 0.0)
    return (f"farm-model/{label}/{workers}: predicted {p:.1f} s, measured {m:.1f} s"
            f" ({(p - m) / m:+.0%}; the workers' bound {bound:.1f} s, host CPU"
            f" {host_cpu * 1000:.0f} ms per action)")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("predict", help="predictions from one record")
    p.add_argument("record", type=Path, help="a Buck2 event log (.jsonl) or a distribute trace")
    p.add_argument("--wall", type=float, help="the traced link's wall time in s")
    p.add_argument("--workers", default="10,100,1000")
    p.add_argument("--overhead", type=float, default=0.0, help="per-action overhead in s")
    p.add_argument("--label", default="")
    p.add_argument("--times", type=int, default=1, help="extrapolate to a program K times larger")
    p.add_argument("--largest", type=float, help="with --times: the largest backend's seconds")
    c = sub.add_parser("check", help="predicted against measured on BuildBarn")
    c.add_argument("--n", type=int, default=500, help="modules of the generated workload")
    c.add_argument(
        "--attempts", type=int, default=3, help="tries per point while others take the CPU"
    )
    c.add_argument(
        "--own-sessions", action="store_true",
        help="each engine process in a session, so a CPU share, of its own",
    )  # fmt: skip
    args = parser.parse_args()
    if args.command == "predict":
        record = read_record(args.record, args.wall)
        if args.times > 1 or args.largest is not None:
            record = extrapolated(record, args.times, args.largest)
        workers = [int(w) for w in args.workers.split(",")]
        report_predictions(args.label or args.record.stem, record, workers, args.overhead)
    else:
        check(args.n, args.attempts, args.own_sessions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
