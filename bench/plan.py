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
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
MEMBERS_PER_ARCHIVE = 200
OBJECTS_PER_DIR = 500
NATIVE_ELF = b"\x7fELF\x02\x01\x01" + bytes(57)


@dataclass
class Synthetic:
    root: Path
    objects: int
    members: int
    outputs: list[str]
    """Every file the planner writes, relative to `root`."""


def _imports_count(rng: random.Random) -> int:
    return min(30, int(rng.expovariate(1 / 6)))


def generate(root: Path, n: int, seed: int = 1) -> Synthetic:
    """A synthetic link of `n` modules with the index outputs of a finished index step."""
    rng = random.Random(seed)
    n_members = n // 10
    n_objects = n - n_members
    objects = [f"obj/d{i // OBJECTS_PER_DIR}/m{i}.o" for i in range(n_objects)]
    native_objects = set(rng.sample(range(n_objects), n_objects // 200))
    archives: list[list[tuple[str, bool, bool]]] = []  # (path in manifest, bitcode, loaded)
    for k in range(0, n_members, MEMBERS_PER_ARCHIVE):
        members = []
        for j in range(min(MEMBERS_PER_ARCHIVE, n_members - k)):
            roll = rng.random()
            members.append((f"objects/m{j}.o", roll >= 0.01, roll >= 0.06))
        archives.append(members)
    spelled = [p for i, p in enumerate(objects) if i not in native_objects]
    for k, members in enumerate(archives):
        spelled += [f"prep/a{k}/{p}" for p, bitcode, loaded in members if bitcode and loaded]
    popular = spelled[: max(1, len(spelled) // 100)]

    made_dirs: set[str] = set()

    def write(rel: str, data: bytes) -> None:
        parent = os.path.dirname(rel)
        if parent not in made_dirs:
            os.makedirs(root / parent, exist_ok=True)
            made_dirs.add(parent)
        (root / rel).write_bytes(data)

    index = "out/index/"
    for name in spelled:
        count = _imports_count(rng)
        chosen = {
            rng.choice(popular) if rng.random() < 0.4 else rng.choice(spelled)
            for _ in range(count)
        }
        chosen.discard(name)
        write(index + name + ".thinlto.bc", b"BC\xc0\xde" + bytes(rng.randrange(200, 600)))
        write(index + name + ".imports", "".join(x + "\n" for x in sorted(chosen)).encode())
    for k, members in enumerate(archives):
        for p, bitcode, loaded in members:
            if bitcode and not loaded:
                write(f"{index}prep/a{k}/{p}.thinlto.bc", b"BC\xc0\xde" + bytes(132))
                write(f"{index}prep/a{k}/{p}.imports", b"")
    write(index + "index.list", "".join(index + x + "\n" for x in spelled).encode())
    for i in native_objects:
        write(objects[i], NATIVE_ELF)

    outputs: list[str] = []
    linkables: list[dict[str, object]] = []
    for i, path in enumerate(objects):
        plan = f"out/plans/d{i // OBJECTS_PER_DIR}/{i}.json"
        linkables.append({
            "kind": "object", "index": i, "path": path,
            "index_output": index + path + ".thinlto.bc",
            "plan_output": plan, "opt_output": f"out/opt/d{i // OBJECTS_PER_DIR}/{i}.o",
        })
        outputs.append(plan)
        if i in native_objects:
            outputs.append(index + path + ".thinlto.bc")
    groups: list[dict[str, object]] = [{"linkables": linkables}]
    for k, members in enumerate(archives):
        manifest = {
            "version": 1, "archive": f"liba{k}.a", "thin": False,
            "members": [
                {"name": os.path.basename(p), "position": j, "path": p, "size": 1000,
                 "bitcode": bitcode}
                for j, (p, bitcode, _) in enumerate(members)
            ],
        }
        write(f"prep/a{k}/manifest.json", orjson.dumps(manifest))
        groups.append({"linkables": [{
            "kind": "archive", "index": k, "manifest": f"prep/a{k}/manifest.json",
            "plan_output": f"out/archive-plans/{k}.json", "index_dir": f"{index}prep/a{k}",
            "opt_objects_dir": f"out/archive-opt/{k}",
        }]})
        outputs.append(f"out/archive-plans/{k}.json")
    groups.append({"linkables": [{"kind": "args", "args": ["-lpthread", "-lm"]}]})
    meta = {
        "version": 1, "index_dir": "out/index", "link_plan_output": "out/link-plan.json",
        "final_link_args_output": "out/final-link.args", "groups": groups,
    }
    outputs += ["out/final-link.args", "out/link-plan.json"]
    write("meta.json", orjson.dumps(meta))
    return Synthetic(root, n_objects, n_members, outputs)


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
    proc = subprocess.Popen([sys.executable, "-m", "dist_lto", "plan", "--replay", "meta.json"],
                            cwd=s.root, stderr=subprocess.PIPE)
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
    parser.add_argument("--sizes", default="50000,100000",
                        help="comma-separated module counts (default 50000,100000)")
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
