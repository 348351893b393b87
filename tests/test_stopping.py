"""A stopped tool stops everything it started: `plan`, `link`, `distribute` and `upstream
plan` run their compiler or linker through a wrapper script whose children outlive it
unless their process group is stopped (one of them ignores every stop signal but
SIGKILL). The tool is stopped by SIGTERM or SIGINT sent to it alone, by the death of
the process that started it, or by SIGKILL (which only the guard can answer): every
process the wrapper ran goes, the tool's scratch files go, and nothing appears in its
directory after it has exited.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from dist_lto.distribute import cache_key
from dist_lto.errors import BadInput, DistLtoError
from dist_lto.process import children
from support.links import DtltoLink, upstream_plan_link
from support.processes import Wrapper, alive, session, wait_until
from support.tools import REPO, Llvm

DIST_LTO = [sys.executable, "-m", "dist_lto"]
CAPTURED = REPO / "examples" / "captured"


def kill_everything(proc: subprocess.Popen[bytes], wrapper: Wrapper) -> None:
    """After a test, whatever it asserted: the tool's group and every process the wrapper
    started are gone."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in wrapper.pids():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def tree(root: Path) -> dict[str, float]:
    """Every path below `root` with its modification time."""
    return {str(p.relative_to(root)): p.lstat().st_mtime for p in root.rglob("*")}


def command(kind: str, root: Path, wrapper: Wrapper, llvm: Llvm, tmp_path: Path) -> list[str]:
    """The `kind` command with `wrapper` as its compiler or linker, run in `root`."""
    if kind == "plan":
        return [*DIST_LTO, "plan", "meta.json", "--", str(wrapper.path), "-fuse-ld=lld", "-O2"]
    if kind == "link":
        # The backends' compiler is the wrapper; COMMAND is the one the plans were made from.
        return [*DIST_LTO, "link", "--no-cache", f"--compiler={wrapper.path}", "meta.json", "--",
                llvm.clang, "-fuse-ld=lld", "-O2", "-o", "app"]  # fmt: skip
    if kind == "upstream plan":
        return [*DIST_LTO, *upstream_plan_link(root, llvm, str(wrapper.path))]
    raise AssertionError(kind)


@pytest.fixture(params=["plan", "link", "upstream plan"])
def stoppable(
    request: pytest.FixtureRequest, tmp_path: Path, llvm: Llvm
) -> tuple[str, Path, Wrapper, list[str]]:
    """(kind, its directory, the wrapper, the command line)."""
    kind = request.param
    root = tmp_path / "work"
    if kind == "upstream plan":
        root.mkdir()
    else:
        shutil.copytree(CAPTURED, root)
    wrapper = Wrapper(tmp_path)
    return kind, root, wrapper, command(kind, root, wrapper, llvm, tmp_path)


def start(argv: list[str], root: Path, wrapper: Wrapper) -> subprocess.Popen[bytes]:
    """`argv` in a session of its own, once the wrapper and its children run; scratch
    directories (`upstream plan`'s) under `wrapper`'s directory, in `scratch`."""
    env = {**os.environ, "BUCK_SCRATCH_PATH": str(scratch(wrapper))}
    proc = subprocess.Popen(argv, cwd=root, start_new_session=True, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=env)  # fmt: skip
    wait_until("the wrapper's children running", wrapper.ready.exists, 60)
    return proc


def scratch(wrapper: Wrapper) -> Path:
    return wrapper.path.parent / "scratch"


def settled(root: Path, before: dict[str, float]) -> None:
    """Nothing in `root` changes over half a second: no output appears after exit."""
    time.sleep(0.5)
    assert tree(root) == before


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_a_stop_signal_to_the_tool_alone_stops_the_wrappers_children_and_leaves_no_scratch(
    stoppable: tuple[str, Path, Wrapper, list[str]], signum: int
) -> None:
    kind, root, wrapper, argv = stoppable
    before = tree(root)
    proc = start(argv, root, wrapper)
    try:
        os.kill(proc.pid, signum)
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 128 + signum, stderr
        lines = stderr.decode().splitlines()  # `link` adds its summary line
        assert lines[0].startswith(f"dist-lto {kind.split()[0]}: error: stopped by signal {signum}")
        assert len(lines) == 1 + (kind == "link"), lines
        wait_until("the wrapper and its children gone", wrapper.all_gone, 10)
        wait_until("the tool's session empty", lambda: not session(proc.pid), 10)
    finally:
        kill_everything(proc, wrapper)
    after = tree(root)
    added = sorted(set(after) - set(before))
    # `link` creates its output directories before its first backend; nothing else.
    assert all(Path(root, p).is_dir() for p in added), added
    assert not any(scratch(wrapper).glob("*"))
    settled(root, after)


def test_a_tool_whose_parent_dies_stops_the_wrappers_children(
    stoppable: tuple[str, Path, Wrapper, list[str]],
) -> None:
    kind, root, wrapper, argv = stoppable
    before = tree(root)
    # A parent that starts the tool and waits; SIGKILLed alone, it leaves the tool reparented.
    parent = start(["sh", "-c", '"$@" & wait', "sh", *argv], root, wrapper)
    try:
        (tool,) = [p for p, (pp, _) in session(parent.pid).items() if pp == parent.pid]
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        wait_until(f"{kind} gone", lambda: not alive(tool), 20)
        wait_until("the wrapper and its children gone", wrapper.all_gone, 10)
        wait_until("the session empty", lambda: not session(parent.pid), 10)
    finally:
        kill_everything(parent, wrapper)
    stderr = parent.stderr.read().decode() if parent.stderr else ""
    assert f"error: stopped: the process that started it (pid {parent.pid}) has gone" in stderr
    after = tree(root)
    assert all(Path(root, p).is_dir() for p in sorted(set(after) - set(before)))
    settled(root, after)


@pytest.mark.parametrize("group", [False, True], ids=["tool", "its-group"])
def test_a_sigkilled_tool_leaves_no_child_of_its_wrapper_running(
    stoppable: tuple[str, Path, Wrapper, list[str]], group: bool
) -> None:
    """SIGKILL to the tool, or to its process group as a build system stops an action:
    nothing of the tool can act, so its guard kills the groups of its children."""
    _, root, wrapper, argv = stoppable
    proc = start(argv, root, wrapper)
    try:
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        wait_until("the wrapper and its children gone", wrapper.all_gone, 10)
        wait_until("the session empty", lambda: not session(proc.pid), 10)
    finally:
        kill_everything(proc, wrapper)


def test_a_sigkilled_distributor_stops_its_compilers_wrappers_and_their_children(
    small_dtlto: DtltoLink, tmp_path: Path
) -> None:
    """Compilers started directly (a wrapper cannot be fork-served) are stopped by the
    guard; fork-served ones by their fork server (tests/test_forkserver.py)."""
    import json

    work = tmp_path / "link"
    shutil.copytree(small_dtlto.root, work)
    wrapper = Wrapper(tmp_path)
    job_file = work / small_dtlto.job_file
    jobs = json.loads(job_file.read_text())
    jobs["common"]["args"][0] = str(wrapper.path)
    job_file.write_text(json.dumps(jobs))
    argv = [*DIST_LTO, "distribute", "--jobs=2", "--no-cache", small_dtlto.job_file]
    proc = start(argv, work, wrapper)
    try:
        wait_until("both jobs' wrappers running", lambda: len(wrapper.pids()) >= 6, 30)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        wait_until("every wrapper and its children gone", wrapper.all_gone, 10)
        wait_until("the session empty", lambda: not session(proc.pid), 10)
    finally:
        kill_everything(proc, wrapper)


def test_a_compiler_whose_version_query_hangs_is_stopped_with_its_children_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The result cache asks `clang --version` once per compiler; one that never answers
    must not hang the link: the query times out, its group is killed (the wrapper's
    children too), and the compiler is named as bad input."""
    wrapper = Wrapper(tmp_path, "clang")
    monkeypatch.setattr(cache_key, "VERSION_SECONDS", 1.0)
    started = time.monotonic()
    with pytest.raises(BadInput) as bad:
        cache_key.compiler_identity(str(wrapper.path), str(tmp_path / "cache"))
    assert time.monotonic() - started < 10
    assert bad.value.message == (
        f"{wrapper.path}: cannot run the compiler: `--version` gave no answer in 1 s"
    )
    wait_until("the wrapper and its children gone", wrapper.all_gone, 5)


def test_run_feeds_stdin_and_captures_stdout_and_stderr_apart(tmp_path: Path) -> None:
    """What a credential helper needs: a request on stdin, the answer on stdout, the
    complaint on stderr, each whole (larger than a pipe holds)."""
    big = b"x" * (1 << 20)
    done = children.run(
        ["sh", "-c", "cat; printf 'said\\n' >&2; head -c 300000 /dev/zero | tr '\\0' e >&2"],
        stdin=big,
        stdout=children.CAPTURE,
    )
    assert done.status == 0
    assert done.stdout == big
    assert done.stderr == b"said\n" + b"e" * 300000


def test_a_program_that_cannot_start_is_one_line_naming_it(tmp_path: Path) -> None:
    with pytest.raises(children.CannotRun) as failed:
        children.run([str(tmp_path / "no-such-program")])
    program = tmp_path / "no-such-program"
    assert failed.value.message == f"{program}: cannot run: No such file or directory"


def test_a_sigkilled_distributors_fork_served_compilers_stop(
    small_dtlto: DtltoLink, tmp_path: Path
) -> None:
    """Every clang, forked from a fork server, blocks reading a sample profile that is a
    FIFO nobody writes (left out of the job's inputs, which refuse a FIFO); the
    distributor is SIGKILLed: each server sees its client's socket close, kills its job
    and leaves."""
    import json

    work = tmp_path / "link"
    shutil.copytree(small_dtlto.root, work)
    os.mkfifo(work / "blocks.prof")
    job_file = work / small_dtlto.job_file
    jobs = json.loads(job_file.read_text())
    jobs["common"]["args"].append("-fprofile-sample-use=blocks.prof")
    job_file.write_text(json.dumps(jobs))
    proc = subprocess.Popen([*DIST_LTO, "distribute", "--no-cache", "--jobs=2",
                             small_dtlto.job_file], cwd=work, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip

    def forked_jobs() -> list[int]:
        procs = session(proc.pid)
        servers = {p for p, (pp, name) in procs.items() if pp == proc.pid and name == "clang"}
        return [p for p, (pp, _) in procs.items() if pp in servers]

    try:
        wait_until("two compilers forked from fork servers", lambda: len(forked_jobs()) == 2, 60)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        wait_until("every server and compiler gone", lambda: not session(proc.pid), 10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


DRIVER_AND_LINKER = """\
#!/bin/sh
# Leaves at once on SIGTERM, as a compiler driver does; its child, like the linker the
# driver started, removes its temporary output on SIGTERM before it exits.
sh -c 'trap "sleep 0.3; rm -f out.tmp; exit 143" TERM; : > out.tmp; : > ready
       while :; do sleep 0.05; done' &
wait
"""


def test_a_stopped_childs_group_may_clean_up_after_it_before_sigkill(tmp_path: Path) -> None:
    driver = tmp_path / "driver"
    driver.write_text(DRIVER_AND_LINKER)
    driver.chmod(0o755)
    code = "from dist_lto.process import children; children.run(['./driver'])"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, start_new_session=True,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_until("the linker's temporary output", (tmp_path / "ready").exists, 30)
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        assert not (tmp_path / "out.tmp").exists()  # it was not killed while removing it
        wait_until("the tool's session empty", lambda: not session(proc.pid), 10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_stop_during_a_trees_removal_lets_the_removal_finish_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop signal raises StopRequested wherever the tool is; when that is inside the
    removal of a staging directory, the directory still goes before the stop goes on."""
    from dist_lto.fsutil import remove_tree

    tree = tmp_path / ".index-step-x.tmp"
    (tree / "sub").mkdir(parents=True)
    for name in ("index.list", "a.thinlto.bc", "sub/b.thinlto.bc"):
        (tree / name).write_bytes(b"x")
    real = shutil.rmtree
    calls = []

    def stopped_midway(path: str, ignore_errors: bool = False) -> None:
        calls.append(path)
        if len(calls) == 1:  # the first removal: one file gone, then the signal
            os.unlink(tree / "a.thinlto.bc")
            raise children.StopRequested(signal.SIGINT)
        real(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(shutil, "rmtree", stopped_midway)
    with pytest.raises(children.StopRequested):
        remove_tree(str(tree))
    assert not tree.exists()


def test_a_stop_signal_inside_a_held_block_is_raised_as_the_block_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(children, "_stopping", 0)  # put back after the test
    previous = children.catch_stop_signals()
    steps = []
    try:
        with pytest.raises(children.StopRequested) as stop:
            with children.StopsHeld():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # the handler has run by now, and held the stop
                steps.append("the block went on")
            steps.append("after the block")
    finally:
        children.restore_handlers(previous)
    assert steps == ["the block went on"]
    assert stop.value.signum == signal.SIGINT


def test_a_stop_signal_as_a_child_is_spawned_stops_that_child(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stop arrives, through another thread, between the child's start and `run`
    knowing its pid: `run` still stops it and fails with 128+N."""
    monkeypatch.setattr(children, "_stopping", 0)  # put back after the test
    real = children.spawn
    started = []

    def spawn_then_stop(*args: object, **kwargs: object) -> int:
        pid = real(*args, **kwargs)  # type: ignore[arg-type]
        started.append(pid)
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # the handler runs in here, not after
            pass
        return pid

    monkeypatch.setattr(children, "spawn", spawn_then_stop)
    idle = threading.Event()  # a thread that leaves stop signals unblocked
    helper = threading.Thread(target=idle.wait, daemon=True)
    helper.start()
    previous = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(DistLtoError) as stopped:
            children.run(["sleep", "30"])
    finally:
        idle.set()
        signal.signal(signal.SIGTERM, previous)
    assert stopped.value.status == 128 + signal.SIGTERM
    wait_until("the spawned child gone", lambda: not alive(started[0]), 10)
