"""Plan requests: `dist-lto plan` run by a planner the worker keeps warm.

A link's plan action stands between its last compile and its first backend; run as a
command, a tenth of a second of it is an interpreter starting and importing the
planner. Run locally through the worker, it goes to a planner process the worker
started while the compiles ran (a `--ready` request): the process has imported the
planner and forks a child per request, which runs `dist-lto plan` with the request's
arguments in the worker's directory, exactly as the command does (the same guard over
its children, the same lines, the same exit status). The worker cannot fork itself:
it has threads. The planner has none, and forks nothing but these children.

Protocol, over a SOCK_SEQPACKET socket pair, one JSON object per message:
    worker -> planner  {"id": N, "argv": [...]} with one descriptor (SCM_RIGHTS): the
                       write end of the pipe that takes the child's stdout and stderr;
                       and "linker": the line behind the plan's driver, when the worker
                       knows it (`links.py`), which the child is told before it plans
    planner -> worker  {"id": N, "pid": P} once forked, {"id": N, "status": S} (a
                       `waitpid` status) once it has ended
The planner stops every child still running when the worker's end closes; a child
gets SIGKILL if the planner dies first (PR_SET_PDEATHSIG), and its guard then stops
the programs it started.
"""

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading

from dist_lto import TYPE_CHECKING
from dist_lto.installed import IMPORT_ROOT

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from dist_lto.llvm.driver_line import LinkerLine

OUTPUT_LIMIT = 1 << 20
"""What of a plan's stdout and stderr reaches its reply; the rest is read and dropped."""
_GONE = "the worker's planner process ended before the plan did"
_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from dist_lto.worker.plans import serve; serve(int(sys.argv[2]))"  # noqa: E501


class CannotStart(OSError):
    """The planner's interpreter could not be started (the line says which and why)."""


class Outcome:
    """A request's end: the child's `waitpid` status, or why there is none."""

    __slots__ = ("changed", "problem", "status")

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.status: int | None = None
        self.problem = ""

    def wait(self) -> None:
        with self.changed:
            self.changed.wait_for(lambda: self.status is not None or bool(self.problem))


class Planner:
    """The worker's side: starts the planner process and sends it requests.

    `on_start(pid)` of a request is told its child's pid (so that a cancelled request
    can stop it); a planner that has died is started again by the next request.
    `python` runs the planner as it is (it needs dist-lto's dependencies, which the
    worker's own interpreter may lack); None: the worker's interpreter, with its flags."""

    def __init__(self, note: "Callable[[str], None]", python: str | None = None) -> None:
        self.note = note
        self.python = python
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self.waiting: dict[int, tuple[Outcome, Callable[[int], None] | None, socket.socket]] = {}
        """Requests in flight: their outcome, who is told the child's pid, the planner's
        socket they went to (only that planner's end fails them)."""
        self.next_id = 0
        self.closing = False

    def warm(self) -> None:
        """Start the planner unless it runs (it imports while the compiles run); one that
        cannot start now is tried again by the first plan request."""
        with self.lock:
            try:
                self._start()
            except OSError as err:
                self.note(f"warning: no planner yet: {err.strerror or err}")

    def _start(self) -> socket.socket:
        """The planner's socket, the planner started first unless it runs (under the lock)."""
        if self.sock is not None and self.proc is not None and self.proc.poll() is None:
            return self.sock
        if self.proc is not None and self.proc.poll() is None:  # its socket has closed
            self.proc.kill()
            self.proc.wait()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        if self.python is not None:
            python = [self.python]
        else:
            python = [sys.executable] + [f for f, on in (
                ("-S", sys.flags.no_site), ("-E", sys.flags.ignore_environment),
                ("-s", sys.flags.no_user_site)) if on]  # fmt: skip
        try:
            self.proc = subprocess.Popen(
                [*python, "-c", _BOOT, IMPORT_ROOT, str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
            )
        except OSError as err:
            ours.close()
            raise CannotStart(f"cannot start the planner ({python[0]}): {err.strerror}") from None
        finally:
            theirs.close()
        self.sock = ours
        threading.Thread(target=self._read, args=(ours,), daemon=True).start()
        return ours

    def _read(self, sock: socket.socket) -> None:
        """Hand each message to its request; when the planner has gone, fail those left."""
        while True:
            try:
                message = sock.recv(1 << 16)
            except OSError:
                message = b""
            if not message:
                break
            reply = json.loads(message)
            with self.lock:
                outcome, on_start, _ = self.waiting.get(reply["id"], (None, None, sock))
            if outcome is None:
                continue
            if "pid" in reply:
                if on_start is not None:
                    on_start(reply["pid"])
            else:
                with outcome.changed:
                    outcome.status = reply["status"]
                    outcome.changed.notify_all()
        with self.lock:
            left = [outcome for outcome, _, sent in self.waiting.values() if sent is sock]
            if self.sock is sock:
                self.sock = None
            closing = self.closing
        sock.close()
        if not closing:
            self.note("the planner process ended; the next plan request starts another")
        for outcome in left:
            with outcome.changed:
                if outcome.status is None:
                    outcome.problem = _GONE
                    outcome.changed.notify_all()

    def run(
        self,
        argv: list[str],
        on_start: "Callable[[int], None] | None",
        linker: "LinkerLine | None" = None,
    ) -> tuple[int, bytes]:
        """Run `dist-lto plan ARGV`, its child told the `linker` line behind its driver
        (`driver_line.remember`): its `waitpid` status and what it printed (stdout and
        stderr). OSError, with the line to print, when the planner ended before it did."""
        outcome = Outcome()
        request = -1
        read_end, write_end = os.pipe()
        try:
            try:
                with self.lock:
                    sock = self._start()
                    request = self.next_id
                    self.next_id += 1
                    self.waiting[request] = (outcome, on_start, sock)
                sent: dict[str, object] = {"id": request, "argv": argv}
                if linker is not None:
                    sent["linker"] = linker.as_json()
                message = json.dumps(sent).encode()
                socket.send_fds(sock, [message], [write_end])
            except OSError as err:  # it could not start, or has just gone (as if it had taken it)
                with outcome.changed:
                    outcome.problem = str(err) if isinstance(err, CannotStart) else _GONE
            finally:
                os.close(write_end)
            output = b"" if outcome.problem else _read_bounded(read_end)
            outcome.wait()
        finally:
            os.close(read_end)
            with self.lock:
                self.waiting.pop(request, None)
        if outcome.status is None:
            raise OSError(outcome.problem)
        return outcome.status, output

    def close(self) -> None:
        """End the planner (it stops the plans it still runs first)."""
        with self.lock:
            sock, proc = self.sock, self.proc
            self.sock = self.proc = None
            self.closing = True
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if proc is not None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _read_bounded(fd: int) -> bytes:
    kept = bytearray()
    while chunk := os.read(fd, 1 << 16):
        if len(kept) < OUTPUT_LIMIT:
            kept += chunk[: OUTPUT_LIMIT - len(kept)]
    return bytes(kept)


# ---------------------------------------------------------------------------------
# The planner process


def serve(fd: int) -> None:
    """The planner's loop: fork a child per request, report its pid and its end."""
    import ctypes
    import select

    import dist_lto.commands.plan  # noqa: F401 (what every child runs, imported once)
    from dist_lto import cli

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        prctl = None
    planner = os.getpid()
    sock = socket.socket(fileno=fd)
    running: dict[int, tuple[int, int]] = {}  # pidfd -> (request, pid)
    while True:
        ready, _, _ = select.select([sock.fileno(), *running], [], [])
        for pidfd in [r for r in ready if r in running]:
            request, pid = running.pop(pidfd)
            _, status = os.waitpid(pid, 0)
            os.close(pidfd)
            _send(sock, {"id": request, "status": status})
        if sock.fileno() not in ready:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(sock, 1 << 20, 1)
        except OSError:
            message, fds = b"", []
        if not message:
            break
        if len(fds) != 1:
            for got in fds:
                os.close(got)
            continue
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            _child(sock, fds[0], request, cli.run, prctl, planner)
        os.close(fds[0])
        running[os.pidfd_open(pid)] = (request["id"], pid)
        _send(sock, {"id": request["id"], "pid": pid})
    for _, pid in running.values():  # the worker has gone: so do its plans
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
            os.waitpid(pid, 0)


def _send(sock: socket.socket, reply: dict[str, int]) -> None:
    with contextlib.suppress(OSError):  # the worker has gone: the loop sees it next
        sock.send(json.dumps(reply).encode())


def _child(
    sock: socket.socket,
    output: int,
    request: "dict[str, Any]",
    run: "Callable[[str, list[str]], int]",
    prctl: "Callable[..., int] | None",
    planner: int,
) -> None:
    """A forked child: `dist-lto plan ARGV`, told the line behind its driver if the
    request has one, its stdout and stderr to `output`, killed with the planner
    (PR_SET_PDEATHSIG, then a check that it has not gone already). Never returns."""
    status = 1
    argv: list[str] = request["argv"]
    try:
        sock.close()
        if prctl is not None:
            prctl(1, 9, 0, 0, 0)
        if os.getppid() != planner:
            os._exit(status)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(null)
        os.close(output)
        if "linker" in request and "--" in argv:
            from dist_lto.llvm import driver_line

            line = driver_line.LinkerLine.from_json(request["linker"])
            driver_line.remember(argv[argv.index("--") + 1 :], line)
        try:
            status = run("plan", argv)
        except SystemExit as stop:  # argparse's usage errors: as the interpreter ends
            if stop.code is None or isinstance(stop.code, int):
                status = stop.code or 0
            else:
                sys.stderr.write(f"{stop.code}\n")
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(status)
