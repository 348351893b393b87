#!/usr/bin/env python3
"""Peak memory of `plan` on the 100k-object synthetic link and of `prepare` on a 1 GiB
archive, against the limits docs/reliability.md states.

- plan: `bench/plan.py`'s synthetic link (90,000 objects, 10,000 archive members, LLD's
  index outputs already in place), planned with `dist-lto plan --replay` as a separate
  process, which forks its import-reading workers (one per CPU, at most 8).
- prepare: a regular GNU archive of at least 1 GiB whose members are Lua's ThinLTO
  bitcode objects (cycled under unique names, a name table for the long ones), written
  here and listed by `llvm-ar t` to show that it is a real archive, then prepared with
  `dist-lto prepare` into an empty directory.

Peak RSS is the kernel's high-water mark for the process and everything it waited for
(wait4's ru_maxrss: the largest single process, workers included); the main process's
anonymous and file-backed RSS are polled from /proc every 5 ms. Each line ends with the
ratio to its limit (`LIMITS_MB`); the script fails when a limit is exceeded. The last
line, `memory: ok`, says both stayed within their limits.

Usage: .venv/bin/python bench/memory.py [--objects 100000] [--archive-mib 1024] [--workdir D]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import plan as plan_bench
from support import workloads

LIMITS_MB = {"plan": 256, "prepare": 96}
"""The limits in docs/reliability.md, in MiB: the peak RSS of `plan` at 100k objects (workers
included), and the peak anonymous memory of `prepare` on a 1 GiB archive. prepare maps
the archive (tools/dist_lto/archive/reader.py), so its RSS also counts the archive's
pages in the page cache, up to the archive's size: file-backed and clean, the kernel
drops them under pressure; they are shown, not limited."""

MIB = 1 << 20


class Peaks:
    """High-water marks of one run: ru_maxrss, and RssAnon / RssFile of the main process
    polled from /proc (file-backed pages are mapped page cache, e.g. an mmap'd archive,
    which the kernel can drop; anonymous pages are the process's own memory)."""

    def __init__(self) -> None:
        self.rss = self.anon = self.file = 0

    def sample(self, pid: int) -> None:
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                status = f.read()
        except OSError:
            return
        for line in status.split(b"\n"):
            if line.startswith(b"RssAnon:"):
                self.anon = max(self.anon, int(line.split()[1]) * 1024)
            elif line.startswith(b"RssFile:"):
                self.file = max(self.file, int(line.split()[1]) * 1024)

    def show(self) -> str:
        return (
            f"peak RSS {self.rss / MIB:.0f} MiB (main process: anonymous"
            f" {self.anon / MIB:.0f} MiB, file-backed {self.file / MIB:.0f} MiB)"
        )


def run_measured(argv: list[str], cwd: Path) -> tuple[float, Peaks]:
    """Wall seconds and memory peaks of one `dist-lto` process (and its children)."""
    peaks = Peaks()
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "dist_lto", *argv], cwd=cwd,
                            stderr=subprocess.PIPE)  # fmt: skip
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        peaks.sample(proc.pid)
        time.sleep(0.005)
    wall = time.perf_counter() - start
    peaks.rss = usage.ru_maxrss * 1024
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv[0]} failed: {stderr}")
    return wall, peaks


def tree_size(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def measure_plan(work: Path, objects: int) -> float:
    root = work / "plan"
    synthetic = plan_bench.generate(root, objects)
    inputs_count, inputs_size = tree_size(root)
    plan_bench.settle()
    wall, peaks = run_measured(["plan", "--replay", "meta.json"], root)
    meta_mib = (root / "meta.json").stat().st_size / MIB
    print(
        f"plan: {synthetic.objects} objects + {synthetic.members} archive members"
        f" ({inputs_count} input files, {inputs_size / MIB:.0f} MiB; meta {meta_mib:.1f} MiB),"
        f" {len(synthetic.outputs)} outputs in {wall:.1f} s; {peaks.show()};"
        f" limit {LIMITS_MB['plan']} MiB: {peaks.rss / MIB / LIMITS_MB['plan']:.2f}",
        flush=True,
    )
    shutil.rmtree(root)
    return peaks.rss / MIB / LIMITS_MB["plan"]


def _ar_header(name: bytes, size: int) -> bytes:
    fields = [name.ljust(16), b"0".ljust(12), b"0".ljust(6), b"0".ljust(6), b"100644".ljust(8),
              str(size).encode().ljust(10), b"`\n"]  # fmt: skip
    return b"".join(fields)


def write_archive(path: Path, members: list[bytes], total: int) -> int:
    """A GNU archive of at least `total` bytes of `members` (cycled); its member count."""
    sizes = [len(m) for m in members]
    count, size = 0, 0
    while size < total:
        size += sizes[count % len(members)] + 60
        count += 1
    names = [b"lua_module_%06d.o" % i for i in range(count)]
    table = b"".join(n + b"/\n" for n in names)
    with open(path, "wb") as out:
        out.write(b"!<arch>\n" + _ar_header(b"//", len(table)) + table + b"\n" * (len(table) & 1))
        offset = 0
        for i in range(count):
            data = members[i % len(members)]
            out.write(_ar_header(b"/%d" % offset, len(data)) + data + b"\n" * (len(data) & 1))
            offset += len(names[i]) + 2
    return count


def measure_prepare(work: Path, archive_mib: int) -> float:
    root = work / "prepare"
    root.mkdir()
    lua = workloads.build("lua", work / "lua")
    members = [(lua.root / o).read_bytes() for o in lua.objects]
    archive = root / "big.a"
    count = write_archive(archive, members, archive_mib * MIB)
    listed = subprocess.run([os.path.join(workloads.LLVM_BIN, "llvm-ar"), "t", str(archive)],
                            capture_output=True, check=True).stdout.count(b"\n")  # fmt: skip
    if listed != count:
        raise SystemExit(f"llvm-ar lists {listed} members, {count} were written")
    size = archive.stat().st_size
    plan_bench.settle()
    wall, peaks = run_measured(["prepare", "--archive", "big.a", "--objects-out", "objects",
                              "--manifest-out", "big.json"], root)  # fmt: skip
    manifest_mib = (root / "big.json").stat().st_size / MIB
    print(f"prepare: {size / MIB:.0f} MiB archive, {count} members (llvm-ar t lists them all),"
          f" extracted in {wall:.1f} s, manifest {manifest_mib:.1f} MiB; {peaks.show()};"
          f" anonymous limit {LIMITS_MB['prepare']} MiB:"
          f" {peaks.anon / MIB / LIMITS_MB['prepare']:.2f}", flush=True)  # fmt: skip
    shutil.rmtree(root)
    return peaks.anon / MIB / LIMITS_MB["prepare"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=100_000, help="synthetic link size")
    parser.add_argument("--archive-mib", type=int, default=1024, help="archive size in MiB")
    parser.add_argument("--workdir", help="where to work (default: a temporary directory)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-memory-", dir=args.workdir) as tmp:
        ratios = [measure_plan(Path(tmp), args.objects),
                  measure_prepare(Path(tmp), args.archive_mib)]  # fmt: skip
    if max(ratios) > 1:
        print("memory: a limit was exceeded")
        return 1
    print("memory: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
