"""What a link's backends cost in CPU, run three ways, side by side in one run.

    in-process  LLD's own ThinLTO link (`--thinlto-jobs=1`: one backend at a time; its
                index step and final link included)
    forked      every backend of that link's index step in a clang forked from one that
                started once (process/forkserver.py: `dist-lto distribute`, and the opt
                worker without a compile server)
    served      the same backends one after another in one compile server
                (process/cc1server.py: the opt worker's way)

CPU is user + system time of every process each way ran, from the kernel's accounting
of reaped children. The ways rotate their order round by round; the objects the
compile server writes must equal the forked clang's, byte for byte, or the run fails.
Prints per workload `backend-cpu/WORKLOAD: served/in-process X, forked/in-process Y`
(medians) and `backend-cpu-served/in-process: Z` over the workloads together.

Usage: .venv/bin/python bench/backend_cpu.py [--workloads lua,zstd] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from dist_lto.distribute.compilers import WorkerCompiler
from dist_lto.distribute.result_cache import default_cache_dir
from dist_lto.process import cc1server, forkserver
from support import workloads

CLANG = workloads.CLANG
WAYS = ("in-process", "forked", "served")


def children_cpu() -> tuple[float, float]:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime, used.ru_stime


def measure(way: Callable[[], None]) -> tuple[float, float]:
    """(user + system, system) seconds of `way`'s reaped processes."""
    user0, sys0 = children_cpu()
    way()
    user1, sys1 = children_cpu()
    return user1 - user0 + sys1 - sys0, sys1 - sys0


def backend(obj: str, out: str) -> list[str]:
    return [CLANG, "-O2", "-x", "ir", obj, f"-fthinlto-index={obj}.thinlto.bc", "-c", "-o", out]


def workload(name: str, rounds: int, tools_dir: str, server: str) -> dict[str, list[float]]:
    preload = forkserver.library(CLANG, tools_dir)
    with tempfile.TemporaryDirectory() as tmp:
        built = workloads.build(name, Path(tmp))
        os.chdir(built.root)
        link = [CLANG, "-flto=thin", "-fuse-ld=lld", "-O2", *built.objects, *built.native,
                *built.link_flags]  # fmt: skip
        subprocess.run([*link, "-Wl,--thinlto-index-only", "-o", "indexed"], check=True)

        def in_process() -> None:
            subprocess.run([*link, "-Wl,--thinlto-jobs=1", "-o", "linked"], check=True)

        def through(program: str | None, suffix: str) -> Callable[[], None]:
            def run() -> None:
                compiler = WorkerCompiler(CLANG, preload, print, None, program, print)
                try:
                    for obj in built.objects:
                        status, stderr = compiler.run(backend(obj, obj + suffix), None)
                        if status != 0 or stderr:
                            raise SystemExit(f"{obj}: {status}: {stderr.decode()}")
                finally:
                    compiler.close()

            return run

        ways = {"in-process": in_process, "forked": through(None, ".forked.o"),
                "served": through(server, ".served.o")}  # fmt: skip
        cpu: dict[str, list[float]] = {way: [] for way in WAYS}
        for i in range(rounds):
            order = WAYS[i % len(WAYS) :] + WAYS[: i % len(WAYS)]
            for way in order:
                total, system = measure(ways[way])
                cpu[way].append(total)
                print(f"# {name} round {i + 1} {way}: cpu {total:.2f} s (system {system:.2f})",
                      flush=True)  # fmt: skip
        for obj in built.objects:
            if Path(obj + ".served.o").read_bytes() != Path(obj + ".forked.o").read_bytes():
                raise SystemExit(f"{name}: {obj}: the compile server's object differs")
        os.chdir("/")
        return cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="lua,zstd")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tools = cc1server.toolchain(CLANG)
    if isinstance(tools, str):
        raise SystemExit(f"no compile server: {tools}")
    tools_dir = default_cache_dir()
    server = cc1server.server_program(tools, tools_dir)
    totals = {way: 0.0 for way in WAYS}
    lines = []
    for name in args.workloads.split(","):
        cpu = workload(name, args.rounds, tools_dir, server)
        median = {way: statistics.median(cpu[way]) for way in WAYS}
        for way in WAYS:
            totals[way] += median[way]
        lines.append(f"backend-cpu/{name}: served/in-process "
                     f"{median['served'] / median['in-process']:.3f}, forked/in-process "
                     f"{median['forked'] / median['in-process']:.3f}")  # fmt: skip
    print(f"# load average at the end: {os.getloadavg()[0]:.2f}")
    print("\n".join(lines))
    print(f"backend-cpu-served/in-process: {totals['served'] / totals['in-process']:.3f}")
    print(f"backend-cpu-forked/in-process: {totals['forked'] / totals['in-process']:.3f}")


if __name__ == "__main__":
    main()
