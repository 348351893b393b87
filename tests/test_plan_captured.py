"""The captured example in examples/captured: real LLD 22 output that replays, links and runs."""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
from dist_lto.formats.plans import read_archive_plan, read_object_plan
from support.tools import Llvm, run_cli


def files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_replaying_the_captured_example_reproduces_its_committed_outputs(captured: Path) -> None:
    committed = files(captured / "out")
    command = orjson.loads(committed["link-plan.json"])["command"]  # recorded by regenerate.sh
    for sub in ("plans", "archive-plans"):
        shutil.rmtree(captured / "out" / sub)
    (captured / "out/link-plan.json").unlink()
    (captured / "out/final-link.args").unlink()
    result = run_cli(["plan", "--replay", "meta.json", "--", *command], cwd=captured)
    assert result.returncode == 0, result.stderr
    assert files(captured / "out") == committed


def test_regenerating_the_captured_example_with_lld_gives_the_committed_files(
    captured: Path,
) -> None:
    committed = files(captured)
    env = {**os.environ, "DIST_LTO": f"{Path(sys.executable).parent}/dist-lto"}
    subprocess.run(
        ["bash", "regenerate.sh"], cwd=captured, env=env, check=True, capture_output=True
    )
    assert files(captured) == committed


def _expected(words: list[str]) -> str:
    """What the captured program prints, computed independently."""

    def mix(h: int, v: int) -> int:
        return ((h ^ v) * 16777619) & 0xFFFFFFFF

    h = 2166136261
    for word in words:
        w = 0
        for byte in word.encode():
            w = mix(w, byte)
        h = mix(h, w)
    return f"{((h << 3) | (h >> 29)) & 0xFFFFFFFF:08x}\n"


def test_captured_plans_drive_backends_and_a_final_link_that_runs(
    captured: Path, llvm: Llvm
) -> None:
    jobs = []
    for n in (0, 1):
        p = read_object_plan(str(captured / f"out/plans/{n}.json"))
        if p["is_bitcode"]:
            jobs.append((p["path"], p["index_file"], p["opt_output"]))
    for n in (0, 1):
        a = read_archive_plan(str(captured / f"out/archive-plans/{n}.json"))
        jobs += [
            (
                m["input"],
                f"{a['index_dir']}/{m['index_file']}",
                f"{a['opt_objects_dir']}/{m['opt_object']}",
            )
            for m in a["members"]
            if m["opt"]
        ]
    assert len(jobs) == 3  # main.o, util.o, text.o; not unused.o, not the native fast.o

    def backend(job: tuple[str, str | None, str]) -> None:
        src, index, out = job
        (captured / out).parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [llvm.clang, "-O2", "-x", "ir", src, f"-fthinlto-index={index}", "-c", "-o", out],
            cwd=captured,
            check=True,
        )

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(backend, jobs))
    subprocess.run(
        [llvm.clang, "-fuse-ld=lld", "-O2", "-o", "app", "@out/final-link.args"],
        cwd=captured,
        check=True,
    )
    words = ["distributed", "thin", "lto"]
    out = subprocess.run(
        ["./app", *words], cwd=captured, check=True, capture_output=True, text=True
    ).stdout
    assert out == _expected(words)


def test_the_plans_flag_the_largest_loaded_bitcode_module_once(captured: Path) -> None:
    """Sizes come from the manifest for members and from the file for objects; a native
    object or a member the link never loaded is not a backend, however large."""
    manifest_file = captured / "prep/util/manifest.json"
    manifest = orjson.loads(manifest_file.read_bytes())
    sizes = {"unused.o": 10**9, "util.o": 10**6}  # unused.o is never loaded
    for member in manifest["members"]:
        member["size"] = sizes[member["name"]]
    manifest_file.write_bytes(orjson.dumps(manifest))
    with open(captured / "obj/fast.o", "ab") as native:
        native.write(bytes(2 * 10**6))
    command = orjson.loads((captured / "out/link-plan.json").read_bytes())["command"]
    result = run_cli(["plan", "--replay", "meta.json", "--", *command], cwd=captured)
    assert result.returncode == 0, result.stderr

    plans = [read_object_plan(f"{captured}/out/plans/{i}.json") for i in (0, 1)]
    flagged = [plan["path"] for plan in plans if plan["largest"]]
    for i in (0, 1):
        archive = read_archive_plan(f"{captured}/out/archive-plans/{i}.json")
        flagged += [m["name"] for m in archive["members"] if m["largest"]]
    assert flagged == ["util.o"]
