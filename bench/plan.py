#!/usr/bin/env python3
"""Benchmark `dist-lto plan --replay` on synthetic links of 50,000 and 100,000 objects.

Each link looks like a big C++ program's: 90% of the modules are objects, 10% are
members of prepared archives (200 members each, 1% native, 5% never loaded), 0.5%
of the objects are native, and each loaded module imports 0-30 others (mean ~6,
skewed towards a few popular modules). The index outputs LLD would have written
(`.thinlto.bc`, `.imports`, the index list) are generated in LLD's layout, with
the index files declared where LLD writes them, so the planner writes the plans and
moves nothing.

The planner runs as a separate process (`python -m dist_lto plan --replay`), timed
wall-clock with its interpreter start-up, its peak RSS taken from wait4(). The lower
bound, measured in the same run on the same file system, is the time to merely create
the files the planner created (same directories, same sizes) from Python, without
start-up. Planner and lower bound run in pairs, `--repeat` times, alternating which goes
first; the ratio reported is the median of the pairs' ratios (other jobs on a shared
machine shift both sides of a pair alike). Ends with `plan-100k/lower-bound: <ratio>`.
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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from support.synthetic_link import Synthetic, generate  # noqa: E402


def set_aside_outputs(s: Synthetic, trash: Path) -> None:
    """Move a previous run's outputs out of the way without deleting them.

    Deleting 100,000 files right before a measurement slows it down (the file system
    is still discarding the freed blocks), so deletions all wait until the end.
    """
    trash.mkdir(parents=True, exist_ok=True)
    for sub in ("plans", "archive-plans"):
        if (s.root / "out" / sub).exists():
            os.rename(s.root / "out" / sub, trash / f"{sub}-{len(os.listdir(trash))}")
    for rel in s.outputs:
        if not rel.startswith(("out/plans/", "out/archive-plans/")):
            (s.root / rel).unlink(missing_ok=True)


def settle() -> None:
    """Flush dirty pages and give the journal a moment, so runs start alike."""
    os.sync()
    time.sleep(1)


def run_planner(s: Synthetic, trash: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one `dist-lto plan --replay` process."""
    set_aside_outputs(s, trash)
    settle()
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dist_lto", "plan", "--replay", "meta.json"],
        cwd=s.root,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"planner failed ({proc.returncode}): {stderr}")
    return wall, usage.ru_maxrss * 1024


def lower_bound(s: Synthetic, scratch: Path) -> float:
    """Seconds to create files with the planner's outputs' directories and sizes, in a
    fresh directory `scratch`."""
    files = [(rel, (s.root / rel).stat().st_size) for rel in s.outputs]
    payload = b"x" * max(size for _, size in files)
    dirs: set[str] = set()
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    settle()
    start = time.perf_counter()
    for rel, size in files:
        path = f"{scratch}/{rel}"
        parent = os.path.dirname(path)
        if parent not in dirs:
            os.makedirs(parent, exist_ok=True)
            dirs.add(parent)
        fd = os.open(path, flags, 0o666)
        os.write(fd, payload[:size])
        os.close(fd)
    return time.perf_counter() - start


def measure(n: int, label: str, work: Path, repeat: int) -> float:
    root = work / label
    t0 = time.perf_counter()
    s = generate(root, n)
    made = time.perf_counter() - t0
    walls: list[float] = []
    bounds: list[float] = []
    rss = 0
    trash = work / f"{label}-trash"
    for i in range(repeat):
        # Alternate the order so that neither side always runs right after the other.
        if i % 2:
            bounds.append(lower_bound(s, trash / f"lower-bound-{i}"))
        wall, peak = run_planner(s, trash)
        walls.append(wall)
        rss = max(rss, peak)
        if not i % 2:
            bounds.append(lower_bound(s, trash / f"lower-bound-{i}"))
    pairs = sorted(w / b for w, b in zip(walls, bounds, strict=True))
    ratio = statistics.median(pairs)
    print(
        f"{label}: {s.objects} objects + {s.members} archive members, {len(s.outputs)} output"
        f" files [generated in {made:.1f} s]\n"
        f"  planner wall (s):     {' '.join(f'{w:.2f}' for w in walls)}\n"
        f"  lower bound (s):      {' '.join(f'{b:.2f}' for b in bounds)}"
        "  (create the same files, same sizes, same directories)\n"
        f"  paired ratios:        {' '.join(f'{r:.2f}' for r in pairs)}"
        f"  (best-of ratio {min(walls) / min(bounds):.2f})\n"
        f"  planner peak RSS:     {rss / 2**20:.0f} MB",
        flush=True,
    )
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(trash, ignore_errors=True)
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        default="50000,100000",
        help="comma-separated module counts (default 50000,100000)",
    )
    parser.add_argument("--repeat", type=int, default=2, help="runs per size, best kept")
    parser.add_argument("--workdir", help="where to generate (default: a temporary directory)")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-plan-", dir=args.workdir) as tmp:
        ratios = []
        for n in sizes:
            label = f"plan-{n // 1000}k"
            ratios.append((label, measure(n, label, Path(tmp), args.repeat)))
        for label, ratio in ratios:
            print(f"{label}/lower-bound: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
