#!/usr/bin/env python3
"""Remote execution of a link's backends on BuildBarn next to running them here.

One workload (Lua by default), one LLD 22 DTLTO link, timed wall clock (index step and
final link included) as

    local          dist-lto distribute --jobs=<jobs> --no-cache (the backends here)
    remote-1w      --remote, an engine with one worker, a new instance (cold action cache)
    remote-2w      --remote, the same engine with a second worker, a new instance
    remote-warm    --remote, a new local cache, the instance of a remote-2w link: every
                   backend comes from the engine's action cache (a second machine's link)
    cache-cold     --remote-cache, a new instance: the backends here, results uploaded
    cache-warm     --remote-cache, a new local cache, the instance of a cache-cold link:
                   every backend comes from the service (a second clone's link)

all in one run, round by round, on one loopback engine started here (the workers run on
this machine, so remote-2w competes with nothing but the engine itself for the 2 cores).
Each worker runs one action at a time. Medians per variant, then ratios to `local`.
Every binary passes the workload's functional check once.

Usage: .venv/bin/python bench/remote.py [--workload lua|zstd] [--rounds 3] [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support import buildbarn, workloads

DIST_LTO = str(Path(sys.executable).parent / "dist-lto")


def link(build: workloads.Build, args: list[str]) -> float:
    """One DTLTO link of `build` with `dist-lto distribute ARGS`; its wall time."""
    out = build.root / build.name
    out.unlink(missing_ok=True)
    started = time.monotonic()
    proc = subprocess.run(
        [workloads.CLANG, "-flto=thin", "-fuse-ld=lld", "-O2", *build.objects, *build.native,
         "-o", build.name, *build.link_flags, f"-fthinlto-distributor={DIST_LTO}",
         "-Xthinlto-distributor=distribute", *(f"-Xthinlto-distributor={a}" for a in args)],
        cwd=build.root, capture_output=True, text=True,
    )  # fmt: skip
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"link failed ({' '.join(args)}):\n{proc.stderr}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=["lua", "zstd"], default="lua")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    built = buildbarn.build()
    if built:
        print(f"built BuildBarn in {built:.0f} s")
    with tempfile.TemporaryDirectory(prefix="bench-remote-") as tmp:
        work = Path(tmp)
        build = workloads.build(args.workload, work / "b")
        engine = buildbarn.start(work / "engine", workers=1)
        times: dict[str, list[float]] = {}
        try:
            remote = [f"--remote={engine.address}", "--jobs=16"]
            checked = set()

            def timed(name: str, extra: list[str]) -> None:
                times.setdefault(name, []).append(link(build, extra))
                if name not in checked:
                    workloads.check_binary(args.workload, build.root / build.name)
                    checked.add(name)

            warm_instances = []
            for phase in ("1w", "2w"):
                if phase == "2w":
                    engine.start_worker("w2")
                for r in range(args.rounds):
                    timed("local", [f"--jobs={args.jobs}", "--no-cache"])
                    instance = f"bench-{uuid.uuid4().hex[:8]}"
                    timed(f"remote-{phase}", [*remote, f"--instance={instance}", "--no-cache"])
                    if phase == "2w":
                        cache = work / f"cache-{r}"
                        timed("remote-warm", [*remote, f"--instance={instance}",
                                              f"--cache-dir={cache}"])  # fmt: skip
                        warm_instances.append(instance)
                    if phase == "1w":
                        shared = [f"--remote-cache={engine.address}",
                                  f"--instance=bench-{uuid.uuid4().hex[:8]}"]  # fmt: skip
                        timed("cache-cold", [*shared, f"--jobs={args.jobs}", "--no-cache"])
                        timed("cache-warm", [*shared, f"--jobs={args.jobs}",
                                             f"--cache-dir={work / f'cc-{r}'}"])  # fmt: skip
        finally:
            engine.stop()
    local = statistics.median(times["local"])
    print(f"workload {args.workload}, {args.rounds} rounds per variant, local --jobs={args.jobs}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:<12} {median:7.2f} s   ({', '.join(f'{v:.2f}' for v in values)})")
    for name in ("remote-1w", "remote-2w", "remote-warm", "cache-cold", "cache-warm"):
        print(f"{name}/local: {statistics.median(times[name]) / local:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
