"""Links captured from real Buck2 builds (tests/fixtures/buck2, made by its capture.py):
`dist-lto plan --replay` on Buck2's meta file gives what Buck2's plan action wrote, and
the plans drive `dist-lto opt` and a final link whose program prints what Buck2's did."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import orjson
import pytest
from support.tools import Llvm, run_cli
from test_buck2_examples import EXPECTED

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "buck2"
LINKS = {"wordstats": "examples/c:wordstats", "shapes_report": "examples/cpp:shapes_report"}


def meta_path(root: Path, name: str) -> str:
    (meta,) = root.glob(f"buck-out/*/art/**/dist_lto/{name}/meta.json")
    return str(meta.relative_to(root))


def plan_outputs(root: Path, meta: dict) -> list[str]:
    """Every plan the planner writes for `meta`, relative to `root`."""
    outputs = [meta["link_plan_output"], meta["final_link_args_output"]]
    for group in meta["groups"]:
        for linkable in group["linkables"]:
            if "plan_output" in linkable:
                outputs.append(linkable["plan_output"])
    return outputs


@pytest.fixture(params=sorted(LINKS))
def captured(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path, dict]:
    name = request.param
    root = tmp_path / name
    shutil.copytree(FIXTURES / name, root)
    meta = orjson.loads((root / meta_path(root, name)).read_bytes())
    return name, root, meta


def test_replaying_a_buck2_meta_file_writes_what_buck2s_plan_action_wrote(
    captured: tuple[str, Path, dict],
) -> None:
    name, root, meta = captured
    outputs = plan_outputs(root, meta)
    written = {path: (root / path).read_bytes() for path in outputs}
    for path in outputs:
        (root / path).unlink()
    command = orjson.loads(written[meta["link_plan_output"]])["command"]  # Buck2's driver
    result = run_cli(["plan", "--replay", meta_path(root, name), "--", *command], cwd=root)
    assert result.returncode == 0, result.stderr
    assert {path: (root / path).read_bytes() for path in outputs} == written


def test_captured_buck2_plans_drive_opt_and_a_final_link_that_runs(
    captured: tuple[str, Path, dict], llvm: Llvm
) -> None:
    name, root, meta = captured
    link_dir = Path(meta_path(root, name)).parent
    jobs = []
    for group in meta["groups"]:
        for linkable in group["linkables"]:
            if linkable["kind"] == "object":
                plan = orjson.loads((root / linkable["plan_output"]).read_bytes())
                if plan["is_bitcode"]:
                    jobs.append((plan["path"], plan["index_file"], plan["opt_output"]))
            elif linkable["kind"] == "archive":
                plan = orjson.loads((root / linkable["plan_output"]).read_bytes())
                jobs += [(m["input"], f"{plan['index_dir']}/{m['index_file']}",
                          f"{plan['opt_objects_dir']}/{m['opt_object']}")
                         for m in plan["members"] if m["opt"]]  # fmt: skip
    assert len(jobs) >= 3
    for module, index, out in jobs:
        (root / out).parent.mkdir(parents=True, exist_ok=True)
        flags = str(link_dir / "link_flags")
        result = run_cli(["opt", "--input", module, "--index", index, "--out", out,
                          "--args", flags, "--", llvm.clang], cwd=root)  # fmt: skip
        assert result.returncode == 0, result.stderr
    driver = llvm.clangxx if name == "shapes_report" else llvm.clang
    final_args = meta["final_link_args_output"]
    subprocess.run([driver, "-fuse-ld=lld", "-O2", "-o", "prog", f"@{final_args}"],
                   cwd=root, check=True)  # fmt: skip
    out = subprocess.run(["./prog"], cwd=root, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == EXPECTED[LINKS[name]]
