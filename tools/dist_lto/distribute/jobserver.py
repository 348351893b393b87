"""A GNU make jobserver client: concurrent links share the build's job slots.

`make -jK` hands out K slots: one implicit slot per recipe it starts, the other K-1 as
one-byte tokens in a pipe or a named FIFO, which it advertises to its recipes in
`MAKEFLAGS` as `--jobserver-auth=fifo:PATH` (make 4.4 and later) or
`--jobserver-auth=R,W` (descriptors of an inherited pipe; `--jobserver-fds=R,W` in
make before 4.2). A link is one recipe, so its distributor owns one implicit slot and
reads a token for every further backend it runs at once, writing the same byte back
when that backend ends, so that N links under `make -jK` never run more than K
backends together. Tokens are returned on every path out: a job's end, its failure, a
stop signal (the workers return theirs as they leave) and `JobSlots.close`.

make up to 4.3 passes the pipe's descriptors only to recipes it treats as recursive
(a `+` prefix, or `$(MAKE)` in the line); elsewhere `MAKEFLAGS` names descriptors that
are closed, and the distributor then runs `--jobs` backends as it would without make.

Standard library only, and no `selectors`: the distributor's start-up imports are
pinned (`tests/test_distribute_cli.py`).
"""

import os
import select
import stat
import threading
import time

from dist_lto import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

IMPLICIT = -1
"""The slot make gave the link itself (not a byte from the jobserver)."""

POLL_MS = 50
"""How long a worker waits on the jobserver before it looks again at the implicit slot
and at whether the distribution is over."""


class JobServer:
    """An open jobserver: `fd` to read tokens from (non-blocking, a file description of
    our own so that make's own flags on the shared one stay as they are) and `write_fd`
    to return them."""

    def __init__(self, fd: int, write_fd: int, description: str) -> None:
        self.fd = fd
        self.write_fd = write_fd
        self.description = description
        self.gone = False
        """The pipe has no writer left (make has gone): no token will come, and a poll
        would return at once, so waiting sleeps instead."""

    def take(self) -> int | None:
        """A token's byte, or None when none is free right now."""
        try:
            data = os.read(self.fd, 1)
        except (BlockingIOError, InterruptedError):
            return None
        if not data:
            self.gone = True
            return None
        return data[0]

    def wait(self, milliseconds: int) -> None:
        if self.gone:
            time.sleep(milliseconds / 1000)
            return
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        try:  # noqa: SIM105 (contextlib: an import the distributor does not pay)
            poller.poll(milliseconds)
        except InterruptedError:
            pass

    def give(self, token: int) -> None:
        """Write `token` back. Retried on EAGAIN: the pipe holds at most make's own
        tokens, so there is always room for the ones taken from it."""
        while True:
            try:
                os.write(self.write_fd, bytes((token,)))
                return
            except (BlockingIOError, InterruptedError):
                self.wait_writable()

    def wait_writable(self) -> None:
        poller = select.poll()
        poller.register(self.write_fd, select.POLLOUT)
        poller.poll(POLL_MS)

    def close(self) -> None:
        for fd in {self.fd, self.write_fd}:
            try:  # noqa: SIM105
                os.close(fd)
            except OSError:
                pass


def auth_from_makeflags(makeflags: str) -> str | None:
    """The value of the last `--jobserver-auth=` (or `--jobserver-fds=`) in `makeflags`,
    ignoring the variable definitions make appends after ` -- `."""
    found = None
    for word in makeflags.split():
        if word == "--":
            break
        for option in ("--jobserver-auth=", "--jobserver-fds="):
            if word.startswith(option):
                found = word[len(option) :]
    return found


def open_jobserver(environ: "Mapping[str, str]") -> tuple[JobServer | None, str]:
    """The jobserver `MAKEFLAGS` advertises, opened; or None and why not ("" when
    `MAKEFLAGS` names none)."""
    auth = auth_from_makeflags(environ.get("MAKEFLAGS", ""))
    if auth is None:
        return None, ""
    if auth.startswith("fifo:"):
        path = auth[len("fifo:") :]
        try:
            if not stat.S_ISFIFO(os.stat(path).st_mode):
                return None, f"jobserver {path} is not a FIFO"
            fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as err:
            return None, f"jobserver {path}: {err.strerror}"
        return JobServer(fd, fd, f"fifo:{path}"), ""
    read_text, comma, write_text = auth.partition(",")
    if not (comma and read_text.isdigit() and write_text.isdigit()):
        return None, f"jobserver {auth!r} in MAKEFLAGS is neither fifo:PATH nor R,W"
    read_fd, write_fd = int(read_text), int(write_text)
    try:
        if not (
            stat.S_ISFIFO(os.fstat(read_fd).st_mode) and stat.S_ISFIFO(os.fstat(write_fd).st_mode)
        ):
            return None, f"jobserver descriptors {auth} are not a pipe"
        # A description of our own, non-blocking, without touching the flags of the one
        # make and the other links share.
        fd = os.open(f"/proc/self/fd/{read_fd}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None, (
            f"jobserver descriptors {auth} are not open here (with make 4.3 or older,"
            " mark the link's recipe with `+`)"
        )
    return JobServer(fd, write_fd, auth), ""


class JobSlots:
    """The slots one distribution runs its local jobs in: make's implicit one, then
    tokens from the jobserver. Thread-safe; every slot `acquire` returns must be given
    back to `release`, and `close` returns whatever is still held."""

    def __init__(self, server: JobServer) -> None:
        self.server = server
        self.lock = threading.Lock()
        self.implicit_free = True
        self.held: list[int] = []

    def acquire(self, over: "Callable[[], bool]") -> int | None:
        """A slot (`IMPLICIT` or a token's byte), waiting until one is free; None once
        `over()` says no job is left to run."""
        while True:
            with self.lock:
                if self.implicit_free:
                    self.implicit_free = False
                    return IMPLICIT
            if over():
                return None
            token = self.server.take()
            if token is not None:
                with self.lock:
                    self.held.append(token)
                return token
            self.server.wait(POLL_MS)

    def release(self, slot: int) -> None:
        if slot == IMPLICIT:
            with self.lock:
                self.implicit_free = True
            return
        with self.lock:
            self.held.remove(slot)
        self.server.give(slot)

    def close(self) -> None:
        with self.lock:
            held, self.held = self.held, []
        for token in held:
            self.server.give(token)
        self.server.close()
