"""A synthetic link in LLD's layout, as a big C++ program's would be, for the planner.

90% of the modules are objects, 10% are members of prepared archives (200 members each,
1% native, 5% never loaded), 0.5% of the objects are native, and each loaded module
imports 0-30 others (mean ~6, skewed towards a few popular modules). The index outputs
LLD would have written (`.thinlto.bc`, `.imports`, the index list) are generated with
the index files declared where LLD writes them. Used by bench/plan.py, bench/memory.py
and the planner's tests.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

import orjson

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
            rng.choice(popular) if rng.random() < 0.4 else rng.choice(spelled) for _ in range(count)
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
        linkables.append(
            {
                "kind": "object",
                "index": i,
                "path": path,
                "index_output": index + path + ".thinlto.bc",
                "plan_output": plan,
                "opt_output": f"out/opt/d{i // OBJECTS_PER_DIR}/{i}.o",
            }
        )
        outputs.append(plan)
        if i in native_objects:
            outputs.append(index + path + ".thinlto.bc")
    groups: list[dict[str, object]] = [{"linkables": linkables}]
    for k, members in enumerate(archives):
        manifest = {
            "version": 1,
            "archive": f"liba{k}.a",
            "thin": False,
            "members": [
                {
                    "name": os.path.basename(p),
                    "position": j,
                    "path": p,
                    "size": 1000,
                    "bitcode": bitcode,
                }
                for j, (p, bitcode, _) in enumerate(members)
            ],
        }
        write(f"prep/a{k}/manifest.json", orjson.dumps(manifest))
        groups.append(
            {
                "linkables": [
                    {
                        "kind": "archive",
                        "index": k,
                        "manifest": f"prep/a{k}/manifest.json",
                        "plan_output": f"out/archive-plans/{k}.json",
                        "index_dir": f"{index}prep/a{k}",
                        "opt_objects_dir": f"out/archive-opt/{k}",
                    }
                ]
            }
        )
        outputs.append(f"out/archive-plans/{k}.json")
    groups.append({"linkables": [{"kind": "args", "args": ["-lpthread", "-lm"]}]})
    meta = {
        "version": 1,
        "index_dir": "out/index",
        "link_plan_output": "out/link-plan.json",
        "final_link_args_output": "out/final-link.args",
        "groups": groups,
    }
    outputs += ["out/final-link.args", "out/link-plan.json"]
    write("meta.json", orjson.dumps(meta))
    return Synthetic(root, n_objects, n_members, outputs)
