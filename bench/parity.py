"""Parity with in-process ThinLTO: which functions our distributed backends generate
exactly as LLD's in-process backend does, and why the others differ.

For each workload, the same link twice: LLD 22's in-process ThinLTO with
`--save-temps=prelink` (the native object of every module: the reference), and the
distributed way, LLD's index step (`--thinlto-index-only`, with the declaration
imports `dist-lto plan` asks for) then `dist-lto opt` per module and a native link.
Every function is compared object against object (bytes and relocations, symbolised:
see objcode.py) and classified:

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
        [--link-flag=-no-pie ...] [--backend-flag=-fdirect-access-external-data ...]
        [--index-flag=FLAG ...] [--no-declaration-imports]
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
from dist_lto.llvm.index_step import DECLARATION_IMPORTS

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support import workloads

REPO = Path(__file__).resolve().parent.parent
OPT = [sys.executable, "-S", "-E", str(REPO / "tools" / "dist_lto" / "__main__.py"), "opt"]
LLVM_DIS = os.path.join(workloads.LLVM_BIN, "llvm-dis")
REFERENCE = "inprocess"
INDEX_STEP = ["-Wl," + ",".join(DECLARATION_IMPORTS)]
"""What `dist-lto plan` adds to the index step besides its index-only flags."""
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
    text = subprocess.run(
        [LLVM_DIS, str(index), "-o", "-"], check=True, capture_output=True, text=True
    ).stdout
    return {int(g) for g in GUID.findall(text)}


def link_flags(build: workloads.Build, extra: list[str]) -> list[str]:
    """The link's clang-driver flags (no level: LLD's default on both sides)."""
    return ["-flto=thin", "-fuse-ld=lld", *extra, *build.link_flags]


def reference_object(build: workloads.Build, module: str) -> Path:
    stem = Path(module).stem
    return build.root / Path(module).parent / f"{REFERENCE}.lto.{stem}.o"


def run(argv: list[str], cwd: Path) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({done.returncode}):\n{done.stderr}")


def link_both(
    build: workloads.Build, extra: list[str], index: list[str], backend: list[str], jobs: int
) -> dict[str, Path]:
    """The in-process link (reference objects kept) and the distributed one, whose
    index step gets the `index` flags and whose backends get the `backend` flags after
    the translated ones; returns each module's distributed object."""
    flags = link_flags(build, extra)
    inputs = [*build.objects, *build.native]
    run([workloads.CLANG, *flags, *inputs, "-o", REFERENCE, "-Wl,--save-temps=prelink"], build.root)
    run(
        [
            workloads.CLANG,
            *flags,
            *inputs,
            "-o",
            "index-only",
            "-Wl,--thinlto-index-only",
            "-Wl,--thinlto-emit-imports-files",
            *index,
        ],
        build.root,
    )
    args = build.root / "link.args"
    args.write_text("".join(f"{flag}\n" for flag in flags))

    def one(module: str) -> tuple[str, Path]:
        out = build.root / "opt" / module
        out.parent.mkdir(parents=True, exist_ok=True)
        run(
            [
                *OPT,
                "--input",
                module,
                "--index",
                f"{module}.thinlto.bc",
                "--out",
                str(out),
                "--args",
                str(args),
                "--",
                workloads.CLANG,
                *backend,
            ],
            build.root,
        )
        return module, out

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        ours = dict(pool.map(one, build.objects))
    run(
        [
            workloads.CLANG,
            "-fuse-ld=lld",
            *extra,
            *map(str, ours.values()),
            *build.native,
            "-o",
            "distributed",
            *build.link_flags,
        ],
        build.root,
    )
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
    """Run both programs: a workload's own check, or else the same output and status."""
    exes = (build.root / REFERENCE, build.root / "distributed")
    if build.name == "git":
        for exe in exes:
            git_build.check_binary(exe, work)
    elif build.name in workloads.SOURCE_PACKAGES:
        for exe in exes:
            workloads.check_binary(build.name, exe)
    else:
        ran = [subprocess.run([str(exe)], capture_output=True) for exe in exes]
        if (ran[0].returncode, ran[0].stdout) != (ran[1].returncode, ran[1].stdout):
            raise AssertionError(f"{build.name}: the two programs behave differently: {ran}")


def measure(
    build: workloads.Build,
    work: Path,
    jobs: int,
    link: list[str] | None = None,
    backend: list[str] | None = None,
    index: list[str] | None = None,
    declaration_imports: bool = True,
) -> Parity:
    """Compare `build` linked with the extra `link` flags, its distributed index step
    given the extra `index` flags and its backends the extra `backend` flags, and run
    both programs. The index step imports declarations as `dist-lto plan`'s does unless
    `declaration_imports` is false. The objects are copied into `work` first,
    so `build` stays untouched."""
    index = [*(INDEX_STEP if declaration_imports else []), *(index or [])]
    copy = workloads.Build(
        build.name, work, build.main, build.library, build.native, build.link_flags
    )
    shutil.copytree(build.root / "obj", work / "obj", dirs_exist_ok=True)
    result = compare(copy, link_both(copy, link or [], index, backend or [], jobs))
    check(copy, work)
    return result


def report(p: Parity) -> None:
    got = sum(len(f) for f in p.got.values())
    other = sum(len(f) for f in p.other.values())
    relaxed = sum(len(f) for f in p.relaxed.values())
    print(
        f"{p.workload}: {p.total} functions: {p.identical} identical, {relaxed} identical"
        f" once linked (GOT loads relaxed to lea), {got} through the GOT, {other} other"
    )
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
    parser.add_argument(
        "--link-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="an extra flag for both links, e.g. -no-pie (repeatable)",
    )
    parser.add_argument(
        "--backend-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="an extra clang flag for every distributed backend (repeatable)",
    )
    parser.add_argument(
        "--index-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="an extra flag for the distributed link's index step only (repeatable)",
    )
    parser.add_argument(
        "--no-declaration-imports",
        action="store_true",
        help="leave out the index step's " + " ".join(INDEX_STEP) + " (as dist-lto plan adds it)",
    )
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-parity-") as tmp:
        for name in args.workloads.split(","):
            objects = Path(tmp) / f"{name}-objects"
            build = git_build.build(objects) if name == "git" else workloads.build(name, objects)
            results.append(
                measure(
                    build,
                    Path(tmp) / name,
                    args.jobs,
                    args.link_flag,
                    args.backend_flag,
                    args.index_flag,
                    not args.no_declaration_imports,
                )
            )
            report(results[-1])
    for p in results:
        print(f"parity/{p.workload}: {p.linked_identical}/{p.total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
