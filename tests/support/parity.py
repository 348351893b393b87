"""Parity with in-process ThinLTO, measured: the same link twice, LLD 22's in-process
ThinLTO with `--save-temps=prelink` (every module's native object: the reference) and
the distributed way (LLD's index step, `dist-lto opt` per module, a native link); every
function compared object against object (`objcode`) and classified as identical,
relaxed (differs only by GOT loads LLD relaxes into the reference's `lea`), got (loads
from the GOT a symbol the reference addresses directly; checked against the cause
docs/parity.md gives, else listed as unexplained) or other. Both programs are run.
Used by tests/test_parity.py and bench/parity.py.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dist_lto.llvm.index_step import DECLARATION_IMPORTS

from support import objcode, workloads
from support.opt_command import opt_command

LLVM_DIS = os.path.join(workloads.LLVM_BIN, "llvm-dis")
REFERENCE = "inprocess"
GUID = re.compile(r"guid: (\d+)")
INDEX_STEP = ["-Wl," + ",".join(DECLARATION_IMPORTS)]
"""What `dist-lto plan` adds to the index step besides its index-only flags."""


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
        run(opt_command(module, out, workloads.CLANG, "--args", str(args)) + backend, build.root)
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


def check(build: workloads.Build, run_binary: Callable[[Path], None] | None) -> None:
    """Run both programs: `run_binary` on each, a workload's own check, or else the same
    output and status."""
    exes = (build.root / REFERENCE, build.root / "distributed")
    if run_binary is not None:
        for exe in exes:
            run_binary(exe)
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
    run_binary: Callable[[Path], None] | None = None,
    declaration_imports: bool = True,
) -> Parity:
    """Compare `build` linked with the extra `link` flags, its distributed index step
    given the extra `index` flags and its backends the extra `backend` flags, and run
    both programs (with `run_binary` when given). The index step imports declarations
    as `dist-lto plan`'s does unless `declaration_imports` is false. The objects are
    copied into `work` first, so `build` stays untouched."""
    index = [*(INDEX_STEP if declaration_imports else []), *(index or [])]
    copy = workloads.Build(
        build.name, work, build.main, build.library, build.native, build.link_flags
    )
    shutil.copytree(build.root / "obj", work / "obj", dirs_exist_ok=True)
    result = compare(copy, link_both(copy, link or [], index, backend or [], jobs))
    check(copy, run_binary)
    return result
