"""The whole pipeline twice, in two different directories: the same bytes, file for file.

prepare, plan (with LLD's real index step), one `opt` per module the plans ask for,
and the final link with the planner's argument file, on Lua from Debian's sources,
in two working directories whose absolute paths differ in name and length. Every
output is compared: manifests, extracted members, index and imports files, plans,
argument files, optimised objects and the linked program.
"""

from __future__ import annotations

import concurrent.futures
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dist_lto.formats.plans import read_archive_plan, read_object_plan
from support import workloads
from support.lua_link import PREPARE_ARGV, lua_meta
from support.tools import Llvm, run_cli

pytestmark = pytest.mark.slow  # drives real Buck2 or whole real pipelines

OPT = [
    sys.executable,
    "-S",
    "-E",
    str(Path(__file__).resolve().parent.parent / "tools/dist_lto/__main__.py"),
    "opt",
]
LINK = ["-fuse-ld=lld", "-O2"]


def pipeline(root: Path, build: workloads.Build, llvm: Llvm) -> None:
    """prepare, plan, opt, link in `root` (which holds the objects under obj/)."""
    subprocess.run([llvm.ar, "rcs", "liblua.a", *build.library], cwd=root, check=True)
    steps = [
        PREPARE_ARGV,
        ["plan", "meta.json", "--", llvm.clang, *LINK, "-o", "lua"],
    ]  # fmt: skip
    (root / "meta.json").write_text(json.dumps(lua_meta(build)))
    (root / "link.args").write_text("\n".join([*LINK, *build.link_flags]) + "\n")
    for argv in steps:
        result = run_cli(argv, cwd=root)
        assert result.returncode == 0, result.stderr
    backends: list[list[str]] = []
    for i in range(len(build.main)):
        plan = read_object_plan(str(root / f"out/plans/{i}.json"))
        if plan["is_bitcode"]:
            backends.append([plan["path"], str(plan["index_file"]), plan["opt_output"]])
    archive = read_archive_plan(str(root / "out/archive-plans/0.json"))
    for m in archive["members"]:
        if m["opt"]:
            backends.append([m["input"], f"{archive['index_dir']}/{m['index_file']}",
                             f"{archive['opt_objects_dir']}/{m['opt_object']}"])  # fmt: skip
    for _, _, out in backends:
        (root / out).parent.mkdir(parents=True, exist_ok=True)

    def opt(backend: list[str]) -> subprocess.CompletedProcess[str]:
        module, index, out = backend
        return subprocess.run([*OPT, "--input", module, "--index", index, "--out", out,
                               "--args", "link.args", "--", llvm.clang],
                              cwd=root, capture_output=True, text=True)  # fmt: skip

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for result in pool.map(opt, backends):
            assert result.returncode == 0, result.stderr
    subprocess.run([llvm.clang, *LINK, "-o", "lua", "@out/final-link.args"], cwd=root,
                   check=True)  # fmt: skip
    workloads.check_binary("lua", root / "lua")


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}  # fmt: skip


def test_the_pipeline_gives_the_same_bytes_in_two_directories(
    tmp_path: Path, lua_objects: workloads.Build, llvm: Llvm
) -> None:
    first = tmp_path / "a"
    second = tmp_path / "a-much-longer-directory-name" / "nested"
    for root in (first, second):
        root.mkdir(parents=True)
        shutil.copytree(lua_objects.root / "obj", root / "obj")
        pipeline(root, lua_objects, llvm)
    one, two = files(first), files(second)
    assert sorted(one) == sorted(two)
    differ = sorted(name for name in one if one[name] != two[name])
    assert differ == [], f"{len(differ)} of {len(one)} files differ: {differ[:10]}"
    kinds = {name.rsplit(".", 1)[-1] for name in one}
    assert {"json", "bc", "imports", "args", "o", "a"} <= kinds
    assert "lua" in one
