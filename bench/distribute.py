#!/usr/bin/env python3
"""`dist-lto distribute` next to the other ways of running a ThinLTO link's backends.

For each workload (Lua with its library in a thin archive, zstd with its library and
assembly object in a regular archive), the same LLD 22 link is timed, wall clock,
interleaved round by round (the order rotates), as

    inprocess      LLD's own threads, --thinlto-jobs=<jobs>
    serial         DTLTO, a distributor that runs the jobs one after another (LLVM's example)
    threads        DTLTO, a plain <jobs>-thread distributor in job-file order
    ours-j1        DTLTO, dist-lto distribute --jobs=1 --no-cache
    ours-cold      DTLTO, dist-lto distribute --jobs=<jobs>, a new empty cache every round
    ours-forked    the same with --no-compile-server: every job in a forked clang
    ours-nofork    the same with --no-fork-server: a compiler started per job
    ours-warm      DTLTO, dist-lto distribute --jobs=<jobs>, the cache of a cold link

Distributors are started the way a user starts them: `dist-lto` is the console script,
the reference distributors are Python scripts run by this interpreter. Medians per
variant and workload, then ratios of the sums over the workloads, and each
distributor's start-up alone (a job file without jobs). Every binary passes the
workload's functional check once. Then what a cached job costs: the warm link again,
its distributor started through a wrapper that reads the distributor's CPU time (user
and system, `getrusage` of its children), less the CPU of the same distributor on a
job file without jobs, per job. Last lines: `distribute-cold/serial: <ratio>`,
`distribute-cold/inprocess: <ratio>` and `warm-lookup-ms-per-job: <ms>`.

Usage: .venv/bin/python bench/distribute.py [--workloads lua,zstd] [--rounds 5] [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support import workloads

LLVM_AR = os.path.join(workloads.LLVM_BIN, "llvm-ar")
VENV_BIN = Path(sys.executable).parent
DIST_LTO = str(VENV_BIN / "dist-lto")

SERIAL = """\
import json, subprocess, sys
with open(sys.argv[-1]) as f:
    doc = json.load(f)
for job in doc["jobs"]:
    subprocess.run(doc["common"]["args"] + job["args"], check=True)
"""

THREADS = """\
import json, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
with open(sys.argv[-1]) as f:
    doc = json.load(f)
def run(job):
    return subprocess.run(doc["common"]["args"] + job["args"]).returncode
with ThreadPoolExecutor(int(sys.argv[1])) as pool:
    sys.exit(max(pool.map(run, doc["jobs"]), default=0))
"""

CPU_WRAPPER = """\
import json, os, resource, subprocess, sys
done = subprocess.run([{dist_lto!r}, *sys.argv[1:]])
used = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[-1], "rb") as f:
    jobs = len(json.load(f)["jobs"])
with open(os.environ["DIST_LTO_BENCH_CPU"], "a") as f:
    f.write(f"{{used.ru_utime + used.ru_stime}} {{jobs}}\\n")
sys.exit(done.returncode)
"""
"""A distributor that runs ours and appends its CPU seconds and job count to a file."""

VARIANTS = ["inprocess", "serial", "threads", "ours-j1", "ours-cold", "ours-forked", "ours-nofork",
            "ours-warm"]  # fmt: skip


def script(path: Path, body: str) -> str:
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return str(path)


class Workload:
    """One program, ready to link in `root` with every variant."""

    def __init__(self, name: str, work: Path, jobs: int) -> None:
        self.name = name
        self.build = workloads.build(name, work / name)
        self.root = self.build.root
        thin = name == "lua"
        lib = f"lib{name}.a"
        members = [*self.build.library, *self.build.native]
        subprocess.run([LLVM_AR, "rcs", *(["--thin"] if thin else []), lib, *members],
                       cwd=self.root, check=True)  # fmt: skip
        self.base = [workloads.CLANG, "-flto=thin", "-fuse-ld=lld", "-O2", *self.build.main,
                     lib, *self.build.link_flags]  # fmt: skip
        self.jobs = jobs
        self.serial = script(work / "serial.py", SERIAL)
        self.threads = script(work / "threads.py", THREADS)
        self.caches = work / f"{name}-caches"
        self.warm_cache = self.caches / "warm"
        self.rounds = 0
        self.checked: set[str] = set()

    def command(self, variant: str) -> list[str]:
        ours = [f"-fthinlto-distributor={DIST_LTO}", "-Xthinlto-distributor=distribute"]
        if variant == "inprocess":
            flags = [f"-Wl,--thinlto-jobs={self.jobs}"]
        elif variant == "serial":
            flags = [f"-fthinlto-distributor={self.serial}"]
        elif variant == "threads":
            flags = [f"-fthinlto-distributor={self.threads}", f"-Xthinlto-distributor={self.jobs}"]
        elif variant == "ours-j1":
            flags = [*ours, "-Xthinlto-distributor=--jobs=1", "-Xthinlto-distributor=--no-cache"]
        else:
            cache = self.warm_cache if variant == "ours-warm" else self.new_cache()
            flags = [*ours, f"-Xthinlto-distributor=--jobs={self.jobs}",
                     f"-Xthinlto-distributor=--cache-dir={cache}"]  # fmt: skip
            if variant == "ours-nofork":
                flags.append("-Xthinlto-distributor=--no-fork-server")
            elif variant == "ours-forked":
                flags.append("-Xthinlto-distributor=--no-compile-server")
        return [*self.base, "-o", variant, *flags]

    def new_cache(self) -> Path:
        self.rounds += 1
        return self.caches / f"cold{self.rounds}"

    def time(self, variant: str) -> float:
        start = time.perf_counter()
        done = subprocess.run(self.command(variant), cwd=self.root, capture_output=True,
                              text=True)  # fmt: skip
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"{self.name} {variant}: link failed:\n{done.stderr}")
        if variant not in self.checked:
            workloads.check_binary(self.name, self.root / variant)
            self.checked.add(variant)
        return elapsed

    def warm_lookup(self, work: Path, runs: int) -> tuple[float, int]:
        """Median CPU seconds of the warm link's distributor above its start-up, and
        its jobs: the distributor runs through `CPU_WRAPPER`, its start-up is measured
        on a job file without jobs, with the same cache."""
        wrapper = script(work / "cpu-distributor.py", CPU_WRAPPER.format(dist_lto=DIST_LTO))
        record = work / f"{self.name}-cpu"
        env = {**os.environ, "DIST_LTO_BENCH_CPU": str(record)}
        cache = f"--cache-dir={self.warm_cache}"
        warm = [*self.base, "-o", "ours-warm", f"-fthinlto-distributor={wrapper}",
                "-Xthinlto-distributor=distribute", f"-Xthinlto-distributor={cache}",
                f"-Xthinlto-distributor=--jobs={self.jobs}"]  # fmt: skip
        empty = empty_job_file(work)
        for _ in range(runs):
            for command in (warm, [wrapper, "distribute", cache, str(empty)]):
                done = subprocess.run(command, cwd=self.root, env=env, capture_output=True,
                                      text=True)  # fmt: skip
                counts = re.search(r"(\d+) jobs, (\d+) cached", done.stderr)
                if done.returncode != 0 or (counts and counts[1] != counts[2]):
                    raise SystemExit(f"{self.name}: warm link not all cached:\n{done.stderr}")
        lines = [line.split() for line in record.read_text().splitlines()]
        links = [(float(cpu), int(jobs)) for cpu, jobs in lines if int(jobs)]
        starts = [float(cpu) for cpu, jobs in lines if not int(jobs)]
        (jobs,) = {n for _, n in links}
        return statistics.median(c for c, _ in links) - statistics.median(starts), jobs

    def warm_up(self) -> None:
        """Fill the warm cache, and bring inputs and tools into the page cache."""
        self.time("inprocess")
        self.time("ours-warm")  # the warm cache is still empty: this link fills it


def empty_job_file(work: Path) -> Path:
    empty = work / "empty.dist-file.json"
    empty.write_text('{"common": {"linker_output": "p", "args": ["clang"], "inputs": []},'
                     ' "jobs": []}')  # fmt: skip
    return empty


def startup(work: Path, runs: int = 15) -> dict[str, float]:
    """Median wall ms of each distributor on a job file without jobs: its start-up alone."""
    empty = empty_job_file(work)
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "serial script": [script(work / "serial.py", SERIAL), str(empty)],
        "dist-lto distribute": [DIST_LTO, "distribute", str(empty)],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, command in commands.items():
            start = time.perf_counter()
            subprocess.run(command, check=True)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="lua,zstd")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()
    names = args.workloads.split(",")
    with tempfile.TemporaryDirectory(prefix="bench-distribute-") as tmp:
        work = Path(tmp)
        loads = [Workload(name, work, args.jobs) for name in names]
        times: dict[str, dict[str, list[float]]] = {w.name: {v: [] for v in VARIANTS}
                                                     for w in loads}  # fmt: skip
        for load in loads:
            load.warm_up()
        for round_ in range(args.rounds):
            for load in loads:
                shift = round_ % len(VARIANTS)
                for variant in VARIANTS[shift:] + VARIANTS[:shift]:
                    times[load.name][variant].append(load.time(variant))
        medians = {n: {v: statistics.median(t) for v, t in by.items()} for n, by in times.items()}
        floors = {n: {v: min(t) for v, t in by.items()} for n, by in times.items()}
        starts = startup(work)
        lookups = {load.name: load.warm_lookup(work, args.rounds) for load in loads}

    print(f"# wall time in s, median of {args.rounds} interleaved rounds, jobs={args.jobs},"
          f" {os.cpu_count()} CPUs; load average at the end: {os.getloadavg()[0]:.2f}")  # fmt: skip
    print(f"{'workload':10}" + "".join(f"{v:>12}" for v in VARIANTS))
    for name in names:
        print(f"{name:10}" + "".join(f"{medians[name][v]:12.2f}" for v in VARIANTS))
    total = {v: sum(medians[n][v] for n in names) for v in VARIANTS}
    for name in names:
        m = medians[name]
        print(f"{name}: threads/inprocess: {m['threads'] / m['inprocess']:.3f}"
              f"  distribute-cold/inprocess: {m['ours-cold'] / m['inprocess']:.3f}"
              f"  distribute-cold/threads: {m['ours-cold'] / m['threads']:.3f}"
              f"  cold/warm: {m['ours-cold'] / m['ours-warm']:.1f}")  # fmt: skip
    floor = {v: sum(floors[n][v] for n in names) for v in VARIANTS}
    print(f"floor (fastest round of each, less disturbed by other load):"
          f" distribute-cold/inprocess: {floor['ours-cold'] / floor['inprocess']:.3f}"
          f"  threads/inprocess: {floor['threads'] / floor['inprocess']:.3f}"
          f"  distribute-cold/serial: {floor['ours-cold'] / floor['serial']:.3f}")  # fmt: skip
    print("start-up (empty job file), median ms: "
          + ", ".join(f"{name} {ms:.0f}" for name, ms in starts.items()))  # fmt: skip
    print(f"distribute-j1/serial: {total['ours-j1'] / total['serial']:.3f}")
    print(f"distribute-cold/threads: {total['ours-cold'] / total['threads']:.3f}")
    print(f"distribute-cold/distribute-forked: {total['ours-cold'] / total['ours-forked']:.3f}")
    print(f"distribute-cold/distribute-nofork: {total['ours-cold'] / total['ours-nofork']:.3f}")
    print(f"distribute-cold/distribute-warm: {total['ours-cold'] / total['ours-warm']:.1f}")
    for name, (cpu, jobs) in lookups.items():
        print(f"{name}: warm link's distributor CPU above its start-up: {cpu * 1e3:.0f} ms"
              f" for {jobs} cached jobs, {cpu * 1e3 / jobs:.2f} ms per job")  # fmt: skip
    print(f"distribute-cold/serial: {total['ours-cold'] / total['serial']:.3f}")
    print(f"distribute-cold/inprocess: {total['ours-cold'] / total['inprocess']:.3f}")
    lookup_ms = sum(cpu for cpu, _ in lookups.values()) * 1e3
    print(f"warm-lookup-ms-per-job: {lookup_ms / sum(j for _, j in lookups.values()):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
