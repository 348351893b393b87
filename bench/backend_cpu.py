"""What a link's backends cost in CPU, run three ways, side by side in one run.

    in-process  LLD's own ThinLTO link (`--thinlto-jobs=1`: one backend at a time; its
                index step and final link included)
    forked      every backend of that link's index step in a clang forked from one that
                started once (process/forkserver.py: `dist-lto distribute`, and the opt
                worker without a compile server)
    served      the same backends one after another in one compile server
                (process/cc1server.py: the opt worker's way)

With `--at-once N,M...`, also N (and M...) at a time:

    in-process-N  LLD's link with `--thinlto-jobs=N`
    served-N      N compile servers, each taking the largest backend left

CPU is user + system time of every process each way ran, from the kernel's accounting
of reaped children. The ways rotate their order round by round; the objects the
compile server writes must equal the forked clang's, byte for byte, or the run fails.
Prints per workload `backend-cpu/WORKLOAD: served/in-process X, forked/in-process Y`
(medians) and `backend-cpu-served/in-process: Z` over the workloads together; with
`--at-once`, per workload and N `backend-cpu-at-once/WORKLOAD/N: served-N/in-process-N
X, served-N/served-FIRST Y` (FIRST: the first N given; not for FIRST itself) and the
median wall seconds of each.

Usage: .venv/bin/python bench/backend_cpu.py [--workloads lua,zstd] [--rounds 3]
                                             [--at-once 2,3]
"""

from __future__ import annotations

import argparse
import os
import queue
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
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


def at_once(objects: list[str], n: int, compile_one: Callable[[WorkerCompiler, str], None],
            start: Callable[[], WorkerCompiler]) -> None:  # fmt: skip
    """Every backend, `n` at a time, each thread taking the largest module left (as
    in-process LLD orders its backends)."""
    left: queue.Queue[str] = queue.Queue()
    for obj in sorted(objects, key=lambda o: -os.path.getsize(o)):
        left.put(obj)

    def thread() -> None:
        compiler = start()
        try:
            while True:
                try:
                    obj = left.get_nowait()
                except queue.Empty:
                    return
                compile_one(compiler, obj)
        finally:
            compiler.close()

    threads = [threading.Thread(target=thread) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def workload(
    name: str, rounds: int, tools_dir: str, server: str, counts: list[int]
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """(CPU seconds, wall seconds) of each way, round by round."""
    preload = forkserver.library(CLANG, tools_dir)
    with tempfile.TemporaryDirectory() as tmp:
        built = workloads.build(name, Path(tmp))
        os.chdir(built.root)
        link = [CLANG, "-flto=thin", "-fuse-ld=lld", "-O2", *built.objects, *built.native,
                *built.link_flags]  # fmt: skip
        subprocess.run([*link, "-Wl,--thinlto-index-only", "-o", "indexed"], check=True)

        def in_process() -> None:
            subprocess.run([*link, "-Wl,--thinlto-jobs=1", "-o", "linked"], check=True)

        def compile_one(compiler: WorkerCompiler, obj: str, suffix: str) -> None:
            status, stderr = compiler.run(backend(obj, obj + suffix), None)
            if status != 0 or stderr:
                raise SystemExit(f"{obj}: {status}: {stderr.decode()}")

        def through(program: str | None, suffix: str) -> Callable[[], None]:
            def run() -> None:
                compiler = WorkerCompiler(CLANG, preload, print, None, program, print)
                try:
                    for obj in built.objects:
                        compile_one(compiler, obj, suffix)
                finally:
                    compiler.close()

            return run

        def in_process_at_once(n: int) -> Callable[[], None]:
            return lambda: subprocess.run([*link, f"-Wl,--thinlto-jobs={n}", "-o", "linked"],
                                          check=True)  # fmt: skip

        def served_at_once(n: int) -> Callable[[], None]:
            return lambda: at_once(
                built.objects, n, lambda c, obj: compile_one(c, obj, f".served{n}.o"),
                lambda: WorkerCompiler(CLANG, preload, print, None, server, print))  # fmt: skip

        ways = {"in-process": in_process, "forked": through(None, ".forked.o"),
                "served": through(server, ".served.o")}  # fmt: skip
        for n in counts:
            ways[f"in-process-{n}"] = in_process_at_once(n)
            ways[f"served-{n}"] = served_at_once(n)
        names = list(ways)
        cpu: dict[str, list[float]] = {way: [] for way in names}
        wall: dict[str, list[float]] = {way: [] for way in names}
        for i in range(rounds):
            order = names[i % len(names) :] + names[: i % len(names)]
            for way in order:
                began = time.monotonic()
                total, system = measure(ways[way])
                cpu[way].append(total)
                wall[way].append(time.monotonic() - began)
                print(f"# {name} round {i + 1} {way}: cpu {total:.2f} s (system {system:.2f}),"
                      f" wall {wall[way][-1]:.2f} s", flush=True)  # fmt: skip
        for obj in built.objects:
            forked = Path(obj + ".forked.o").read_bytes()
            for suffix in [".served.o"] + [f".served{n}.o" for n in counts]:
                if Path(obj + suffix).read_bytes() != forked:
                    raise SystemExit(f"{name}: {obj}: the compile server's object differs")
        os.chdir("/")
        return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="lua,zstd")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--at-once", default="", help="also N (and M...) at a time: N,M...")
    args = parser.parse_args()
    counts = [int(n) for n in args.at_once.split(",") if n]
    tools = cc1server.toolchain(CLANG)
    if isinstance(tools, str):
        raise SystemExit(f"no compile server: {tools}")
    tools_dir = default_cache_dir()
    server = cc1server.server_program(tools, tools_dir)
    totals = {way: 0.0 for way in WAYS}
    lines = []
    for name in args.workloads.split(","):
        cpu, wall = workload(name, args.rounds, tools_dir, server, counts)
        median = {way: statistics.median(cpu[way]) for way in cpu}
        walls = {way: statistics.median(wall[way]) for way in wall}
        for way in WAYS:
            totals[way] += median[way]
        lines.append(f"backend-cpu/{name}: served/in-process "
                     f"{median['served'] / median['in-process']:.3f}, forked/in-process "
                     f"{median['forked'] / median['in-process']:.3f}")  # fmt: skip
        for n in counts:
            first = counts[0]
            against_first = "" if n == first else (
                f", served-{n}/served-{first} "
                f"{median[f'served-{n}'] / median[f'served-{first}']:.3f}")  # fmt: skip
            lines.append(f"backend-cpu-at-once/{name}/{n}: served-{n}/in-process-{n} "
                         f"{median[f'served-{n}'] / median[f'in-process-{n}']:.3f}"
                         f"{against_first}; wall s in-process-{n} "
                         f"{walls[f'in-process-{n}']:.2f}, served-{n} "
                         f"{walls[f'served-{n}']:.2f}")  # fmt: skip
    print(f"# load average at the end: {os.getloadavg()[0]:.2f}")
    print("\n".join(lines))
    print(f"backend-cpu-served/in-process: {totals['served'] / totals['in-process']:.3f}")
    print(f"backend-cpu-forked/in-process: {totals['forked'] / totals['in-process']:.3f}")


if __name__ == "__main__":
    main()
