"""The compilers' private TMPDIRs (`dist_lto/tmpdirs.py`): removed by their owner, and,
when the owner was killed before it could, by the next tool that makes one of the same
kind; never one whose owner lives, nor anything not made that way."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from dist_lto import tmpdirs

_OWNER = """
import os, signal, sys
from dist_lto.tmpdirs import private_tmpdir
path = private_tmpdir(sys.argv[1])
open(os.path.join(path, "left.o"), "w").write("partial")
os.makedirs(os.path.join(path, "index", "lib"))
open(os.path.join(path, "index", "lib", "a.o.thinlto.bc"), "w").write("partial")
print(path, flush=True)
if sys.argv[2] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
sys.stdin.read()  # lives until the test closes its stdin
"""


def owner(tmp_path: Path, prefix: str, how: str) -> tuple[subprocess.Popen[str], Path]:
    """A process that made a private directory under `tmp_path` and was killed
    (`how` = "kill") or lives on; the directory."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-c", _OWNER, prefix, how], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None
    path = Path(proc.stdout.readline().strip())
    if how == "kill":
        assert proc.wait() == -signal.SIGKILL
    return proc, path


@pytest.fixture
def tmpdir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return tmp_path


def test_a_private_tmpdir_is_its_owners_alone_and_goes_with_what_is_in_it(tmpdir_env: Path) -> None:
    path = tmpdirs.private_tmpdir("dist-lto")
    assert path is not None and Path(path).parent == tmpdir_env
    assert Path(path).stat().st_mode & 0o777 == 0o700
    Path(path, "crash-reproducer.c").write_text("int x;\n")
    tmpdirs.remove_private_tmpdir(path)
    assert list(tmpdir_env.iterdir()) == []


def test_a_directory_whose_owner_was_killed_goes_when_the_next_of_its_kind_is_made(
    tmpdir_env: Path,
) -> None:
    _, killed = owner(tmpdir_env, "dist-lto-worker", "kill")
    assert (killed / "left.o").exists() and (killed / "index" / "lib").is_dir()
    path = tmpdirs.private_tmpdir("dist-lto-worker")
    assert path is not None
    assert not killed.exists()
    assert [p.name for p in tmpdir_env.iterdir()] == [Path(path).name]
    tmpdirs.remove_private_tmpdir(path)


def test_a_living_owners_directory_stays(tmpdir_env: Path) -> None:
    proc, living = owner(tmpdir_env, "dist-lto", "live")
    try:
        assert tmpdirs.remove_abandoned(str(tmpdir_env), "dist-lto") == 0
        path = tmpdirs.private_tmpdir("dist-lto")
        assert path is not None and (living / "left.o").exists()
        tmpdirs.remove_private_tmpdir(path)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
    # Its owner gone without removing it, the next one does.
    assert tmpdirs.remove_abandoned(str(tmpdir_env), "dist-lto") == 1
    assert list(tmpdir_env.iterdir()) == []


def test_a_directory_caught_while_its_killed_owner_made_or_removed_it_goes_too(
    tmpdir_env: Path,
) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead = int(gone.stdout)  # a process id that no process has now
    making = tmpdir_env / f".dist-lto-{dead}-0123456789ab"  # killed before its lock
    making.mkdir()
    locked_making = tmpdir_env / f".dist-lto-{dead}-123456789abc"  # before its rename
    locked_making.mkdir()
    (locked_making / tmpdirs.OWNER).write_text("")
    removing = tmpdir_env / f"dist-lto-{dead}-23456789abcd"  # its owner file gone first
    removing.mkdir()
    (removing / "left.o").write_text("partial")
    # The same, of a process that lives (this one): left alone.
    mine = [tmpdir_env / f".dist-lto-{os.getpid()}-3456789abcde",
            tmpdir_env / f"dist-lto-{os.getpid()}-456789abcdef"]  # fmt: skip
    for path in mine:
        path.mkdir()
    assert tmpdirs.remove_abandoned(str(tmpdir_env), "dist-lto") == 3
    assert sorted(tmpdir_env.iterdir()) == sorted(mine)


def test_only_directories_made_for_that_prefix_are_looked_at(tmpdir_env: Path) -> None:
    _, worker = owner(tmpdir_env, "dist-lto-worker", "kill")
    _, distributor = owner(tmpdir_env, "dist-lto", "kill")
    assert tmpdirs.remove_abandoned(str(tmpdir_env), "dist-lto") == 1
    assert worker.exists() and not distributor.exists()


def test_what_was_not_made_by_a_private_tmpdir_stays(tmpdir_env: Path) -> None:
    _, abandoned = owner(tmpdir_env, "dist-lto", "kill")
    # Named like one but without its owner's file, or that file not a regular one.
    no_owner = tmpdir_env / "dist-lto-1-0123456789ab"
    no_owner.mkdir()
    fifo_owner = tmpdir_env / "dist-lto-2-0123456789ab"
    fifo_owner.mkdir()
    os.mkfifo(fifo_owner / tmpdirs.OWNER)
    # A symbolic link named like one, to an abandoned one elsewhere.
    elsewhere = tmpdir_env / "elsewhere"
    elsewhere.mkdir()
    abandoned.rename(elsewhere / abandoned.name)
    link = tmpdir_env / abandoned.name
    link.symlink_to(elsewhere / abandoned.name)
    # Named otherwise.
    other = tmpdir_env / "dist-lto-x-0123456789ab"
    other.mkdir()
    (other / tmpdirs.OWNER).write_text("")
    assert tmpdirs.remove_abandoned(str(tmpdir_env), "dist-lto") == 0
    for path in (no_owner, fifo_owner / tmpdirs.OWNER, elsewhere / abandoned.name / "left.o",
                 link, other):  # fmt: skip
        assert os.path.lexists(path), path


def test_no_directory_is_made_where_none_can_be(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path / "missing"))
    assert tmpdirs.private_tmpdir("dist-lto") is None
    assert list(tmp_path.iterdir()) == []
