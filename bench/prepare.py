#!/usr/bin/env python3
"""How fast is `dist-lto prepare` next to `llvm-ar x`? Side by side, in one run.

(a) a regular archive of N members (default 5,000) of which 20% repeat an earlier
    member's name, built by llvm-ar from Lua's ThinLTO bitcode objects;
(b) the thin variant of the same archive (llvm-ar cannot extract thin archives,
    so its time is compared with `llvm-ar x` of the regular one), plus the bytes
    (b) copied into its objects directory (the target is 0);
(c) upstream Buck2's GNU prepare tool (`dist_lto_prepare_gnu.py` of the prelude bundled
    in the Buck2 binary, expanded with `buck2 expand-external-cell prelude` into the
    work directory and run from there, never copied into this project) on the same thin
    archive, with the same interpreter, next to (b). For a thin archive it runs
    `file -b` and `llvm-ar t`, checks that each member exists and writes its manifest;
    ours also reads each member's size and bitcode magic.

Every timed command is a fresh process into a fresh empty directory, as a build
runs it; rounds alternate the order and the medians are compared. Outputs are
kept until the end because deleting 5,000 files makes the *next* writer on ext4
(mounted with `discard`) pay for it. Python runs with its bytecode cache on
(the default; this sandbox sets PYTHONDONTWRITEBYTECODE), after one warm-up run.
The start-up and import cost of the interpreter is measured too, to show where
the time goes. Last line: `prepare/llvm-ar-x: <ratio>` for (a).

Usage: .venv/bin/python bench/prepare.py [--members 5000] [--rounds 7] [--workdir DIR]
           [--upstream-tool PATH/dist_lto_prepare_gnu.py]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support import workloads
from support.real_buck2 import find_buck2

LLVM_AR = os.path.join(workloads.LLVM_BIN, "llvm-ar")
VENV_BIN = Path(sys.executable).parent
DIST_LTO = str(VENV_BIN / "dist-lto") if (VENV_BIN / "dist-lto").exists() else None


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _prepare_cmd() -> list[str]:
    return [DIST_LTO] if DIST_LTO else [sys.executable, "-m", "dist_lto"]


UPSTREAM_TOOL = "cxx/dist_lto/tools/dist_lto_prepare_gnu.py"
"""Upstream's prepare tool for GNU targets, inside the prelude cell."""


def upstream_tool(work: Path) -> Path:
    """Expand the prelude bundled in the Buck2 binary into `work` and return the path of
    its prepare tool (a project of its own, so the daemon is ours; killed afterwards)."""
    project = work / "upstream-prelude"
    project.mkdir(exist_ok=True)
    (project / ".buckroot").touch()
    (project / ".buckconfig").write_text(
        "[cells]\nroot = .\nprelude = prelude\n[external_cells]\nprelude = bundled\n"
    )
    buck2 = [find_buck2(), "--isolation-dir", "bench-prepare"]
    try:
        subprocess.run([*buck2, "expand-external-cell", "prelude"], cwd=project, check=True,
                       capture_output=True)  # fmt: skip
    finally:
        subprocess.run([*buck2, "kill"], cwd=project, capture_output=True)
    tool = project / "prelude" / UPSTREAM_TOOL
    if not tool.is_file():
        raise SystemExit(f"{tool}: not in the expanded prelude")
    return tool


def make_members(work: Path, count: int) -> list[str]:
    """`count` member files under work/m/, 20% of them sharing an earlier file's name."""
    lua = workloads.build("lua", work / "lua")
    objects = [lua.root / o for o in lua.library]
    files: list[str] = []
    unique = 0
    for i in range(count):
        if i % 5 == 4:
            name = f"mod{(i * 7919) % max(unique, 1):05d}.o"
        else:
            name = f"mod{unique:05d}.o"
            unique += 1
        rel = f"m/{i // 100:03d}/{i:05d}/{name}"
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(objects[i % len(objects)], work / rel)
        files.append(rel)
    return files


def make_archives(work: Path, files: list[str]) -> tuple[Path, Path]:
    (work / "members.rsp").write_text("".join(f"{f}\n" for f in files))
    for name, flags in (("regular.a", "rcs"), ("thin.a", "rcsT")):
        subprocess.run([LLVM_AR, flags, name, "@members.rsp"], cwd=work, check=True)
    return work / "regular.a", work / "thin.a"


def timed(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, env=_env(), stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


class Runner:
    """Fresh output directories under `out`, numbered, kept until the end."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.count = 0

    def fresh(self) -> Path:
        self.count += 1
        path = self.out / f"run{self.count:03d}"
        path.mkdir(parents=True)
        return path

    def llvm_ar_x(self, archive: Path) -> float:
        target = self.fresh() / "x"
        target.mkdir()
        return timed([LLVM_AR, "x", str(archive)], target)

    def prepare(self, archive: Path) -> tuple[float, Path]:
        run = self.fresh()
        cmd = [*_prepare_cmd(), "prepare", "--archive", str(archive)]
        cmd += ["--objects-out", "objects", "--manifest-out", "manifest.json"]
        return timed(cmd, run), run

    def upstream(self, tool: Path, archive: Path) -> tuple[float, Path]:
        run = self.fresh()
        cmd = [sys.executable, str(tool), "--archive", str(archive), "--ar", LLVM_AR]
        cmd += ["--name", archive.name, "--objects-out", "objects", "--manifest-out"]
        return timed([*cmd, "manifest.json"], run), run


def touch_members(work: Path, files: list[str]) -> None:
    """Read each member's first page, as the compile that wrote it leaves it cached."""
    for name in files:
        with open(work / name, "rb") as f:
            f.read(4096)


def bytes_under(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def interpreter_costs(rounds: int) -> tuple[float, float]:
    """Median start-up of the interpreter, and of start-up plus prepare's imports."""
    bare = [timed([sys.executable, "-c", "pass"], Path.cwd()) for _ in range(rounds)]
    code = (
        "import argparse, dist_lto.commands.prepare, dist_lto.archive.reader,"
        " dist_lto.formats.jsonio"
    )
    imports = [timed([sys.executable, "-c", code], Path.cwd()) for _ in range(rounds)]
    return statistics.median(bare), statistics.median(imports)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--workdir", help="where to build and extract (default: a temp dir)")
    parser.add_argument(
        "--upstream-tool",
        type=Path,
        help="upstream's dist_lto_prepare_gnu.py (default: expanded from Buck2's bundled prelude)",
    )
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-prepare-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    try:
        files = make_members(work, args.members)
        regular, thin = make_archives(work, files)
        size_mb = regular.stat().st_size / 1e6
        runner = Runner(work / "out")
        runner.llvm_ar_x(regular)  # warm-up: page cache, bytecode cache
        runner.prepare(regular)
        runner.prepare(thin)
        tool = args.upstream_tool or upstream_tool(work)
        _, run = runner.upstream(tool, thin)
        listed = orjson.loads((run / "manifest.json").read_bytes())["objects"]
        if len(listed) != len(files):
            raise SystemExit(f"upstream's tool listed {len(listed)} of {len(files)} members")
        upstream_times: list[float] = []
        ar_times: list[float] = []
        regular_times: list[float] = []
        thin_times: list[float] = []
        thin_bytes = 0
        for i in range(args.rounds):
            steps = ["ar", "regular", "thin", "upstream"]
            if i % 2:
                steps.reverse()
            for step in steps:
                if step == "ar":
                    ar_times.append(runner.llvm_ar_x(regular))
                elif step == "regular":
                    regular_times.append(runner.prepare(regular)[0])
                elif step == "upstream":
                    upstream_times.append(runner.upstream(tool, thin)[0])
                else:
                    seconds, run = runner.prepare(thin)
                    thin_times.append(seconds)
                    thin_bytes = max(thin_bytes, bytes_under(run / "objects"))
        # The thin pair again with the members' first pages in the page cache, as a build
        # that has just compiled them leaves them (above, the extractions between the
        # runs evict them, and only ours reads members).
        warm_ours: list[float] = []
        warm_upstream: list[float] = []
        for i in range(args.rounds):
            touch_members(work, files)
            for which in ("ours", "upstream")[:: 1 if i % 2 else -1]:
                if which == "ours":
                    warm_ours.append(runner.prepare(thin)[0])
                else:
                    warm_upstream.append(runner.upstream(tool, thin)[0])
        bare, imported = interpreter_costs(args.rounds)
    finally:
        shutil.rmtree(work / "out", ignore_errors=True)
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    ar = statistics.median(ar_times)
    reg = statistics.median(regular_times)
    thn = statistics.median(thin_times)
    up = statistics.median(upstream_times)
    duplicates = len(files) - len({Path(f).name for f in files})
    print(f"archive: {len(files)} members, {duplicates} repeated names, {size_mb:.0f} MB")
    print(f"medians of {args.rounds} rounds (wall seconds):")
    print(f"  llvm-ar x (regular)       {ar:.3f}")
    print(f"  prepare (a) regular       {reg:.3f}")
    print(f"  prepare (b) thin          {thn:.3f}   (fastest {min(thin_times):.3f})")
    print(f"  upstream (c) thin         {up:.3f}   (fastest {min(upstream_times):.3f})")
    print(f"  python start-up           {bare:.3f}")
    print(f"  start-up + imports        {imported:.3f}")
    work = reg - imported
    print(f"(a) without start-up and imports: {work:.3f}, {work / ar:.2f} of llvm-ar x")
    print(f"(b) thin: bytes copied into the objects directory: {thin_bytes}")
    print(f"(b) thin: prepare/llvm-ar-x: {thn / ar:.2f}")
    fastest = min(thin_times) / min(upstream_times)
    print(f"(b)/(c) thin, ours/upstream: {thn / up:.2f} (fastest rounds {fastest:.2f})")
    w_ours, w_up = statistics.median(warm_ours), statistics.median(warm_upstream)
    print(f"members in the page cache: (b) {w_ours:.3f}, (c) {w_up:.3f} (fastest"
          f" {min(warm_ours):.3f}, {min(warm_upstream):.3f})")  # fmt: skip
    w_fastest = min(warm_ours) / min(warm_upstream)
    print(f"(b)/(c) thin, members cached: {w_ours / w_up:.2f} (fastest rounds {w_fastest:.2f})")
    print(f"prepare/llvm-ar-x: {reg / ar:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
