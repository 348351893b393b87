"""Private TMPDIRs for the compilers a tool starts, and what a killed tool left of them.

A compiler that crashes writes its reproducer files (preprocessed source, run script)
in TMPDIR, and the opt worker's backends write their objects there before renaming them
into place: a build must leave none of that in the user's temporary directory. The
tool that makes such a directory removes it when it ends; one killed with SIGKILL
cannot, so each directory holds a file its owner keeps locked (`flock`) while it lives,
and the next tool to make a directory of the same kind removes those whose lock is
free. A lock, unlike a process id, is released by the kernel when its holder dies,
whichever PID namespace it ran in; the process id in the name decides only for a
directory caught while it was made or removed (no locked file in it yet or any more),
where misjudging a live owner in another namespace costs it its directory, not its
work. Standard library only.
"""

import os
import stat

from dist_lto.fsutil import remove_private_dir

OWNER = ".owner"
"""The file in a private directory that its owner holds locked."""

_held: dict[str, int] = {}
"""This process's private directories and the descriptors holding their locks."""


def private_tmpdir(prefix: str) -> str | None:
    """A new directory `$TMPDIR/PREFIX-PID-RANDOM` for compilers' TMPDIR, locked by this
    process until `remove_private_tmpdir`; directories of the same prefix whose owners
    died are removed first. None when it cannot be made (the compilers then get TMPDIR
    as it is). Made by hand: `tempfile` and `shutil` cost start-up imports that the
    distributor otherwise never needs."""
    import fcntl

    base = os.environ.get("TMPDIR") or "/tmp"
    remove_abandoned(base, prefix)
    name = f"{prefix}-{os.getpid()}-{os.urandom(6).hex()}"
    # Made under a hidden name and given its final name only once locked: under that
    # name, `remove_abandoned` never sees one of ours unlocked while it lives.
    making = os.path.join(base, "." + name)
    path = os.path.join(base, name)
    fd = -1
    try:
        os.mkdir(making, 0o700)
        fd = os.open(os.path.join(making, OWNER), _OWNER_FLAGS | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(making, path)
    except OSError:
        if fd >= 0:
            os.close(fd)
        remove_private_dir(making)
        return None
    _held[path] = fd
    return path


def remove_private_tmpdir(path: str) -> None:
    """Remove a directory `private_tmpdir` made and everything in it, then let go of its
    lock."""
    remove_private_dir(path)
    fd = _held.pop(path, None)
    if fd is not None:
        os.close(fd)


def remove_abandoned(base: str, prefix: str) -> int:
    """Remove the directories `private_tmpdir(prefix)` made in `base` whose owners are
    gone; how many. Gone: its owner file's lock is free or, where there is no owner file
    (a tool killed while it made or removed its directory, a moment each) or the
    directory is still under its hidden name, no process has the id its name holds.
    Only this user's, only directories named as that function names them, never one
    whose owner file is not a regular file; nothing followed through a symbolic link."""
    import fcntl

    removed = 0
    try:
        entries = list(os.scandir(base))
    except OSError:
        return 0
    uid = os.getuid()
    for entry in entries:
        hidden = entry.name.startswith(".")
        pid = _owner_pid(entry.name[hidden:], prefix)
        if pid is None or entry.path in _held:
            continue
        try:
            if (
                not entry.is_dir(follow_symlinks=False)
                or entry.stat(follow_symlinks=False).st_uid != uid
            ):
                continue
        except OSError:
            continue
        try:
            fd = os.open(os.path.join(entry.path, OWNER), _OWNER_FLAGS)
        except FileNotFoundError:
            fd = -1
        except OSError:
            continue
        try:
            if fd >= 0:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    continue
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # OSError: its owner lives
            if (fd < 0 or hidden) and _alive(pid):
                continue
            remove_private_dir(entry.path)
            removed += 1
        except OSError:
            continue
        finally:
            if fd >= 0:
                os.close(fd)
    return removed


def _alive(pid: int) -> bool:
    """Whether a process `pid` exists here (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


_OWNER_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
"""Never through a symbolic link, never waiting on a FIFO, never inherited by a compiler
(whose life would otherwise hold the lock)."""


def _owner_pid(name: str, prefix: str) -> int | None:
    """The process id in `name` when it is `PREFIX-PID-RANDOM` as `private_tmpdir(prefix)`
    makes it; None otherwise."""
    if not name.startswith(prefix + "-"):
        return None
    pid, _, random = name[len(prefix) + 1 :].partition("-")
    if pid.isdigit() and len(random) == 12 and all(c in "0123456789abcdef" for c in random):
        return int(pid)
    return None
