"""A watcher that outlives a SIGKILLed tool just long enough to stop its children.

Every program a tool starts leads a process group of its own (`children.spawn`), so
that a stop reaches a wrapper's children. The cost: a build system that stops an action
by SIGKILL to the tool, or to the tool's own process group, reaches none of them, and
nothing in the tool runs to pass it on. So `plan`, `link`, `distribute` and `upstream
plan` fork a guard first: a process in a process group of its own that holds the read
end of a pipe whose write end only the tool holds, and its children for a moment. Each
child writes `+PID` on it before it becomes the program (`children.spawn`'s shim), so
no SIGKILL can fall between a start and the guard's knowing; the tool writes `-PID`
before it reaps a leader. When the pipe reaches its end (the tool has exited, however it
died), the guard sends SIGKILL to every group still listed and exits. Stop signals
meant for the tool's group do not stop the guard. A tool that ends on its own closes
the pipe and waits for the guard, so nothing it started outlives it.
"""

import _signal
import contextlib
import os
from collections.abc import Iterator

from dist_lto.process import children

_pid = -1
"""The guard's pid while it runs."""


def start() -> None:
    """Fork the guard (once per process; for a command's edge, before any thread)."""
    if children._guard_fd >= 0:
        return
    read_end, write_end = os.pipe()  # not inherited by programs we start (O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # the guard: never returns
        try:
            _watch(read_end, write_end)
        finally:
            os._exit(0)
    os.close(read_end)
    children._guard_fd = write_end
    global _pid
    _pid = pid


def stop() -> None:
    """End the guard and wait for it: the tool is about to exit, its children reaped."""
    global _pid
    if children._guard_fd < 0:
        return
    os.close(children._guard_fd)
    children._guard_fd = -1
    with contextlib.suppress(ChildProcessError):
        os.waitpid(_pid, 0)
    _pid = -1


def _watch(read_end: int, write_end: int) -> None:
    os.close(write_end)
    os.setpgid(0, 0)  # a SIGKILL to the tool's group must leave the guard to act
    for sig in (*children.STOP_SIGNALS, _signal.SIGQUIT):
        _signal.signal(sig, _signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)  # hold none of the tool's streams open: a reader waits for their end
    os.closerange(3, read_end)
    os.closerange(read_end + 1, 1 << 20)
    groups: set[int] = set()
    pending = b""
    while chunk := os.read(read_end, 4096):
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            if line[:1] == b"+":
                groups.add(int(line[1:]))
            elif line[:1] == b"-":
                groups.discard(int(line[1:]))
    for pid in groups:
        with contextlib.suppress(OSError):  # its leader may be gone, the group not
            os.killpg(pid, _signal.SIGKILL)


@contextlib.contextmanager
def supervised() -> Iterator[None]:
    """The edge of a command that starts programs (`plan`, `link`, `distribute`,
    `upstream plan`): its children are stopped with it however it ends. Starts the guard
    and the parent watcher (`children.stop_with_parent`), and turns a stop signal
    anywhere in the command into StopRequested, so every `finally` runs (scratch files
    go, outputs of a failed run are removed), and then into the failure 128+N."""
    start()
    children.stop_with_parent()
    previous = children.catch_stop_signals()
    try:
        yield
    except children.StopRequested as stopping:
        raise children.stopped(stopping.signum) from None
    finally:
        children.restore_handlers(previous)
        stop()
