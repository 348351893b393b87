"""The gRPC side of the opt worker: Buck2's `worker.Worker` service on a unix socket.

Buck2 creates a directory for the worker, passes `WORKER_SOCKET=<dir>/socket`, and
connects once the worker listens there; it sends each action as a unary `Execute`
call (`Exec`, a stream of one command and maybe a cancellation, is served too). It
sends as many at once as it has local slots for the worker's actions (the toolchain's
`WorkerInfo` sets no concurrency of its own), so the thread pool is wide and the
compilers are pooled (`requests.CompilerPool`). A call Buck2 cancels (its action was
cancelled) or whose `timeout_s` passes stops its clang.
"""

import os
import sys
import threading
from collections.abc import Iterable

import grpc

from dist_lto.worker import protocol
from dist_lto.worker.ahead import RunAhead
from dist_lto.worker.plans import Planner
from dist_lto.worker.requests import CompilerPool, Running, run_request
from dist_lto.worker.reuse import Store
from dist_lto.worker.slots import Slots

MAX_THREADS = 256
"""Requests served at once, at most: more than any machine's local slots for them."""


class OptService:
    """Runs requests, their backends in turn (`slots.py`), and keeps count of those in
    flight and compiling (the highest counts are logged). With `run_ahead`, a turn a
    finished compile leaves is used before Buck2 sends the next request: by a waiting
    request, or, with a reuse `store` and a `planner`, by a planned backend run ahead of
    its request (`ahead.py`)."""

    def __init__(
        self,
        pool: CompilerPool,
        store: Store | None = None,
        planner: Planner | None = None,
        jobs: int | None = None,
        run_ahead: bool = True,
    ) -> None:
        self.pool = pool
        self.store = store
        self.planner = planner
        self.slots = Slots(jobs, lambda most: log(f"{most} compiling at once"), run_ahead)
        self.ahead = None
        if run_ahead and store is not None and planner is not None:
            self.ahead = RunAhead(store.root, pool.runner, log)
            self.ahead.ended = self.slots.ahead_ended
            self.slots.ahead = self.ahead.start_next
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most = 0
        self.running: set[Running] = set()

    def execute(
        self, command: protocol.Command, context: grpc.ServicerContext
    ) -> protocol.Response:
        running = Running(self.slots.wake)
        context.add_callback(running.stop)  # the call ended early: Buck2 cancelled it
        return self._run(command, running)

    def exec_stream(
        self, events: Iterable[protocol.Event], context: grpc.ServicerContext
    ) -> protocol.Response:
        running = Running(self.slots.wake)
        context.add_callback(running.stop)
        first = next(iter(events), None)
        if first is None or first.command is None:
            return protocol.Response(exit_code=1, stderr="dist-lto opt-worker: no command\n")

        def watch_cancel() -> None:
            for event in events:
                if event.cancel:
                    running.stop()

        threading.Thread(target=watch_cancel, daemon=True).start()
        return self._run(first.command, running)

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
                                self.ahead)  # fmt: skip
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


def start(socket_path: str, service: OptService) -> grpc.Server:
    """A started server listening on `socket_path` (removed first if left over)."""
    from concurrent import futures

    handlers = {
        "Execute": grpc.unary_unary_rpc_method_handler(
            service.execute,
            request_deserializer=protocol.decode_command,
            response_serializer=protocol.encode_response,
        ),
        "Exec": grpc.stream_unary_rpc_method_handler(
            service.exec_stream,
            request_deserializer=protocol.decode_event,
            response_serializer=protocol.encode_response,
        ),
    }
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=MAX_THREADS, thread_name_prefix="opt"),
        options=[("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)],
    )
    generic = grpc.method_handlers_generic_handler(protocol.SERVICE, handlers)
    server.add_generic_rpc_handlers((generic,))
    if os.path.exists(socket_path):
        os.unlink(socket_path)
    server.add_insecure_port(f"unix:{socket_path}")
    server.start()
    return server


def log(line: str) -> None:
    """A line in the worker's log (its stderr: Buck2 keeps it beside the socket)."""
    sys.stderr.write(f"dist-lto opt-worker: {line}\n")
    sys.stderr.flush()
