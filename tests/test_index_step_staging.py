"""The index step's staging directory and its hold on the index directory, with real LLD
on the captured example: a staging directory is a new name each run (never an input's),
one `plan` at a time holds an index directory, and a rerun clears what a killed run left.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.tools import REPO, Llvm

DIST_LTO = [sys.executable, "-m", "dist_lto"]
CAPTURED = REPO / "examples" / "captured"
LINK = ["-fuse-ld=lld", "-O2", "-o", "app"]
"""The link the captured example was planned for (examples/captured/regenerate.sh)."""
SLOW_CLANG = """\
#!/bin/sh
# clang, three seconds late: long enough for a second plan to find the directory held.
sleep 3
exec {clang} "$@"
"""


def committed(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in (root / "out").rglob("*")
            if p.is_file()}  # fmt: skip


@pytest.fixture
def captured(tmp_path: Path) -> Path:
    dest = tmp_path / "captured"
    shutil.copytree(CAPTURED, dest)
    return dest


def slow_clang(tmp_path: Path, llvm: Llvm) -> str:
    script = tmp_path / "clang-slow"
    script.write_text(SLOW_CLANG.format(clang=llvm.clang))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def plan(root: Path, clang: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*DIST_LTO, "plan", "meta.json", "--", clang, *LINK],
                            cwd=root, stderr=subprocess.PIPE, text=True)  # fmt: skip


def test_a_second_plan_into_a_held_index_directory_fails_at_once_saying_it_is_busy(
    captured: Path, llvm: Llvm, tmp_path: Path
) -> None:
    expected = committed(captured)
    first = plan(captured, slow_clang(tmp_path, llvm))
    time.sleep(0.5)  # the first holds the directory: its index command sleeps
    second = plan(captured, llvm.clang)
    _, said = second.communicate(timeout=60)
    assert first.poll() is None  # at once: not after the first one's index step
    _, first_said = first.communicate(timeout=60)
    assert first.returncode == 0, first_said
    assert second.returncode == 2
    assert said == (
        "dist-lto plan: error: out/index: busy: another `dist-lto plan` is planning into this"
        " index directory; run one at a time\n"
    )
    link_plan = "out/link-plan.json"  # it records the link command: the slow clang's path
    assert {k: v for k, v in committed(captured).items() if k != link_plan} == {
        k: v for k, v in expected.items() if k != link_plan
    }
    assert not list((captured / "out" / "index").glob(".index-step-*"))


def test_two_plans_of_one_meta_at_once_both_succeed_or_one_is_busy(
    captured: Path, llvm: Llvm
) -> None:
    expected = committed(captured)
    for _ in range(3):
        runs = [plan(captured, llvm.clang), plan(captured, llvm.clang)]
        results = [(run.wait(timeout=120), run.stderr.read() if run.stderr else "") for run in runs]
        assert any(status == 0 for status, _ in results), results
        for status, said in results:
            assert status == 0 or (status == 2 and ": busy: " in said), said
        assert committed(captured) == expected


def test_a_rerun_removes_the_staging_directories_of_killed_runs(captured: Path, llvm: Llvm) -> None:
    index = captured / "out" / "index"
    for name in (".index-step-killed1.tmp", ".index-step-killed2.tmp"):
        (index / name / "obj").mkdir(parents=True)
        (index / name / "obj" / "main.o.thinlto.bc").write_bytes(b"BC\xc0\xde half")
    expected = committed(captured)
    done = subprocess.run([*DIST_LTO, "plan", "meta.json", "--", llvm.clang, *LINK],
                          cwd=captured, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not list(index.glob(".index-step-*"))
    assert committed(captured) == {k: v for k, v in expected.items() if "/.index-step-" not in k}


def test_a_plan_that_finds_the_directory_busy_leaves_the_holders_index_files(
    captured: Path, llvm: Llvm
) -> None:
    expected = committed(captured)
    fd = os.open(captured / "out" / "index", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another plan holds it
        busy = plan(captured, llvm.clang)
        _, said = busy.communicate(timeout=60)
        assert busy.returncode == 2 and ": busy: " in said, said
        # Nothing of the holder's is gone: its index files stay where it wrote them.
        assert committed(captured) == expected
    finally:
        os.close(fd)
