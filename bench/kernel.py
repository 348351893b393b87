#!/usr/bin/env python3
"""The Linux kernel's ThinLTO link, in-process and through our distributor (LLD's DTLTO).

Builds Debian's `linux-source-6.1` (`apt-get install linux-source-6.1 flex bison
libelf-dev`: the tarball in /usr/src, and what the kernel's build runs) for x86-64
with `tinyconfig` and `CONFIG_LTO_CLANG_THIN`, with clang/LLD 22 (`LLVM=-22`), once
with LLD's in-process ThinLTO. A copy of that build tree then links
again through `dist-lto distribute` (docs/kernel.md): the kernel's LTO link is `ld.lld -r`
over thin archives (`vmlinux.o`), and its link flags, `KBUILD_LDFLAGS`, are built with
`+=`, which a make variable on the command line replaces whole; so the distributor's
flags are given with the flags the in-process build's own link used, read from its
saved command (`.vmlinux.o.cmd`).

Then both trees link `vmlinux` again from the same objects, interleaved round by round,
after removing `vmlinux.o` (the LTO link, objtool, modpost, the kallsyms links that
follow it): wall clock, our distributor without its cache (a cold link). The two
`vmlinux.o` are compared function by function (code and relocations, layout aside:
tests/support/objcode.py). Last lines:
`kernel/dtlto-functions-identical: N/M` and `kernel/dtlto/inprocess: <ratio>`.

Takes minutes (the kernel compiles once); not run by the test suite.

Usage: .venv/bin/python bench/kernel.py [--work DIR] [--rounds 3] [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support import objcode

SOURCE_TARBALL = Path("/usr/src/linux-source-6.1.tar.xz")
LLVM_BIN = Path(os.environ.get("DIST_LTO_LLVM_BIN", "/usr/lib/llvm-22/bin"))
DIST_LTO = str(Path(sys.executable).parent / "dist-lto")
MAKE = ["make", "LLVM=-22", "ARCH=x86_64"]
DISTRIBUTOR = [
    f"--thinlto-distributor={DIST_LTO}",
    "--thinlto-distributor-arg=distribute",
    "--thinlto-distributor-arg=--no-cache",
    f"--thinlto-remote-compiler={LLVM_BIN / 'clang'}",
]
"""What the DTLTO link adds to the kernel's link flags: our distributor, without its
cache (every link cold), and the backends' compiler."""


def run(command: list[str], cwd: Path, log: Path | None = None) -> float:
    """Run `command` in `cwd` (output to `log`); its wall seconds. A failure ends the bench."""
    start = time.perf_counter()
    with open(log or os.devnull, "ab") as out:
        done = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"{shlex.join(command)} failed in {cwd} (see {log})")
    return time.perf_counter() - start


def source(work: Path) -> Path:
    """Debian's kernel source, unpacked into `work` once."""
    tree = work / "linux-source-6.1"
    if not (tree / "Makefile").exists():
        if not SOURCE_TARBALL.exists():
            raise SystemExit(f"{SOURCE_TARBALL} missing: apt-get install linux-source-6.1")
        subprocess.run(["tar", "xf", str(SOURCE_TARBALL)], cwd=work, check=True)
    return tree


def configure(src: Path, build: Path, log: Path) -> None:
    """tinyconfig for x86-64 with ThinLTO: the kernel's own LTO link, as small as it gets."""
    run([*MAKE, f"O={build}", "tinyconfig"], src, log)
    config = [str(src / "scripts/config"), "--file", str(build / ".config")]
    run([*config, "--disable", "LTO_NONE", "--enable", "LTO_CLANG_THIN"], build, log)
    run([*MAKE, "olddefconfig"], build, log)
    text = (build / ".config").read_text()
    if "CONFIG_LTO_CLANG_THIN=y" not in text:
        raise SystemExit(f"{build}/.config: CONFIG_LTO_CLANG_THIN did not stay on")


def kernel_ldflags(build: Path) -> list[str]:
    """The in-process link's `KBUILD_LDFLAGS`: what its saved `vmlinux.o` command has
    between the linker and `-r`."""
    saved = (build / ".vmlinux.o.cmd").read_text().split(":=", 1)[1]
    words = shlex.split(saved.split(";")[0])
    return words[1 : words.index("-r")]


def relink(build: Path, variables: list[str], jobs: int, log: Path) -> float:
    """`make vmlinux` after removing `vmlinux.o`: the LTO link and everything after it."""
    (build / "vmlinux.o").unlink(missing_ok=True)
    return run([*MAKE, *variables, f"-j{jobs}", "vmlinux"], build, log)


def compare(ours: Path, reference: Path) -> tuple[int, int]:
    """(functions of `ours` identical to the reference's, functions of the reference)."""
    mine, theirs = objcode.numbered(ours), objcode.numbered(reference)
    return sum(mine.get(key) == function for key, function in theirs.items()), len(theirs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/dist-lto-bench-kernel"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    log = work / "build.log"
    src = source(work)
    inprocess, dtlto = work / "inprocess", work / "dtlto"
    if not (inprocess / "vmlinux").exists():
        configure(src, inprocess, log)
        compile_s = run([*MAKE, f"-j{args.jobs}", "vmlinux"], inprocess, log)
        print(f"kernel/compile-and-link-inprocess-s: {compile_s:.1f}")
    run([*MAKE, f"-j{args.jobs}", "vmlinux"], inprocess, log)  # up to date (a moved tree
    # rebuilds objtool, whose build names absolute paths), so the rounds time links only
    flags = kernel_ldflags(inprocess)
    variables = {"inprocess": [], "dtlto": [f"KBUILD_LDFLAGS={shlex.join([*flags, *DISTRIBUTOR])}"]}
    print(f"make variable: {shlex.join(variables['dtlto'])}")
    shutil.rmtree(dtlto, ignore_errors=True)
    subprocess.run(["cp", "-a", str(inprocess), str(dtlto)], check=True)
    run([*MAKE, *variables["dtlto"], f"-j{args.jobs}", "vmlinux"], dtlto, log)  # relinks
    trees = {"inprocess": inprocess, "dtlto": dtlto}
    times: dict[str, list[float]] = {name: [] for name in trees}
    for round_ in range(args.rounds):
        order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for name in order:
            times[name].append(relink(trees[name], variables[name], args.jobs, log))
    medians = {name: statistics.median(t) for name, t in times.items()}
    identical, total = compare(dtlto / "vmlinux.o", inprocess / "vmlinux.o")
    print(f"# wall s to link vmlinux again (vmlinux.o and after), median of {args.rounds}"
          f" interleaved rounds, -j{args.jobs}; load average at the end:"
          f" {os.getloadavg()[0]:.2f}")  # fmt: skip
    for name, seconds in medians.items():
        print(f"kernel/{name}-relink-s: {seconds:.1f}  (rounds: "
              + ", ".join(f"{t:.1f}" for t in times[name]) + ")")  # fmt: skip
    print(f"kernel/dtlto-functions-identical: {identical}/{total}")
    print(f"kernel/dtlto/inprocess: {medians['dtlto'] / medians['inprocess']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
