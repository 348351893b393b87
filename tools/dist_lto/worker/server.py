"""The opt worker's service: Buck2's `worker.Worker` gRPC service on a unix socket.

Buck2 creates a directory for the worker, passes `WORKER_SOCKET=<dir>/socket`, and
connects once the worker listens there; it sends each action as a unary `Execute`
call (`Exec`, a stream of one command and maybe a cancellation, is served too). It
sends as many at once as it has local slots for the worker's actions (the toolchain's
`WorkerInfo` sets no concurrency of its own), so each call has a thread (`http2.py`)
and the compilers are pooled (`requests.CompilerPool`). A call Buck2 cancels (its
action was cancelled) or whose `timeout_s` passes stops its clang.
"""

import os
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

from dist_lto import TYPE_CHECKING
from dist_lto.worker import http2, protocol
from dist_lto.worker.ahead import RunAhead
from dist_lto.worker.links import LinkerLines
from dist_lto.worker.plans import Planner
from dist_lto.worker.requests import VERIFIED, CompilerPool, Running, run_request
from dist_lto.worker.reuse import Store
from dist_lto.worker.slots import Slots

if TYPE_CHECKING:
    import socket


class OptService:
    """Runs requests, their backends in turn (`slots.py`), and keeps count of those in
    flight and compiling (the highest counts are logged). With `run_ahead`, a turn a
    finished compile leaves is used before Buck2 sends the next request: by a waiting
    request, or, with a reuse `store` and a `planner`, by a planned backend run ahead of
    its request (`ahead.py`). With `links`, final links run the linker itself where
    their driver's line allows (`links.py`)."""

    def __init__(
        self,
        pool: CompilerPool,
        store: Store | None = None,
        planner: Planner | None = None,
        jobs: int | None = None,
        run_ahead: bool = True,
        links: LinkerLines | None = None,
    ) -> None:
        self.pool = pool
        self.store = store
        self.planner = planner
        self.links = links
        self.slots = Slots(jobs, lambda most: log(f"{most} compiling at once"), run_ahead)
        self.ahead = None
        if run_ahead and store is not None and planner is not None:
            self.ahead = RunAhead(store.root, pool.runner, log, VERIFIED)
            self.ahead.ended = self.slots.ahead_ended
            self.slots.ahead = self.ahead.start_next
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most = 0
        self.running: set[Running] = set()

    def handle(self, call: http2.Call) -> bytes:
        """A call's reply: `Execute` takes one command; `Exec` a stream of events, a
        command first, then perhaps its cancellation."""
        running = Running(self.slots.wake)
        call.on_cancel(running.stop)  # Buck2 cancelled the call, or its connection ended
        if call.method == EXECUTE:
            command = _first(call, protocol.decode_command)
        elif call.method == EXEC:
            first = _first(call, protocol.decode_event)
            if first.command is None:
                response = protocol.Response(
                    exit_code=1, stderr="dist-lto opt-worker: no command\n"
                )
                return protocol.encode_response(response)
            command = first.command

            def watch_cancel() -> None:
                for message in iter(call.next_message, None):
                    try:
                        cancel = protocol.decode_event(message).cancel
                    except protocol.MalformedMessage:
                        cancel = False  # not a cancellation: the command runs on
                    if cancel:
                        running.stop()

            threading.Thread(target=watch_cancel, daemon=True).start()
        else:
            raise http2.CallError(http2.UNIMPLEMENTED, f"no method {call.method}")
        return protocol.encode_response(self._run(command, running))

    def _run(self, command: protocol.Command, running: Running) -> protocol.Response:
        argv = [os.fsdecode(arg) for arg in command.argv]
        with self.lock:
            self.in_flight += 1
            self.running.add(running)
            if self.in_flight > self.most:
                self.most = self.in_flight
                log(f"{self.most} request{'s' if self.most > 1 else ''} at once")
        timer = None
        if command.timeout_s:
            timer = threading.Timer(command.timeout_s, running.time_out)
            timer.start()
        try:
            reply = run_request(argv, self.pool, running, self.slots, self.store, self.planner,
                                self.ahead, self.links)  # fmt: skip
        finally:
            if timer is not None:
                timer.cancel()
            with self.lock:
                self.in_flight -= 1
                self.running.discard(running)
        timed_out = command.timeout_s if running.timed_out else None
        return protocol.Response(reply.status, reply.stderr.decode(errors="replace"), timed_out)

    def stop_all(self) -> None:
        with self.lock:
            every = list(self.running)
        for running in every:
            running.stop()

    def close(self) -> None:
        """Remove the objects of backends run ahead that no request took."""
        if self.ahead is not None:
            self.ahead.close()


T = TypeVar("T")
EXECUTE = f"/{protocol.SERVICE}/Execute"
EXEC = f"/{protocol.SERVICE}/Exec"


def _first(call: http2.Call, decode: "Callable[[bytes], T]") -> T:
    """The call's first request message, decoded."""
    message = call.next_message()
    if message is None:
        raise http2.CallError(http2.INVALID_ARGUMENT, "no request message")
    try:
        return decode(message)
    except protocol.MalformedMessage as err:
        raise http2.CallError(http2.INVALID_ARGUMENT, f"a malformed request: {err}") from None


def start(listener: "socket.socket", service: OptService) -> http2.Server:
    """A server answering the calls that come to `listener` (`http2.listen_now`)."""
    server = http2.Server(listener, service.handle, log)
    server.start()
    return server


def log(line: str) -> None:
    """A line in the worker's log (its stderr: Buck2 keeps it beside the socket)."""
    sys.stderr.write(f"dist-lto opt-worker: {line}\n")
    sys.stderr.flush()
