"""Buck2's side of the worker protocol, for tests and bench/opt_overhead.py: start a
worker on a socket and send it requests the way Buck2 does (a unary `Execute` call)."""

import os
import subprocess
import sys
import time

import grpc

from dist_lto import TYPE_CHECKING
from dist_lto.installed import MAIN
from dist_lto.worker import protocol

if TYPE_CHECKING:
    from collections.abc import Sequence


class WorkerClient:
    """A worker process listening on `socket_path`, started in `cwd` (where Buck2 starts
    one: the project root, against which the requests' paths are relative)."""

    def __init__(
        self, socket_path: str, cwd: str, *options: str, python: "Sequence[str]" = ()
    ) -> None:
        """`python`: the interpreter and its flags (default: this one, without flags)."""
        self.socket_path = socket_path
        self.proc = subprocess.Popen(
            [*(python or [sys.executable]), MAIN, "opt-worker", "--socket", socket_path, *options],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, as Buck2 starts it
        )
        self.channel = grpc.insecure_channel(f"unix:{socket_path}")
        self.call = self.channel.unary_unary(
            f"/{protocol.SERVICE}/Execute",
            request_serializer=protocol.encode_command,
            response_deserializer=protocol.decode_response,
        )
        deadline = time.monotonic() + 60
        ready = grpc.channel_ready_future(self.channel)
        try:  # one future, cancelled at the end: each one polls the channel on a thread
            while True:
                try:
                    ready.result(timeout=0.5)
                    break
                except grpc.FutureTimeoutError:
                    if self.proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"worker did not start: {self.log()}") from None
        finally:
            ready.cancel()

    def execute(self, argv: list[str], timeout_s: int | None = None) -> protocol.Response:
        command = protocol.Command([os.fsencode(a) for a in argv], [], timeout_s)
        return self.call(command)

    def log(self) -> str:
        """The worker's stderr so far: only once it has exited."""
        if self.proc.poll() is None or self.proc.stderr is None:
            return ""
        return self.proc.stderr.read().decode(errors="replace")

    def close(self) -> None:
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)
