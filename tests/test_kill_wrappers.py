"""`plan`, `link` and `upstream plan` stopped at random moments while their compiler or
linker is a wrapper script that starts a child of its own and runs the real tool.

Each run is stopped after a delay drawn from a seeded generator over the length of an
uninterrupted run, by one of: SIGTERM or SIGINT to the tool alone, SIGKILL to the tool
alone (only its guard can answer), SIGKILL to its process group (a build system stopping
an action). After each stop: every process the wrapper ran is gone, every file the run
left that the uninterrupted run also writes holds that run's bytes, nothing else but
dot-named temporaries appears (none at all after SIGTERM or SIGINT, which remove their
scratch files), and a rerun reproduces the uninterrupted run exactly.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.links import upstream_plan_link
from support.processes import alive, session, wait_until
from support.tools import REPO, Llvm

pytestmark = pytest.mark.slow  # real links, many times over

DIST_LTO = [sys.executable, "-m", "dist_lto"]
CAPTURED = REPO / "examples" / "captured"
LINK = ["-fuse-ld=lld", "-O2", "-o", "app"]
STOPS = 8
"""Stops per tool (seeded: the same delays and signals every run)."""
WRAPPER = """\
#!/bin/sh
# Starts a child of its own, then runs the real compiler; cleans its child up itself
# only when the compiler finishes.
sleep 300 &
echo $! >> {pids}
echo $$ >> {pids}
{clang} "$@"
status=$?
kill $! 2>/dev/null
exit $status
"""
HOW = ("TERM", "INT", "KILL", "KILL-group")


def wrapper(directory: Path, clang: str) -> Path:
    script = directory / "clang-wrapper"
    script.write_text(WRAPPER.format(pids=directory / "wrapper.pids", clang=clang))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and not p.is_symlink()}  # fmt: skip


def setups(llvm: Llvm) -> dict[str, Callable[[Path, Path], list[str]]]:
    """Tool -> (work directory, wrapper) -> its command line, its inputs set up."""

    def plan(work: Path, wrap: Path) -> list[str]:
        shutil.copytree(CAPTURED, work)
        shutil.rmtree(work / "out")
        return ["plan", "meta.json", "--", str(wrap), *LINK]

    def link(work: Path, wrap: Path) -> list[str]:
        shutil.copytree(CAPTURED, work)
        return ["link", "--no-cache", "--jobs=2", f"--compiler={wrap}", "meta.json", "--",
                llvm.clang, *LINK]  # fmt: skip

    def upstream(work: Path, wrap: Path) -> list[str]:
        work.mkdir()
        return upstream_plan_link(work, llvm, str(wrap))

    return {"plan": plan, "link": link, "upstream plan": upstream}


def stop_after(argv: list[str], work: Path, delay: float, how: str, env: dict[str, str]) -> int:
    proc = subprocess.Popen([*DIST_LTO, *argv], cwd=work, start_new_session=True, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        if how == "KILL-group":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            os.kill(proc.pid, getattr(signal, f"SIG{how}"))
        proc.wait(timeout=60)
    wait_until("the tool's session empty", lambda: not session(proc.pid), 20)
    return proc.returncode


@pytest.mark.parametrize("tool", ["plan", "link", "upstream plan"])
def test_stopped_at_random_moments_leaves_no_process_no_partial_output_and_reruns(
    tool: str, tmp_path: Path, llvm: Llvm
) -> None:
    setup = setups(llvm)[tool]
    wrap = wrapper(tmp_path, llvm.clang)
    reference_dir = tmp_path / "reference"
    argv = setup(reference_dir, wrap)
    before = files(reference_dir)
    started = time.monotonic()
    done = subprocess.run([*DIST_LTO, *argv], cwd=reference_dir, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    length = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    reference = files(reference_dir)
    rng = random.Random(f"stop {tool}")
    # The tools' own private directories (the compilers' TMPDIR, the index step's
    # scratch outside Buck2) go there: a rerun removes what a killed run left.
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    for n in range(STOPS):
        work = tmp_path / f"run{n}"
        (tmp_path / "wrapper.pids").unlink(missing_ok=True)
        assert setup(work, wrap) == argv
        delay, how = rng.uniform(0.05, length), HOW[n % len(HOW)]
        status = stop_after(argv, work, delay, how, env)
        pids = [int(x) for x in (tmp_path / "wrapper.pids").read_text().split()] if (
            tmp_path / "wrapper.pids").exists() else []  # fmt: skip
        wait_until(f"stop {n} ({how} at {delay:.2f} s): the wrappers and their children gone",
                   lambda pids=pids: not any(alive(p) for p in pids), 20)  # fmt: skip
        left = files(work)
        for path, data in left.items():
            if any(part.startswith(".") and ".tmp" in part for part in Path(path).parts):
                assert how.startswith("KILL") or status == 0, f"stop {n} ({how}): left {path}"
                continue
            assert path in reference, f"stop {n} ({how} at {delay:.2f} s): {path} appeared"
            assert data in (reference[path], before.get(path)), (
                f"stop {n} ({how} at {delay:.2f} s): {path} is partial"
            )
        if not how.startswith("KILL") and status != 0:
            assert not [p for p in work.rglob(".index-step-*")], f"stop {n}: staging left"
        for path in [p for p in work.rglob(".*") if p.is_dir() and ".tmp-" in p.name]:
            shutil.rmtree(path)  # a killed backend's private directory: the build's to clear
        rerun = subprocess.run([*DIST_LTO, *argv], cwd=work, capture_output=True, text=True,
                               timeout=300, env=env)  # fmt: skip
        assert rerun.returncode == 0, f"stop {n} ({how}): rerun: {rerun.stderr}"
        assert list(tmpdir.iterdir()) == [], f"stop {n} ({how} at {delay:.2f} s): TMPDIR"
        again = {k: v for k, v in files(work).items()
                 if not os.path.basename(k).startswith(".")}  # fmt: skip
        assert again == reference, f"stop {n} ({how} at {delay:.2f} s): the rerun differs"
        with contextlib.suppress(OSError):
            shutil.rmtree(work)
