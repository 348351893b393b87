"""Parity with in-process ThinLTO: which functions our distributed backends generate
exactly as LLD's in-process backend does, and why the others differ.

For each workload, the same link twice: LLD 22's in-process ThinLTO with
`--save-temps=prelink` (the native object of every module: the reference), and the
distributed way, LLD's index step (`--thinlto-index-only`) then `dist-lto opt` per
module and a native link. Every function is compared object against object (bytes and
relocations, symbolised: see objcode.py) and classified:

- identical;
- relaxed: differs only by GOT loads that LLD relaxes into the reference's `lea`, so
  the linked programs hold the same code;
- got: loads from the GOT a symbol that the reference addresses directly. Each such
  symbol is checked against the explanation in docs/parity.md: it is defined in
  another module of the link, and the module's individual index has no summary for
  it; one that is not is listed as unexplained;
- other: any other difference.

Both programs are run. The last lines are `parity/<workload>: N/M`: N of the M
functions are identical in the linked program (identical or relaxed).

    .venv/bin/python bench/parity.py [--workloads lua,zstd,git] [--jobs N]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import git_build
import objcode
import workloads

REPO = Path(__file__).resolve().parent.parent
OPT = [sys.executable, "-S", "-E", str(REPO / "tools" / "dist_lto" / "__main__.py"), "opt"]
LLVM_DIS = os.path.join(workloads.LLVM_BIN, "llvm-dis")
REFERENCE = "inprocess"
GUID = re.compile(r"guid: (\d+)")


@dataclass
class Parity:
    """One workload's comparison; module and function names as in the link."""

    workload: str
    total: int = 0
    identical: int = 0
    relaxed: dict[str, list[str]] = field(default_factory=dict)
    got: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    """module -> function -> symbols it loads from the GOT where in-process does not"""
    other: dict[str, list[str]] = field(default_factory=dict)
    unexplained: list[str] = field(default_factory=list)
    """`module: symbol` GOT loads the documented cause does not account for"""

    @property
    def linked_identical(self) -> int:
        return self.identical + sum(len(f) for f in self.relaxed.values())


def guid(name: str) -> int:
    """LLVM's GUID of an external symbol: the low 64 bits of the MD5 of its name."""
    return int.from_bytes(hashlib.md5(name.encode()).digest()[:8], "little")


def index_guids(index: Path) -> set[int]:
    """Every GUID an individual index describes."""
    text = subprocess.run([LLVM_DIS, str(index), "-o", "-"], check=True, capture_output=True,
                          text=True).stdout  # fmt: skip
    return {int(g) for g in GUID.findall(text)}


def link_flags(build: workloads.Build) -> list[str]:
    """The link's clang-driver flags (no level: LLD's default on both sides)."""
    return ["-flto=thin", "-fuse-ld=lld", *build.link_flags]


def reference_object(build: workloads.Build, module: str) -> Path:
    stem = Path(module).stem
    return build.root / Path(module).parent / f"{REFERENCE}.lto.{stem}.o"


def run(argv: list[str], cwd: Path) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({done.returncode}):\n{done.stderr}")


def link_both(build: workloads.Build, jobs: int) -> dict[str, Path]:
    """The in-process link (reference objects kept) and the distributed one; returns
    each module's distributed object."""
    flags = link_flags(build)
    inputs = [*build.objects, *build.native]
    run([workloads.CLANG, *flags, *inputs, "-o", REFERENCE, "-Wl,--save-temps=prelink"],
        build.root)  # fmt: skip
    run([workloads.CLANG, *flags, *inputs, "-o", "index-only", "-Wl,--thinlto-index-only",
         "-Wl,--thinlto-emit-imports-files"], build.root)  # fmt: skip
    args = build.root / "link.args"
    args.write_text("".join(f"{flag}\n" for flag in flags))

    def one(module: str) -> tuple[str, Path]:
        out = build.root / "opt" / module
        out.parent.mkdir(parents=True, exist_ok=True)
        run([*OPT, "--input", module, "--index", f"{module}.thinlto.bc", "--out", str(out),
             "--args", str(args), "--", workloads.CLANG], build.root)  # fmt: skip
        return module, out

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        ours = dict(pool.map(one, build.objects))
    run([workloads.CLANG, "-fuse-ld=lld", *map(str, ours.values()), *build.native,
         "-o", "distributed", *build.link_flags], build.root)  # fmt: skip
    return ours


def compare(build: workloads.Build, ours: dict[str, Path]) -> Parity:
    result = Parity(build.name)
    references = {m: objcode.read(reference_object(build, m)) for m in build.objects}
    definer = {name: m for m, syms in references.items() for name in syms.defined}
    for module, path in ours.items():
        ref, mine = references[module].functions, objcode.read(path).functions
        result.total += len(ref)
        for name in sorted(set(ref) | set(mine)):
            if name in ref and mine.get(name) == ref[name]:
                result.identical += 1
            elif name not in ref or name not in mine:
                result.other.setdefault(module, []).append(name)
            elif objcode.relaxes_to(mine[name], ref[name]):
                result.relaxed.setdefault(module, []).append(name)
            elif symbols := objcode.got_only_in(mine[name], ref[name]):
                result.got.setdefault(module, {})[name] = sorted(symbols)
            else:
                result.other.setdefault(module, []).append(name)
    for module in sorted(result.got):
        described = index_guids(build.root / f"{module}.thinlto.bc")
        loaded = set().union(*map(set, result.got[module].values()))
        for symbol in sorted(loaded):
            if definer.get(symbol, module) == module or guid(symbol) in described:
                result.unexplained.append(f"{module}: {symbol}")
    return result


def check(build: workloads.Build, work: Path) -> None:
    for exe in (build.root / REFERENCE, build.root / "distributed"):
        if build.name == "git":
            git_build.check_binary(exe, work)
        else:
            workloads.check_binary(build.name, exe)


def measure(build: workloads.Build, work: Path, jobs: int) -> Parity:
    """Compare `build` (copied into `work` first: its objects stay untouched), and run
    both programs."""
    copy = workloads.Build(build.name, work, build.main, build.library, build.native,
                           build.link_flags)  # fmt: skip
    shutil.copytree(build.root / "obj", work / "obj", dirs_exist_ok=True)
    result = compare(copy, link_both(copy, jobs))
    check(copy, work)
    return result


def report(p: Parity) -> None:
    got = sum(len(f) for f in p.got.values())
    other = sum(len(f) for f in p.other.values())
    relaxed = sum(len(f) for f in p.relaxed.values())
    print(f"{p.workload}: {p.total} functions: {p.identical} identical, {relaxed} identical"
          f" once linked (GOT loads relaxed to lea), {got} through the GOT, {other} other")  # fmt: skip
    for module, names in sorted(p.relaxed.items()):
        print(f"  relaxed {module}: {' '.join(names)}")
    for module, functions in sorted(p.got.items()):
        for name, symbols in functions.items():
            print(f"  got {module}: {name} loads {' '.join(symbols)}")
    for module, names in sorted(p.other.items()):
        print(f"  other {module}: {' '.join(names)}")
    for entry in p.unexplained:
        print(f"  unexplained GOT load: {entry}")
    print(f"{p.workload}: both programs run")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="lua,zstd,git")
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-parity-") as tmp:
        for name in args.workloads.split(","):
            objects = Path(tmp) / f"{name}-objects"
            build = git_build.build(objects) if name == "git" else workloads.build(name, objects)
            results.append(measure(build, Path(tmp) / name, args.jobs))
            report(results[-1])
    for p in results:
        print(f"parity/{p.workload}: {p.linked_identical}/{p.total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
