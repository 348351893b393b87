#!/usr/bin/env python3
"""A git-sized warm link: git's DTLTO link through `dist-lto distribute`, cold and warm.

git (396 translation units, `git_build.py`, compiled once into `.cache/workloads/`) is
linked with LLD 22's DTLTO and our distributor, as a user links it:

    cold   a new empty cache every round: every backend compiles (and is stored)
    warm   the cache of the first cold round: every job is a cache hit

Each round's wall time; the medians' ratio is `git: cold/warm`. Then what a cached job
costs, measured as bench/distribute.py measures it: the warm link again, its
distributor started through a wrapper that reads its CPU time (user and system of the
distributor and its children), less the CPU of the same distributor on a job file
without jobs, per job. The first warm round's binary passes git's functional check.
Last lines: `git: cold/warm <ratio>` and `warm-lookup-ms-per-job: <ms>`.

Not run by the test suite: a cold round takes minutes on two CPUs.

Usage: .venv/bin/python bench/git_link.py [--cold-rounds 1] [--rounds 5] [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import git_build
from distribute import CPU_WRAPPER, DIST_LTO, empty_job_file, script

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support import workloads


class GitLink:
    """git's objects in `work/git`, linked through our distributor."""

    def __init__(self, work: Path, jobs: int) -> None:
        self.work = work
        self.build = git_build.build(work / "git")
        self.root = self.build.root
        self.base = [workloads.CLANG, "-flto=thin", "-fuse-ld=lld", "-O2", *self.build.main,
                     *self.build.link_flags]  # fmt: skip
        self.jobs = jobs
        self.caches = work / "caches"
        self.warm_cache = self.caches / "warm"
        self.colds = 0

    def command(self, output: str, cache: Path, distributor: str = DIST_LTO) -> list[str]:
        return [*self.base, "-o", output, f"-fthinlto-distributor={distributor}",
                "-Xthinlto-distributor=distribute", f"-Xthinlto-distributor=--cache-dir={cache}",
                f"-Xthinlto-distributor=--jobs={self.jobs}"]  # fmt: skip

    def link(self, output: str, cache: Path, env: dict[str, str] | None = None,
             distributor: str = DIST_LTO) -> tuple[float, str]:  # fmt: skip
        """Wall seconds of one link, and the distributor's summary line."""
        start = time.perf_counter()
        done = subprocess.run(self.command(output, cache, distributor), cwd=self.root,
                              env=env, capture_output=True, text=True)  # fmt: skip
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"git link ({output}) failed:\n{done.stderr}")
        return elapsed, done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""

    def cold(self) -> float:
        """One link with a new empty cache (the first one fills the warm cache)."""
        self.colds += 1
        cache = self.warm_cache if self.colds == 1 else self.caches / f"cold{self.colds}"
        elapsed, summary = self.link("cold", cache)
        if "0 cached" not in summary:
            raise SystemExit(f"git: a cold link found cached jobs: {summary}")
        return elapsed

    def warm(self) -> float:
        elapsed, summary = self.link("warm", self.warm_cache)
        if not _all_cached(summary):
            raise SystemExit(f"git: a warm link compiled: {summary}")
        return elapsed

    def warm_lookup(self, runs: int) -> tuple[float, int]:
        """Median CPU seconds of the warm link's distributor above its start-up, and its
        jobs (see bench/distribute.py's `Workload.warm_lookup`)."""
        wrapper = script(self.work / "cpu-distributor.py", CPU_WRAPPER.format(dist_lto=DIST_LTO))
        record = self.work / "git-cpu"
        env = {**os.environ, "DIST_LTO_BENCH_CPU": str(record)}
        empty = empty_job_file(self.work)
        for _ in range(runs):
            _, summary = self.link("warm", self.warm_cache, env, wrapper)
            if not _all_cached(summary):
                raise SystemExit(f"git: a warm link compiled: {summary}")
            subprocess.run([wrapper, "distribute", f"--cache-dir={self.warm_cache}", str(empty)],
                           env=env, check=True, capture_output=True)  # fmt: skip
        lines = [line.split() for line in record.read_text().splitlines()]
        links = [float(cpu) for cpu, jobs in lines if int(jobs)]
        starts = [float(cpu) for cpu, jobs in lines if not int(jobs)]
        (jobs,) = {int(n) for _, n in lines if int(n)}
        return statistics.median(links) - statistics.median(starts), jobs


def _all_cached(summary: str) -> bool:
    """Whether the summary line (`N jobs, N cached, ...`) says every job was a hit."""
    words = summary.replace(",", "").split()
    try:
        return words[words.index("jobs") - 1] == words[words.index("cached") - 1]
    except (ValueError, IndexError):
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cold-rounds", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5, help="warm rounds")
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-git-link-") as tmp:
        link = GitLink(Path(tmp), args.jobs)
        colds = [link.cold() for _ in range(args.cold_rounds)]
        warms = []
        for i in range(args.rounds):
            warms.append(link.warm())
            if i == 0:
                git_build.check_binary(link.root / "warm", link.work)
        cpu, jobs = link.warm_lookup(args.rounds)
    cold, warm = statistics.median(colds), statistics.median(warms)
    print(f"# git {jobs} jobs, jobs={args.jobs}, {os.cpu_count()} CPUs; load average at the"
          f" end: {os.getloadavg()[0]:.2f}")  # fmt: skip
    print(f"git: cold {cold:.2f} s, median of {', '.join(f'{t:.2f}' for t in colds)}")
    print(f"git: warm {warm:.3f} s, median of {', '.join(f'{t:.3f}' for t in warms)}")
    print(f"git: warm link's distributor CPU above its start-up: {cpu * 1e3:.0f} ms"
          f" for {jobs} cached jobs")  # fmt: skip
    print(f"git: cold/warm {cold / warm:.1f}")
    print(f"warm-lookup-ms-per-job: {cpu * 1e3 / jobs:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
