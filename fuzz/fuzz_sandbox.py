"""Where a fuzz input runs: a fresh directory, a snapshot of it, a watchdog, a jail.

Each input runs in its own directory tree, the tool's working directory nested a
few levels deep so that paths climbing with `..` still land inside the tree, which
is snapshotted (type, size, mtime, inode of every entry) before and after: a file
created, changed or removed where the input declared no output is an escape.

Writes beyond the tree are caught by a private mount namespace in which the whole
file system is read-only except the campaign's work directory: such a write fails
with EROFS, so "Read-only file system" in a tool's output is an escape too. Setting
that up needs CAP_SYS_ADMIN (root on a normal Linux machine); without it the
snapshot still checks the tree, and the report says the jail is off.

Tools run in-process in a forked child (so their signal handlers, cwd, `gc` state
and exit calls touch nothing of ours) or as real subprocesses, always in a process
group of their own that the watchdog kills whole when an input hangs.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import select
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass

_CLONE_NEWNS = 0x00020000
_MS_RDONLY = 1
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18

TRACEBACK = "Traceback (most recent call last)"
INTERNAL = "internal error:"
READ_ONLY = "Read-only file system"


def jail(writable: str) -> str | None:
    """Make every file system read-only for this process and its children, except
    `writable` (a directory). Returns None on success, else why it could not."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_void_p]

    def mount(src: str | None, target: str, flags: int) -> None:
        if libc.mount(src and os.fsencode(src), os.fsencode(target), None, flags, None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mount {target}: {os.strerror(err)}")

    if libc.unshare(_CLONE_NEWNS) != 0:
        return f"unshare(CLONE_NEWNS): {os.strerror(ctypes.get_errno())}"
    try:
        # Private first: nothing done here may propagate to the host's mounts.
        mount(None, "/", _MS_REC | _MS_PRIVATE)
        mount(writable, writable, _MS_BIND | _MS_REC)
        mount(None, "/", _MS_REMOUNT | _MS_BIND | _MS_RDONLY)
    except OSError as err:
        return str(err)
    return None


Entry = tuple[str, int, int, int]
"""(kind, size, mtime_ns, inode) of one path; kind is f(ile), d(ir), l(ink) or o(ther)."""


def snapshot(root: str) -> dict[str, Entry]:
    """Every path under `root` (relative to it) with what tells a change apart."""
    found: dict[str, Entry] = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(top, name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            except OSError:  # deeper than PATH_MAX, say: still a change to see
                found[os.path.relpath(path, root)] = ("?", 0, 0, 0)
                continue
            kind = (
                "l"
                if os.path.islink(path)
                else "d"
                if os.path.isdir(path)
                else "f"
                if os.path.isfile(path)
                else "o"
            )
            # A directory's mtime changes whenever an entry is added: compare its kind only;
            # a device or FIFO written through is the same node: its kind, number and inode.
            if kind == "d":
                entry = (kind, 0, 0, 0)
            elif kind == "o":
                entry = (kind, st.st_rdev, 0, st.st_ino)
            else:
                entry = (kind, st.st_size, st.st_mtime_ns, st.st_ino)
            found[os.path.relpath(path, root)] = entry
    return found


@dataclass
class Changes:
    created: list[str]
    modified: list[str]
    removed: list[str]


def changes(before: dict[str, Entry], after: dict[str, Entry]) -> Changes:
    return Changes(
        created=sorted(set(after) - set(before)),
        modified=sorted(p for p in before.keys() & after.keys() if before[p] != after[p]),
        removed=sorted(set(before) - set(after)),
    )


def under(path: str, roots: list[str]) -> bool:
    """Whether normalised relative `path` is one of `roots` or inside one."""
    return any(path == r or path.startswith(r + "/") for r in roots)


def ancestor_of(path: str, roots: list[str]) -> bool:
    """Whether `path` is a directory on the way to one of `roots`."""
    return any(r.startswith(path + "/") for r in roots)


@dataclass
class Outcome:
    status: int
    """Exit status (128+N for death by signal N); -1 when the watchdog killed it."""
    output: str
    """stdout and stderr together."""
    hung: bool


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _wait(pid: int, timeout: float) -> tuple[int, bool]:
    """Wait for child `pid` at most `timeout` seconds, then kill its process group.

    The group is killed before the child is reaped, while its (zombie) leader still
    holds the group's id, so the signal cannot reach anybody else's processes."""
    fd = os.pidfd_open(pid)
    try:
        ready = select.poll()
        ready.register(fd, select.POLLIN)
        hung = not ready.poll(timeout * 1000)
    finally:
        os.close(fd)
    _kill_group(pid)  # a hung tool, or anything a finished one left running
    _, wait_status = os.waitpid(pid, 0)
    if hung:
        return -1, True
    code = os.waitstatus_to_exitcode(wait_status)
    return (128 - code if code < 0 else code), False


def run_in_process(
    call: Callable[[list[str]], int],
    argv: list[str],
    cwd: str,
    env: dict[str, str],
    log: str,
    timeout: float,
) -> Outcome:
    """Run `call(argv)` in a forked child in `cwd` with `env`, output to file `log`."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        status = 70
        try:
            os.setpgid(0, 0)
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
            # Fresh streams on the new descriptors: the inherited ones may write elsewhere
            # (pytest's capture replaces sys.stdout and sys.stderr with its own files).
            sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
            sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(env)
            sys.argv = ["dist-lto", *argv]
            status = call(argv)
        except SystemExit as exit_:
            status = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)
        except BaseException:
            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(status)
    status, hung = _wait(pid, timeout)
    with open(log, "rb") as f:
        output = f.read().decode(errors="replace")
    return Outcome(status, output, hung)


def run_subprocess(argv: list[str], cwd: str, env: dict[str, str], timeout: float) -> Outcome:
    """Run `argv` as a real process in its own session, killed whole after `timeout`."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        hung = False
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, _ = proc.communicate()
        hung = True
    code = proc.returncode
    return Outcome(
        -1 if hung else (128 - code if code < 0 else code), out.decode(errors="replace"), hung
    )
