"""The one way the tools run another program: in a process group of its own, stopped whole.

A compiler or linker may be a wrapper script that starts children of its own (ccache,
a shell script around clang). Signalling only the program we started would leave those
running, writing files after we have gone. So every program starts as the leader of a
new process group (`posix_spawn` with `setpgroup`), and stopping it signals the group.

Stop signals (TERM, INT, HUP) received while a child runs in the main thread are passed
on to its group; the caller then fails with 128+N once the child has gone. The death
of the process that started us is seen by `stop_with_parent`, which turns it into a
SIGHUP to ourselves; our own death by SIGKILL, which nothing of ours can catch, is seen
by the guard (`guard.py`), which then kills the groups of the children still running.

Standard library only, and not even `subprocess` or `signal` (importing either costs
more than the rest of a backend action's Python start-up): programs start with
`os.posix_spawn` and signals are caught through `_signal`. `dist-lto opt` runs its
compiler through here.
"""

import _signal
import os

from dist_lto import TYPE_CHECKING
from dist_lto.errors import BadInput, DistLtoError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

SIGNAL_EXIT_BASE = 128
STOP_SIGNALS = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP)
_CHILD_DEFAULT_SIGNALS = (_signal.SIGPIPE, _signal.SIGXFSZ)
"""Python ignores these; a child must start with the defaults, as `subprocess` ensures."""

INHERIT = "inherit"
CAPTURE = "capture"
DEVNULL = "devnull"


def exit_status(wait_status: int) -> int:
    """A child's wait status as its exit code, or -N when signal N killed it (as
    `os.waitstatus_to_exitcode`): a compiler that exits 137 was not killed."""
    return os.waitstatus_to_exitcode(wait_status)


def action_status(status: int) -> int:
    """What an action exits with for a child's `exit_status`: its code, or 128+N for
    signal N (the convention remote executors retry on)."""
    return SIGNAL_EXIT_BASE - status if status < 0 else status


def describe_status(status: int) -> str:
    """For an `exit_status` (a remote result's exit code is never negative)."""
    if status < 0:
        number = -status
        try:
            name = _signal.strsignal(number) or ""
        except ValueError:
            name = ""
        return f"was killed by signal {number}{f' ({name})' if name else ''}"
    return f"exited with status {status}"


class StopRequested(BaseException):
    """A stop signal arrived (raised from the handler, so waits end at once)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_stopping = 0
"""The stop signal already raised as StopRequested (0: none): later ones are ignored,
so that the cleanup the first one started runs to its end."""


_held = 0
"""How many `StopsHeld` blocks the main thread is in: a stop waits for the last to end."""
_pending = 0
"""A stop signal that arrived while held (0: none)."""


def raise_stop(signum: int, _frame: object) -> None:
    global _stopping, _pending
    if _stopping:
        return
    if _held:
        _pending = _pending or signum
        return
    _stopping = signum
    raise StopRequested(signum)


class StopsHeld:
    """A block no stop signal interrupts: one that arrives meanwhile is raised as it
    ends. For steps that must not be cut in two, such as making a scratch directory
    and recording its name for the cleanup. (Blocking the signal with `pthread_sigmask`
    in the main thread would not do: the kernel may hand it to another thread, and
    Python runs the handler in the main thread all the same.)"""

    def __enter__(self) -> None:
        hold_stops()

    def __exit__(self, *_exc: object) -> None:
        release_stops()


def hold_stops() -> None:
    """Hold stop signals back until the matching `release_stops` (see `StopsHeld`)."""
    global _held
    _held += 1


def release_stops() -> None:
    """End a `hold_stops`; after the last, raise a stop that arrived meanwhile."""
    global _held, _pending, _stopping
    _held -= 1
    if not _held and _pending and not _stopping:
        signum, _pending = _pending, 0
        _stopping = signum
        raise StopRequested(signum)


def stopped(signum: int, doing: str = "") -> DistLtoError:
    """The failure of a tool stopped by `signum` (its status is 128+N)."""
    where = f" while {doing}" if doing else ""
    return DistLtoError(f"{stop_reason(signum)}{where}", status=SIGNAL_EXIT_BASE + signum)


def stop_reason(signum: int) -> str:
    """The message for a stop by `signum`: the signal, or why `stop_with_parent` sent it."""
    parent = gone_parent()
    if parent and signum == _signal.SIGHUP:
        return f"stopped: the process that started it (pid {parent}) has gone"
    return f"stopped by signal {signum}"


PARENT_POLL_SECONDS = 0.2
"""How often `stop_with_parent`'s thread looks for its parent."""
_watched_parent = 0
"""The parent `stop_with_parent` watches (0: none). Set only at a command's edge."""


def gone_parent() -> int:
    """The pid of the parent `stop_with_parent` watches once it has gone, else 0."""
    if _watched_parent and os.getppid() != _watched_parent:
        return _watched_parent
    return 0


def stop_with_parent() -> None:
    """Stop as on SIGHUP once the process that started this one has gone.

    A linker or build action killed alone (SIGKILL to `ld.lld`, a build system stopping
    only its direct child) leaves its children running, reparented: a distributor would
    go on compiling and write objects nobody links or removes. A thread polls
    `getppid()` and sends this process SIGHUP when it changes, so the usual stop path
    runs: children stopped, temporaries removed, nothing half-written. Polling, not
    `prctl(PR_SET_PDEATHSIG)`: that fires when the parent *thread* that spawned us ends
    (a linker's worker thread may), and its `ctypes` costs the opt path more than this
    whole module; `_thread` and a lock's timeout cost no import. For a command's edge;
    once per process (a batch's backends share the watch).
    """
    import _thread

    global _watched_parent
    parent = os.getppid()
    if _watched_parent == parent:
        return  # watched already
    if parent <= 1:
        return  # started by init, or orphaned already: there is nothing to watch
    _watched_parent = parent

    def watch() -> None:
        pause = _thread.allocate_lock()
        pause.acquire()
        while os.getppid() == parent:
            pause.acquire(timeout=PARENT_POLL_SECONDS)
        os.kill(os.getpid(), _signal.SIGHUP)

    _thread.start_new_thread(watch, ())


def catch_stop_signals() -> dict[int, object]:
    """Make stop signals raise StopRequested; the previous handlers, to restore. Empty
    outside the main thread (a distributor's worker): only the main thread can catch
    signals, and whoever runs it decides what stopping means. The outermost call arms
    `raise_stop` afresh; nested ones leave a stop under way as it is."""
    global _stopping, _pending
    try:
        previous = {sig: _signal.signal(sig, raise_stop) for sig in STOP_SIGNALS}
    except ValueError:
        return {}
    if previous[_signal.SIGTERM] is not raise_stop:
        _stopping = _pending = 0
    return previous


def restore_handlers(previous: "dict[int, object]") -> None:
    for sig, handler in previous.items():
        _signal.signal(sig, handler)


class CannotRun(BadInput):
    """The program could not be started; `reason` says why (strerror)."""

    def __init__(self, program: str, reason: str) -> None:
        super().__init__(f"{program}: cannot run: {reason}")
        self.reason = reason


def spawn(
    argv: list[str],
    env: "Mapping[str, str]",
    file_actions: list[tuple[int, ...]],
    own_group: bool = True,
) -> int:
    """Start `argv` (found on PATH unless it names a path) as the leader of a new process
    group, with the signal dispositions it would get from `subprocess`; its pid (and
    group id). The guard, when running, learns the group. CannotRun when it cannot run.

    `own_group=False` keeps the child in ours, for a tool without a guard (`opt`, whose
    start-up a fork would cost): a build system that kills the action's group then
    reaches the child too."""
    start = os.posix_spawn if "/" in argv[0] else os.posix_spawnp
    guard_fd = -1
    if _guard_fd >= 0 and own_group:
        # The child tells the guard its group itself, before it becomes the program: a
        # SIGKILL to us can no longer land between its start and the guard's knowing.
        _check_runnable(argv[0], env)
        guard_fd = os.dup(_guard_fd) if _guard_fd == _SHIM_FD else _guard_fd
        file_actions = [*file_actions, (os.POSIX_SPAWN_DUP2, guard_fd, _SHIM_FD)]
        argv = [_SHELL, "-c", _SHIM, *argv]
        start = os.posix_spawn
    try:
        if own_group:
            pid = start(
                argv[0], argv, env, file_actions=file_actions, setsigdef=_CHILD_DEFAULT_SIGNALS,
                setpgroup=0,
            )  # fmt: skip
        else:
            pid = start(
                argv[0], argv, env, file_actions=file_actions, setsigdef=_CHILD_DEFAULT_SIGNALS
            )
    except OSError as err:
        raise CannotRun(argv[0], err.strerror or str(err)) from None
    except ValueError as err:  # a NUL byte in an argument or the environment
        raise CannotRun(argv[0], str(err)) from None
    finally:
        if guard_fd not in (-1, _guard_fd):
            os.close(guard_fd)
    return pid


_SHELL = "/bin/sh"
_SHIM_FD = 9
_SHIM = f'echo "+$$" >&{_SHIM_FD}; exec {_SHIM_FD}>&- "$0" "$@"'
"""Run as `sh -c SHIM PROGRAM ARGS...`: announce this process (the group's leader) to the
guard on fd 9, close it, become PROGRAM with ARGS (argv[0] as given)."""


def _check_runnable(program: str, env: "Mapping[str, str]") -> None:
    """CannotRun unless `program` (a path, or a name looked up on PATH as `posix_spawnp`
    does) is an executable file: the shim would only say so through the shell."""
    if "/" in program:
        candidates = [program]
    else:
        path = env.get("PATH", os.defpath)
        candidates = [os.path.join(d or ".", program) for d in path.split(os.pathsep)]
    reason = "No such file or directory"
    for candidate in candidates:
        try:
            st = os.stat(candidate)
        except (OSError, ValueError):
            continue
        if st.st_mode & 0o170000 != 0o100000:
            reason = "Permission denied"
        elif os.access(candidate, os.X_OK):
            return
        else:
            reason = "Permission denied"
    raise CannotRun(program, reason)


def reap(pid: int) -> int:
    """Wait for child `pid` (a group leader from `spawn`); its wait status. The guard
    forgets the group while the child is still a zombie, so its id cannot be reused yet."""
    _forget(pid)
    return os.waitpid(pid, 0)[1]


def reap_used(pid: int) -> tuple[int, float]:
    """`reap`, and the CPU seconds (user + system) the child and its reaped children used
    (`os.wait4`, which imports `resource`: not on the opt path)."""
    _forget(pid)
    _, status, used = os.wait4(pid, 0)
    return status, used.ru_utime + used.ru_stime


def _forget(pid: int) -> None:
    """Tell the guard to forget child `pid`'s group once it is a zombie."""
    if _guard_fd >= 0:
        while True:
            try:
                os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
                break
            except ChildProcessError:
                break
            except InterruptedError:
                continue
        _tell_guard(b"-", pid)


def signal_group(pid: int, signum: int) -> None:
    """Send `signum` to the process group led by `pid` (to `pid` alone when it leads
    none: started with `own_group=False`); nothing if it has gone."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


KILL_AFTER_SECONDS = 5.0
"""How long a stopped child may take to leave before its group gets SIGKILL."""
GROUP_AFTER_SECONDS = 1.0
"""How long the rest of its group may take after it: a compiler driver leaves at once
on SIGTERM, while the linker it started removes its temporary output first."""


def stop_group(pid: int, signum: int) -> None:
    """Signal child `pid`'s group with `signum` and wait for the child, sending SIGKILL
    to the group when it has not left after KILL_AFTER_SECONDS; what is left of the
    group GROUP_AFTER_SECONDS after it has (a wrapper's child that ignores `signum`)
    gets SIGKILL too."""
    signal_group(pid, signum)
    if signum != _signal.SIGKILL and _exits_within(pid, KILL_AFTER_SECONDS):
        _group_leaves(pid, GROUP_AFTER_SECONDS)
    signal_group(pid, _signal.SIGKILL)  # before reaping: its id cannot be reused yet
    reap(pid)


def _group_leaves(pgid: int, seconds: float) -> None:
    """Wait up to `seconds` until process group `pgid` holds no live process but its
    leader (which has ended and is not reaped)."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _live_members(pgid):
            return
        time.sleep(0.01)


def _live_members(pgid: int) -> list[int]:
    """The processes of group `pgid`, its leader aside, that have not ended (/proc)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == pgid:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            found.append(int(name))
    return found


def _exits_within(pid: int, seconds: float) -> bool:
    """Whether child `pid` ends within `seconds` (it is not reaped)."""
    import select

    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return True  # cannot watch it: wait for it as it is
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while True:
            try:
                return bool(poller.poll(seconds * 1000))
            except InterruptedError:
                continue
    finally:
        os.close(fd)


class Finished:
    """A child's `exit_status`, what it wrote to captured streams and the CPU seconds it
    used (user + system, its reaped children's too)."""

    __slots__ = ("cpu", "status", "stderr", "stdout")

    def __init__(self, status: int, stdout: bytes, stderr: bytes, cpu: float = 0.0) -> None:
        self.status = status
        self.stdout = stdout
        self.stderr = stderr
        self.cpu = cpu


class TimedOut(DistLtoError):
    """The child ran longer than the caller allowed; its group has been killed."""


def run(
    argv: list[str],
    *,
    env: "Mapping[str, str] | None" = None,
    stdout: str = INHERIT,
    stderr: str = CAPTURE,
    stdin: "str | bytes" = INHERIT,
    timeout: float | None = None,
    on_start: "Callable[[int], None] | None" = None,
    own_group: bool = True,
    cpu: bool = False,
    limit: int | None = None,
) -> Finished:
    """Run `argv` in its own process group and wait for it.

    `stdout` and `stderr` are INHERIT, CAPTURE or DEVNULL; `stdin` is INHERIT, DEVNULL or
    bytes to feed it. `on_start(pid)` is called once the child runs and before it can be
    reaped, so a distributor can pin it (`os.pidfd_open`) and stop its group from another
    thread. In the main thread, a stop signal (TERM, INT, HUP) is passed on to the
    child's group and the call fails with 128+N once the child has gone; with `timeout`
    (seconds), a child still running then is killed with its group (TimedOut). BadInput
    when the program cannot start. With `cpu`, `Finished.cpu` says what the child used
    (`reap_used`); with `limit`, each captured stream keeps its first `limit` bytes (the
    rest is read and dropped). Safe to call from several threads at once.
    """
    mine: list[int] = []  # our ends of the pipes, closed at the end
    theirs: list[int] = []
    actions: list[tuple[int, ...]] = []
    reads: dict[int, list[bytes]] = {}
    feed = None
    try:
        for fd, how in ((0, stdin), (1, stdout), (2, stderr)):
            if how == INHERIT:
                continue
            if how == DEVNULL:
                null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
                theirs.append(null)
                actions.append((os.POSIX_SPAWN_DUP2, null, fd))
                continue
            read_end, write_end = os.pipe()
            if fd == 0:
                mine.append(write_end)
                theirs.append(read_end)
                actions.append((os.POSIX_SPAWN_DUP2, read_end, 0))
                feed = (write_end, how if isinstance(how, bytes) else b"")
            else:
                mine.append(read_end)
                theirs.append(write_end)
                actions.append((os.POSIX_SPAWN_DUP2, write_end, fd))
                reads[read_end] = []
        previous = catch_stop_signals()
        # Until the pid is known a stop signal cannot be passed on: hold it back meanwhile,
        # and take it once the child can be stopped.
        held = bool(previous)  # only the main thread catches stops
        if held:
            hold_stops()
        try:
            try:
                pid = spawn(argv, os.environ if env is None else env, actions, own_group)
            finally:
                for fd in theirs:
                    os.close(fd)
                theirs.clear()
            try:
                if held:
                    held = False
                    release_stops()  # a stop that came meanwhile is raised here
                if on_start is not None:
                    on_start(pid)
                if feed is None and timeout is None and len(reads) <= 1:
                    for fd, chunks in reads.items():  # the opt path: no `select` to import
                        while chunk := os.read(fd, 65536):
                            _keep(chunks, chunk, limit)
                else:
                    _pump(pid, reads, feed, timeout, argv[0], mine, limit)
                wait_status, used = reap_used(pid) if cpu else (reap(pid), 0.0)
            except StopRequested as stop:
                stop_group(pid, stop.signum)
                raise stopped(stop.signum, f"{argv[0]} ran") from None
            except BaseException:
                stop_group(pid, _signal.SIGKILL)
                raise
        finally:
            try:
                if held:  # spawning failed: a held stop is raised now
                    release_stops()
            finally:
                restore_handlers(previous)
    finally:
        for fd in mine + theirs:
            try:  # noqa: SIM105 (contextlib costs an import on the opt path)
                os.close(fd)
            except OSError:
                pass
    captured = [b"".join(chunks) for chunks in reads.values()]  # stdout's first
    out = captured.pop(0) if stdout == CAPTURE else b""
    err = captured.pop(0) if stderr == CAPTURE else b""
    return Finished(exit_status(wait_status), out, err, used)


def _pump(
    pid: int,
    reads: "dict[int, list[bytes]]",
    feed: "tuple[int, bytes] | None",
    timeout: float | None,
    program: str,
    mine: list[int],
    limit: int | None = None,
) -> None:
    """Read the captured streams (each kept up to `limit` bytes) and feed stdin until all
    are done; TimedOut at `timeout`. The stdin pipe is closed once fed (and dropped from
    `mine`), so the child sees its end."""
    import select
    import time

    def close_feed(fd: int) -> None:
        mine.remove(fd)
        os.close(fd)

    poller = select.poll()
    for fd in reads:
        poller.register(fd, select.POLLIN)
    data = b""
    if feed is not None:
        data = feed[1]
        if data:
            os.set_blocking(feed[0], False)
            poller.register(feed[0], select.POLLOUT)
        else:
            close_feed(feed[0])
    open_fds = len(reads) + (1 if data else 0)
    deadline = None if timeout is None else time.monotonic() + timeout
    while open_fds:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic()) * 1000
        events = poller.poll(wait)
        if not events and deadline is not None and time.monotonic() >= deadline:
            raise TimedOut(f"{program}: no answer in {timeout:g} s")
        for fd, _event in events:
            if fd in reads:
                chunk = os.read(fd, 65536)
                if chunk:
                    _keep(reads[fd], chunk, limit)
                    continue
            else:
                try:
                    data = data[os.write(fd, data[:65536]) :]
                except BrokenPipeError:
                    data = b""  # the child does not read it all: its business
                if data:
                    continue
                poller.unregister(fd)
                close_feed(fd)
                open_fds -= 1
                continue
            poller.unregister(fd)
            open_fds -= 1


def _keep(chunks: list[bytes], chunk: bytes, limit: int | None) -> None:
    """`chunk` appended to a captured stream's `chunks`, as much of it as `limit` leaves."""
    if limit is not None:
        room = limit - sum(len(c) for c in chunks)
        if room <= 0:
            return
        chunk = chunk[:room]
    chunks.append(chunk)


# ---------------------------------------------------------------------------------
# The guard's end in this process (see guard.py)

_guard_fd = -1
"""The guard's pipe (-1: no guard). Set only by `guard.start`, at a command's edge."""


def _tell_guard(kind: bytes, pid: int) -> None:
    try:  # noqa: SIM105 (contextlib costs an import on the opt path)
        os.write(_guard_fd, kind + str(pid).encode() + b"\n")
    except OSError:
        pass  # the guard has gone: nothing more can be done for the group


def forked() -> None:
    """In a process forked from a tool (a worker of its own, not a program): let go of
    the guard's pipe, so the guard acts as soon as the tool itself has gone."""
    global _guard_fd
    if _guard_fd >= 0:
        os.close(_guard_fd)
        _guard_fd = -1


def run_tool(
    argv: list[str],
    on_start: "Callable[[int], None] | None" = None,
    env: "Mapping[str, str] | None" = None,
    own_group: bool = True,
) -> tuple[int, bytes]:
    """`run` with stdout inherited and stderr captured: (`exit_status`, stderr). A
    backend's runner (`backend.run_backend`)."""
    done = run(argv, env=env, on_start=on_start, own_group=own_group)
    return done.status, done.stderr
