"""What `dist-lto opt` adds to a ThinLTO backend compile, measured side by side.

For a small and a large Lua translation unit, runs the bare clang backend command
(exactly what `opt --print-command` prints) and `dist-lto opt` started the
documented way (`python3 -S -E .../dist_lto/__main__.py opt`), interleaved, and
prints the median of the paired differences. Also shows the parts: the
interpreter's own start-up, the least any Python wrapper adds (a five-line script that
spawns the same command and waits for it, started the same way), the primary-module
check, the flag translation, and what a worker without compiled bytecode pays.

    .venv/bin/python bench/opt_overhead.py [--runs 40] [--python /usr/bin/python3]

The same requests also go to the opt worker (`dist-lto opt-worker`, started once, sent
each module's arguments over its gRPC socket as Buck2 sends them), timed from the
client's side against the bare clang command, interleaved the same way.

Last lines: `opt-over-minimal-wrapper-ms: <what opt adds over that script on the small
TU>`, `opt-overhead-ms: <median added ms on the small TU>` and `opt-worker-overhead-ms:
<median ms a request through the worker adds over the bare clang command, small TU>`.
"""

from __future__ import annotations

import argparse
import compileall
import os
import py_compile
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support import workloads

REPO = Path(__file__).resolve().parent.parent
LINK_FLAGS = ["-flto=thin", "-fuse-ld=lld", "-Wl,--gc-sections", "-lm"]


MINIMAL_WRAPPER = """\
import os, sys
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ)
os._exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""
"""The least a Python wrapper around the backend can cost: no checks, no imports."""


def wall(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def paired(a: list[str], b: list[str], cwd: Path, runs: int) -> tuple[float, float, float, float]:
    """Medians of a, of b and of (b - a) in ms, alternating which one runs first, and
    min(b) - min(a): a floor that the other jobs on a shared machine disturb less."""
    first: list[float] = []
    second: list[float] = []
    for i in range(runs):
        if i % 2:
            tb, ta = wall(b, cwd), wall(a, cwd)
        else:
            ta, tb = wall(a, cwd), wall(b, cwd)
        first.append(ta)
        second.append(tb)
    diffs = [y - x for x, y in zip(first, second, strict=True)]
    return (
        statistics.median(first) * 1e3,
        statistics.median(second) * 1e3,
        statistics.median(diffs) * 1e3,
        (min(second) - min(first)) * 1e3,
    )


def paired_worker(
    bare: list[str], request: list[str], cwd: Path, socket: Path, runs: int
) -> tuple[float, float, float, float]:
    """`paired` for the bare command against the same module's request to a worker (one
    warm-up request first: the worker's first request starts its fork server)."""
    from dist_lto.worker.client import WorkerClient

    client = WorkerClient(str(socket), str(cwd))
    try:

        def through_worker() -> float:
            start = time.perf_counter()
            reply = client.execute(request)
            elapsed = time.perf_counter() - start
            if reply.exit_code != 0:
                raise RuntimeError(f"worker request failed: {reply.stderr}")
            return elapsed

        through_worker()
        first: list[float] = []
        second: list[float] = []
        for i in range(runs):
            if i % 2:
                tw, tb = through_worker(), wall(bare, cwd)
            else:
                tb, tw = wall(bare, cwd), through_worker()
            first.append(tb)
            second.append(tw)
    finally:
        client.close()
    diffs = [y - x for x, y in zip(first, second, strict=True)]
    return (
        statistics.median(first) * 1e3,
        statistics.median(second) * 1e3,
        statistics.median(diffs) * 1e3,
        (min(second) - min(first)) * 1e3,
    )


def in_process_us(fn: object, runs: int = 200) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40, help="paired runs per TU (default 40)")
    parser.add_argument(
        "--python",
        default=os.path.realpath(sys.executable),
        help="the interpreter that starts opt (default: this one, resolved)",
    )
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="opt-overhead-"))
    try:
        build = workloads.build("lua", work / "lua")
        root = build.root
        subprocess.run(
            [
                workloads.CLANG,
                *LINK_FLAGS,
                *build.objects,
                "-o",
                "lua",
                "-Wl,--thinlto-index-only",
                "-Wl,--thinlto-emit-imports-files",
            ],
            cwd=root,
            check=True,
            capture_output=True,
        )
        (root / "link.args").write_text("".join(f"{f}\n" for f in LINK_FLAGS))
        # The tool as a worker should get it: a copy with compiled bytecode beside it, and
        # one without (a fresh worker when bytecode is not shipped).
        warm = work / "warm" / "dist_lto"
        cold = work / "cold" / "dist_lto"
        for dest in (warm, cold):
            shutil.copytree(
                REPO / "tools" / "dist_lto", dest, ignore=shutil.ignore_patterns("__pycache__")
            )
        compileall.compile_dir(
            str(warm),
            quiet=1,
            legacy=False,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
        by_size = sorted(build.objects, key=lambda o: (root / o).stat().st_size)
        units = {"small": by_size[0], "large": by_size[-1]}

        print(f"interpreter: {args.python}   runs per measurement: {args.runs}")
        startup = paired(["true"], [args.python, "-S", "-E", "-c", "pass"], root, args.runs)
        print(
            f"python3 -S -E -c pass: {startup[2]:.1f} ms over /bin/true "
            f"(interpreter start-up alone; floor {startup[3]:.1f} ms)"
        )

        small_overhead = small_over_minimal = worker_overhead = 0.0
        for label, module in units.items():
            opt = [
                args.python,
                "-S",
                "-E",
                str(warm / "__main__.py"),
                "opt",
                "--input",
                module,
                "--index",
                f"{module}.thinlto.bc",
                "--out",
                str(work / f"{label}.opt.o"),
                "--args",
                "link.args",
                "--",
                workloads.CLANG,
            ]
            printed = subprocess.run(
                [*opt[:-2], "--print-command", *opt[-2:]],
                cwd=root,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            bare = shlex.split(printed)
            bare[bare.index("-o") + 1] = str(work / f"{label}.bare.o")
            runs = args.runs if label == "small" else max(args.runs // 3, 5)
            t_bare, t_opt, added, floor = paired(bare, opt, root, runs)
            print(
                f"{label} TU {module} ({(root / module).stat().st_size // 1024} KiB bitcode): "
                f"clang {t_bare:.1f} ms, dist-lto opt {t_opt:.1f} ms, "
                f"added {added:.1f} ms (ratio {t_opt / t_bare:.3f}; floor {floor:.1f} ms)"
            )
            if label == "small":
                small_overhead = added
                minimal = work / "minimal_wrapper.py"
                minimal.write_text(MINIMAL_WRAPPER)
                wrapped = [args.python, "-S", "-E", str(minimal), *bare]
                _, _, over_minimal, over_minimal_floor = paired(wrapped, opt, root, runs)
                _, _, minimal_added, _ = paired(bare, wrapped, root, runs)
                print(
                    f"  a minimal Python wrapper adds {minimal_added:.1f} ms; "
                    f"opt adds {over_minimal:.1f} ms over it (floor {over_minimal_floor:.1f} ms)"
                )
                small_over_minimal = over_minimal
                t_bare_w, t_worker, worker_overhead, worker_floor = paired_worker(
                    bare, opt[5:], root, work / "worker.sock", runs
                )
                print(
                    f"  through the opt worker: clang {t_bare_w:.1f} ms, worker request"
                    f" {t_worker:.1f} ms, added {worker_overhead:.1f} ms (floor"
                    f" {worker_floor:.1f} ms)"
                )
                cold_opt = [args.python, "-S", "-E", "-B", str(cold / "__main__.py"), *opt[4:]]
                _, _, cold_added, _ = paired(opt, cold_opt, root, max(args.runs // 2, 5))
                print(
                    f"  without shipped bytecode (every run compiles the modules): "
                    f"{cold_added:+.1f} ms more"
                )

        sys.path.insert(0, str(warm.parent))
        from dist_lto.backend import check_primary
        from dist_lto.llvm.flags import translate

        os.chdir(root)
        for label, module in units.items():
            cost = in_process_us(lambda m=module: check_primary(m, f"{m}.thinlto.bc"))
            size = (root / f"{module}.thinlto.bc").stat().st_size
            print(f"primary-module check, {label} TU ({size} byte index): {cost:.0f} us")
        flags = [*LINK_FLAGS, "-O3", "-march=x86-64-v2", "-Wl,--lto-O3,-mllvm,-foo=1", "-pthread"]
        print(
            f"link-flag translation ({len(flags)} flags): "
            f"{in_process_us(lambda: translate(flags)):.0f} us"
        )
        print(f"opt-over-minimal-wrapper-ms: {small_over_minimal:.1f}")
        print(f"opt-overhead-ms: {small_overhead:.1f}")
        print(f"opt-worker-overhead-ms: {worker_overhead:.1f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
