#!/usr/bin/env python3
"""Build, start and stop bazel-remote, a cache-only REAPI server, on loopback.

The remote-cache tests (`dist-lto distribute --remote-cache`) run against it as well as
against BuildBarn's storage: it serves the action cache and the CAS and executes
nothing. It is a Go module pinned in `.ci/bazel-remote/go.mod`/`go.sum` as a Go `tool`
dependency, built with the machine's Go toolchain through the module proxy into
`.cache/bazel-remote/bin`, once (a stamp of the pins says whether the binary is
current). Standard library only; `.ci/setup` runs `build`.
"""

from __future__ import annotations

import hashlib
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__:
    from .buildbarn import (
        REPO,
        EngineError,
        _alive,
        _kill,
        _listening,
        _tail,
        free_ports,
        go_install_tools,
    )
else:  # run as a script by .ci/setup
    from buildbarn import (
        REPO,
        EngineError,
        _alive,
        _kill,
        _listening,
        _tail,
        free_ports,
        go_install_tools,
    )

GO_MODULE = REPO / ".ci" / "bazel-remote"
CACHE = REPO / ".cache" / "bazel-remote"
BINARY = CACHE / "bin" / "bazel-remote"
START_TIMEOUT = 30.0


def _stamp() -> str:
    h = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        h.update((GO_MODULE / name).read_bytes())
    return h.hexdigest()


def built() -> bool:
    stamp = BINARY.parent / ".stamp"
    return BINARY.is_file() and stamp.is_file() and stamp.read_text() == _stamp()


def build() -> float:
    """Build the binary unless current; returns the seconds it took (0 if nothing to do)."""
    return go_install_tools(GO_MODULE, CACHE, BINARY.parent, built, _stamp())


@dataclass
class Server:
    """A running bazel-remote: its gRPC port, its process and its state directory."""

    state: Path
    port: int
    pid: int
    tls: bool

    @property
    def address(self) -> str:
        return f"{'grpcs' if self.tls else 'grpc'}://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.state / "bazel-remote.log"

    def stop(self) -> None:
        _kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while _alive(self.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(self.pid):
            _kill(self.pid, signal.SIGKILL)


def start(state: Path, *, tls_dir: Path | None = None) -> Server:
    """Start a server keeping its cache in `state` (HTTP and gRPC on loopback only).
    With `tls_dir` (what `pki.make_pki` made) gRPC speaks TLS and wants a client
    certificate from that CA."""
    build()
    state.mkdir(parents=True, exist_ok=True)
    grpc_port, http_port = free_ports(2)
    argv = [str(BINARY), "--dir", str(state / "cache"), "--max_size", "1",
            "--grpc_address", f"127.0.0.1:{grpc_port}",
            "--http_address", f"127.0.0.1:{http_port}"]  # fmt: skip
    if tls_dir is not None:
        argv += ["--tls_cert_file", str(tls_dir / "server.pem"),
                 "--tls_key_file", str(tls_dir / "server.key"),
                 "--tls_ca_file", str(tls_dir / "ca.pem")]  # fmt: skip
    with open(state / "bazel-remote.log", "ab") as log:
        proc = subprocess.Popen(argv, cwd=state, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    server = Server(state, grpc_port, proc.pid, tls_dir is not None)
    deadline = time.monotonic() + START_TIMEOUT
    while not _listening(grpc_port):
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise EngineError(f"bazel-remote did not start; its log: {server.log}\n"
                              + _tail(server.log))  # fmt: skip
        time.sleep(0.05)
    return server


def main(argv: list[str]) -> int:
    if argv != ["build"]:
        print("usage: bazel_remote.py build", file=sys.stderr)
        return 2
    try:
        seconds = build()
    except EngineError as err:
        print(f"bazel-remote: error: {err}", file=sys.stderr)
        return 1
    print(f"bazel-remote: {BINARY}" + (f" (built in {seconds:.0f} s)" if seconds
                                       else " (already built)"))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
