"""GNU make's jobserver: concurrent links under real `make -jK` run at most K backends.

Each backend runs through a counting compiler that appends `+` to a log before it
starts clang and `-` after clang has ended (also when it is stopped); a running count
over the log is an upper bound of the backends that ran at once.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from dist_lto.distribute.jobserver import IMPLICIT, JobServer, JobSlots, auth_from_makeflags
from support.links import DtltoLink
from support.tools import Llvm
from test_distribute_failures import captured

LINKS = 3
SLOTS = 2


def counting_compiler(directory: Path, real: str) -> tuple[Path, Path]:
    log = directory / "running.log"
    script = directory / "counting-clang"
    script.write_text(
        "#!/bin/sh\n"
        f"echo + >> '{log}'\n"
        # Stopped by the distributor: sh runs the trap at once in `wait`, else when clang ends.
        f"trap \"echo - >> '{log}'; exit 143\" TERM\n"
        'case "$*" in *"$FAIL_MODULE"*) if [ -n "$FAIL_MODULE" ]; then echo "-" >> '
        f"'{log}'; exit 7; fi;; esac\n"
        f"sleep ${{COMPILER_SLEEP:-0.2}} >/dev/null 2>&1 & wait $!\n"  # a trap ends `wait`
        f'{real} "$@"; status=$?\n'
        f"echo - >> '{log}'\n"
        "exit $status\n"
    )
    script.chmod(0o755)
    return script, log


def most_at_once(log: Path) -> int:
    running = most = 0
    for line in log.read_text().split():
        running += 1 if line == "+" else -1
        most = max(most, running)
    return most


def make_links(
    root: Path, small: DtltoLink, dist_lto: str, compiler: Path, *, recursive: bool
) -> Path:
    """A Makefile with LINKS independent links of the small program, each letting the
    distributor run 4 backends at once; `+` marks the recipe as one that is given make's
    jobserver descriptors (make 4.3 passes them to no other recipe)."""
    for name in ("main.o", "shout.o", "libm.a"):
        shutil.copy(small.root / name, root / name)
    link = [*small.link[:-2], f"-fthinlto-distributor={dist_lto}",
            "-Xthinlto-distributor=distribute", "-Xthinlto-distributor=--jobs=4",
            "-Xthinlto-distributor=--no-cache", "-Xthinlto-distributor=--quiet",
            f"-Wl,--thinlto-remote-compiler={compiler}"]  # fmt: skip
    targets = [f"prog{i}" for i in range(1, LINKS + 1)]
    prefix = "+" if recursive else ""
    makefile = root / "Makefile"
    makefile.write_text(
        f"all: {' '.join(targets)}\n"
        + "".join(f"{t}:\n\t{prefix}{shlex.join(link)} -o {t}\n" for t in targets)
    )
    return makefile


def run_make(
    root: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    make = shutil.which("make")
    if make is None:
        pytest.fail("GNU make is missing: run `bash .ci/setup`")
    environ = {k: v for k, v in (env or os.environ).items() if k not in ("MAKEFLAGS", "MFLAGS")}
    return subprocess.run([make, *args], cwd=root, capture_output=True, text=True, env=environ,
                          timeout=600)  # fmt: skip


@pytest.fixture(scope="module")
def dist_lto(dist_lto_cmd: list[str]) -> str:
    (exe,) = dist_lto_cmd
    return exe


def test_links_under_make_j2_never_run_more_than_two_backends_at_once(
    tmp_path: Path, small_dtlto: DtltoLink, llvm: Llvm, dist_lto: str
) -> None:
    compiler, log = counting_compiler(tmp_path, llvm.clang)
    make_links(tmp_path, small_dtlto, dist_lto, compiler, recursive=True)
    done = run_make(tmp_path, f"-j{SLOTS}")
    assert done.returncode == 0, done.stderr
    assert "INTERNAL" not in done.stderr  # make counts its tokens back at exit
    assert log.read_text().count("+") == 4 * LINKS
    assert most_at_once(log) <= SLOTS
    for i in range(1, LINKS + 1):
        run = subprocess.run([tmp_path / f"prog{i}", "x"], capture_output=True, text=True)
        assert (run.returncode, run.stdout) == (0, "4\n")


def test_without_the_jobserver_the_same_links_run_more_backends_than_slots(
    tmp_path: Path, small_dtlto: DtltoLink, llvm: Llvm, dist_lto: str
) -> None:
    """The control: make 4.3 closes the jobserver's descriptors for a recipe without `+`,
    so each distributor runs its own --jobs=4 and the count goes past make's slots."""
    compiler, log = counting_compiler(tmp_path, llvm.clang)
    make_links(tmp_path, small_dtlto, dist_lto, compiler, recursive=False)
    done = run_make(tmp_path, f"-j{SLOTS}")
    assert done.returncode == 0, done.stderr
    assert most_at_once(log) > SLOTS


def test_a_failing_link_under_make_returns_every_token(
    tmp_path: Path, small_dtlto: DtltoLink, llvm: Llvm, dist_lto: str
) -> None:
    compiler, log = counting_compiler(tmp_path, llvm.clang)
    make_links(tmp_path, small_dtlto, dist_lto, compiler, recursive=True)
    env = {**os.environ, "FAIL_MODULE": "twice.o"}
    done = run_make(tmp_path, "-k", f"-j{SLOTS}", env=env)
    assert done.returncode != 0
    assert "exited with status 7" in done.stderr
    assert "INTERNAL" not in done.stderr
    assert most_at_once(log) <= SLOTS


# ---------------------------------------------------------------------------------
# The fifo form (make 4.4), on a FIFO made here


def fifo_jobserver(tmp_path: Path, tokens: int) -> tuple[Path, int]:
    fifo = tmp_path / "jobserver.fifo"
    os.mkfifo(fifo)
    keeper = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # holds the tokens while we test
    os.write(keeper, b"+" * tokens)
    return fifo, keeper


def tokens_in(keeper: int) -> bytes:
    data = b""
    while True:
        try:
            chunk = os.read(keeper, 64)
        except BlockingIOError:
            return data
        if not chunk:
            return data
        data += chunk


def test_the_fifo_jobserver_bounds_the_backends_and_gets_its_tokens_back(
    tmp_path: Path, small_dtlto: DtltoLink, llvm: Llvm, dist_lto: str
) -> None:
    compiler, log = counting_compiler(tmp_path, llvm.clang)
    root, job_file = captured(tmp_path, small_dtlto, compiler)
    fifo, keeper = fifo_jobserver(tmp_path, 1)
    env = {**os.environ, "MAKEFLAGS": f"-j2 --jobserver-auth=fifo:{fifo}"}
    done = subprocess.run([dist_lto, "distribute", "--no-cache", "--jobs=4", "--verbose",
                           job_file.name], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    (settings,) = [line for line in done.stderr.splitlines() if " 4 jobs from " in line]
    assert settings.endswith(f", jobserver fifo:{fifo}")
    assert log.read_text().count("+") == 4
    assert most_at_once(log) <= 2
    assert tokens_in(keeper) == b"+"
    os.close(keeper)


def test_a_stopped_distribution_returns_its_tokens(
    tmp_path: Path, small_dtlto: DtltoLink, llvm: Llvm, dist_lto: str
) -> None:
    compiler, log = counting_compiler(tmp_path, llvm.clang)
    root, job_file = captured(tmp_path, small_dtlto, compiler)
    fifo, keeper = fifo_jobserver(tmp_path, 2)
    env = {**os.environ, "MAKEFLAGS": f"-j3 --jobserver-auth=fifo:{fifo}", "COMPILER_SLEEP": "60"}
    proc = subprocess.Popen([dist_lto, "distribute", "--no-cache", "--jobs=4", "--quiet",
                             job_file.name], cwd=root, env=env, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not log.exists() or log.read_text().count("+") < 3):
        time.sleep(0.02)
    assert log.read_text().count("+") == 3  # every slot in use: the implicit one and 2 tokens
    assert tokens_in(keeper) == b""
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert tokens_in(keeper) == b"++"
    os.close(keeper)
    with contextlib.suppress(ProcessLookupError):  # the compilers' `sleep`s, orphaned
        os.killpg(proc.pid, signal.SIGKILL)


def test_descriptors_that_are_not_open_leave_the_link_to_its_own_jobs(
    tmp_path: Path, small_dtlto: DtltoLink, llvm: Llvm, dist_lto: str
) -> None:
    root, job_file = captured(tmp_path, small_dtlto)
    env = {**os.environ, "MAKEFLAGS": "-j2 --jobserver-auth=97,98"}
    done = subprocess.run([dist_lto, "distribute", "--no-cache", job_file.name],
                          cwd=root, env=env, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (
        "dist-lto distribute: warning: no jobserver: jobserver descriptors 97,98 are not open"
        " here (with make 4.3 or older, mark the link's recipe with `+`)"
    ) in done.stderr.splitlines()[0]  # said without --verbose
    quiet = subprocess.run([dist_lto, "distribute", "--no-cache", "--quiet", job_file.name],
                           cwd=root, env=env, capture_output=True, text=True)  # fmt: skip
    assert (quiet.returncode, quiet.stderr) == (0, "")


@pytest.mark.parametrize(
    ("makeflags", "auth"),
    [("", None),
     ("-j4", None),
     (" -j4 --jobserver-auth=3,4", "3,4"),
     ("kj --jobserver-fds=5,6 -j", "5,6"),
     ("-j8 --jobserver-auth=fifo:/tmp/GM1 --jobserver-auth=fifo:/tmp/GM2", "fifo:/tmp/GM2"),
     ("-j2 --jobserver-auth=3,4 -- CFLAGS=--jobserver-auth=9,9", "3,4")],
)  # fmt: skip
def test_makeflags_name_the_jobserver_make_last_wrote(makeflags: str, auth: str | None) -> None:
    assert auth_from_makeflags(makeflags) == auth


def test_slots_are_the_implicit_one_then_tokens_and_close_returns_what_is_held() -> None:
    read_fd, write_fd = os.pipe2(os.O_NONBLOCK)
    os.write(write_fd, b"ab")
    slots = JobSlots(JobServer(read_fd, write_fd, "test"))
    assert slots.acquire(lambda: False) == IMPLICIT
    first, second = slots.acquire(lambda: False), slots.acquire(lambda: False)
    assert {first, second} == {ord("a"), ord("b")}
    slots.release(first)
    slots.release(IMPLICIT)
    assert slots.acquire(lambda: False) == IMPLICIT
    keeper = os.dup(read_fd)
    slots.close()  # returns `second`, still held, and closes the descriptors
    assert sorted(os.read(keeper, 8)) == sorted([first, second])
    os.close(keeper)


def test_a_jobserver_whose_make_has_gone_leaves_the_implicit_slot() -> None:
    read_fd, write_fd = os.pipe2(os.O_NONBLOCK)
    os.close(write_fd)
    spare_read, spare_write = os.pipe()
    slots = JobSlots(JobServer(read_fd, spare_write, "test"))
    assert slots.acquire(lambda: False) == IMPLICIT
    asked = []
    assert slots.acquire(lambda: asked.append(1) or len(asked) > 3) is None
    assert slots.server.gone
    slots.close()
    os.close(spare_read)
