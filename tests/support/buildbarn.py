#!/usr/bin/env python3
"""Build, start and stop a BuildBarn remote-execution engine on loopback.

Used by `.ci/remote-engine` (the documented script), the remote tests' fixture and
bench/remote.py. Standard library only.

Build: the four BuildBarn programs (bb_storage, bb_scheduler, bb_worker, bb_runner) are
Go modules pinned in `.ci/buildbarn/go.mod`/`go.sum` and built with the machine's Go
toolchain through the Go module proxy into `.cache/buildbarn/bin`, once (a stamp of the
pins says whether the binaries are current). BuildBarn itself builds with Bazel, which
patches two dependencies; a plain `go build` needs the same: go-fuse is patched with
the patches bb-remote-execution ships (`patches/com_github_hanwen_go_fuse_v2/`), and
remote-apis is pinned to the first revision whose generated Go code has the SpliceBlob
calls bb-storage serves (BuildBarn regenerates that code from the .proto under Bazel).

Engine: one bb_storage (CAS and action cache, and the address clients use: it forwards
Execute to the scheduler), one bb_scheduler, and per worker a bb_worker and its
bb_runner. Everything listens on 127.0.0.1 (the runners on unix sockets) and keeps its
state, logs and a description (`engine.json`) under one state directory.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIG = Path(__file__).resolve().parent / "buildbarn_config"
GO_MODULE = REPO / ".ci" / "buildbarn"
CACHE = Path(os.environ.get("DIST_LTO_BUILDBARN_CACHE", REPO / ".cache" / "buildbarn"))
BIN = CACHE / "bin"
PROGRAMS = ("bb_storage", "bb_scheduler", "bb_worker", "bb_runner")
DEFAULT_STATE = CACHE / "engine"
DEFAULT_PORT = 8980
PATCHED = {
    "github.com/hanwen/go-fuse/v2": (
        "github.com/buildbarn/bb-remote-execution", "com_github_hanwen_go_fuse_v2"),
    "google.golang.org/genproto/googleapis/bytestream": (
        "github.com/buildbarn/bb-storage", "org_golang_google_genproto_googleapis_bytestream"),
}  # fmt: skip
"""Dependencies that BuildBarn's Bazel build patches and that do not compile unpatched
-> (the BuildBarn module shipping the patches, its `patches/` subdirectory)."""
START_TIMEOUT = 60.0


class EngineError(Exception):
    """The engine could not be built or started; the message says which part and why."""


# ---------------------------------------------------------------------------------
# Build


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    # The pins in go.sum are the checksums: no checksum database needed, nothing else
    # fetched, no other Go toolchain downloaded.
    env.update({"GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local", "GOWORK": "off"})
    return env


def _stamp() -> str:
    h = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        h.update((GO_MODULE / name).read_bytes())
    h.update(repr(sorted(PATCHED.items())).encode())  # not this file: edits here need no rebuild
    return h.hexdigest()


def built() -> bool:
    stamp = BIN / ".stamp"
    return (
        all((BIN / p).is_file() for p in PROGRAMS)
        and stamp.is_file()
        and stamp.read_text() == _stamp()
    )


def _go(args: list[str], cwd: Path) -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    proc = subprocess.run([go, *args], cwd=cwd, env=_go_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise EngineError(f"go {' '.join(args)} failed in {cwd}:\n{tail}")
    return proc.stdout


def _module_dir(module: str, cwd: Path) -> Path:
    info = json.loads(_go(["mod", "download", "-json", module], cwd))
    if info.get("Error"):
        raise EngineError(f"go mod download {module}: {info['Error']}")
    return Path(info["Dir"])


def build(*, verbose: bool = False) -> float:
    """Build the binaries unless current; returns the seconds it took (0 if nothing to do)."""

    def patch(work: Path) -> None:
        if verbose:
            print("buildbarn: fetching modules and patching dependencies", file=sys.stderr)
        for module, (owner, patch_dir) in PATCHED.items():
            _patch_module(work, module, owner, patch_dir)
        if verbose:
            print("buildbarn: compiling (a few minutes on 2 cores)", file=sys.stderr)

    return go_install_tools(GO_MODULE, CACHE, BIN, built, _stamp(), patch)


def go_install_tools(
    module: Path,
    cache: Path,
    bin_dir: Path,
    current: Callable[[], bool],
    stamp: str,
    prepare: Callable[[Path], None] | None = None,
) -> float:
    """`go install tool` of the Go module pinned in `module` (go.mod, go.sum) into
    `bin_dir`, in a work directory under `cache`, unless `current()`; `prepare` may edit
    the work directory's module first. Under a lock, so parallel sessions build once;
    returns the seconds it took (0 if nothing was to do)."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if current():
            return 0.0
        started = time.monotonic()
        work = cache / "build"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        for name in ("go.mod", "go.sum"):
            shutil.copy(module / name, work / name)
        if prepare is not None:
            prepare(work)
        bin_dir.mkdir(parents=True, exist_ok=True)
        go = shutil.which("go") or "/usr/local/go/bin/go"
        proc = subprocess.run([go, "install", "tool"], cwd=work, capture_output=True, text=True,
                              env=dict(_go_env(), GOBIN=str(bin_dir)))  # fmt: skip
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            raise EngineError(f"go install tool failed in {work}:\n{tail}")
        (bin_dir / ".stamp").write_text(stamp)
        return time.monotonic() - started


def _patch_module(work: Path, module: str, owner: str, patch_dir: str) -> None:
    """Replace `module` by a copy patched with `owner`'s patches (as its Bazel build does)."""
    version = _replaced_version(work, module) or _required(work, module)
    source = _module_dir(f"{module}@{version}", work)
    patches = sorted((_module_dir(f"{owner}@{_required(work, owner)}", work) / "patches"
                      / patch_dir).glob("*.diff"))  # fmt: skip
    if not patches:
        raise EngineError(f"{owner}: no patches for {module} in patches/{patch_dir}")
    dest = work / "patched" / patch_dir
    shutil.copytree(source, dest)
    for path in [dest, *dest.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    for patch in patches:
        proc = subprocess.run(
            ["patch", "-p0", "--forward", "--batch", "-i", str(patch)],
            cwd=dest, capture_output=True, text=True,
        )  # fmt: skip
        if proc.returncode != 0:
            raise EngineError(f"patching {module} with {patch.name} failed:\n{proc.stdout}")
    _go(["mod", "edit", f"-replace={module}=./patched/{patch_dir}"], work)


def _required(work: Path, module: str) -> str:
    doc = json.loads(_go(["mod", "edit", "-json"], work))
    for req in doc.get("Require") or []:
        if req["Path"] == module:
            return req["Version"]
    raise EngineError(f"{GO_MODULE}/go.mod does not require {module}")


def _replaced_version(work: Path, module: str) -> str | None:
    doc = json.loads(_go(["mod", "edit", "-json"], work))
    for rep in doc.get("Replace") or []:
        if rep["Old"]["Path"] == module and rep["New"].get("Version"):
            return rep["New"]["Version"]
    return None


# ---------------------------------------------------------------------------------
# Engine


def free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 right now (the kernel picks them)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie of ours is not alive
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


@dataclass
class Engine:
    """A running (or described) engine. `address` is what clients pass to `--remote`."""

    state: Path
    storage_port: int
    scheduler_client_port: int
    scheduler_worker_port: int
    pids: dict[str, int] = field(default_factory=dict)
    """Process name (`storage`, `scheduler`, `runner-w1`, `worker-w1`, ...) -> pid."""
    tls_port: int = 0
    """With TLS: the clients' port (TLS, a client certificate and a bearer token)."""
    tls_dir: str = ""
    """With TLS: the directory of `pki.make_pki` (server.pem, server.key, ca.pem, jwks.json)."""
    own_sessions: bool = True
    """Each process in a session of its own (so a terminal's signals pass it by); False
    keeps them in the caller's session, whose one CPU share (Linux's autogroup
    scheduler) they then share with the caller's own processes."""

    @property
    def address(self) -> str:
        if self.tls_port:
            return f"grpcs://127.0.0.1:{self.tls_port}"
        return f"grpc://127.0.0.1:{self.storage_port}"

    @property
    def plaintext_address(self) -> str:
        """The workers' listener: plaintext, no authentication (loopback only)."""
        return f"grpc://127.0.0.1:{self.storage_port}"

    @property
    def workers(self) -> list[str]:
        return sorted(name[len("worker-") :] for name in self.pids if name.startswith("worker-"))

    def log(self, name: str) -> Path:
        return self.state / "logs" / f"{name}.log"

    def _env(self, worker: str = "") -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/root"),
            "DIST_LTO_RE_STATE": str(self.state),
            "DIST_LTO_RE_STORAGE_PORT": str(self.storage_port),
            "DIST_LTO_RE_SCHEDULER_CLIENT_PORT": str(self.scheduler_client_port),
            "DIST_LTO_RE_SCHEDULER_WORKER_PORT": str(self.scheduler_worker_port),
            "DIST_LTO_RE_TLS_PORT": str(self.tls_port) if self.tls_port else "",
            "DIST_LTO_RE_TLS_DIR": self.tls_dir,
            "DIST_LTO_RE_TLS_CLIENT_CA": (
                (Path(self.tls_dir) / "ca.pem").read_text() if self.tls_dir else ""
            ),
        }
        if worker:
            env["DIST_LTO_RE_WORKER"] = worker
        return env

    def _spawn(self, name: str, program: str, config: str, worker: str = "") -> None:
        (self.state / "logs").mkdir(parents=True, exist_ok=True)
        with open(self.log(name), "ab") as log:
            proc = subprocess.Popen(
                [str(BIN / program), str(CONFIG / config)],
                cwd=self.state, env=self._env(worker), stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=self.own_sessions,
                process_group=None if self.own_sessions else 0,
            )  # fmt: skip
        self.pids[name] = proc.pid
        self.save()

    def _wait_for(self, name: str, ready: object) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not ready():  # type: ignore[operator]
            if not _alive(self.pids[name]):
                raise EngineError(f"{name} exited at start; its log: {self.log(name)}\n"
                                  + _tail(self.log(name)))  # fmt: skip
            if time.monotonic() > deadline:
                raise EngineError(f"{name} not ready after {START_TIMEOUT:.0f} s; its log:"
                                  f" {self.log(name)}\n" + _tail(self.log(name)))  # fmt: skip
            time.sleep(0.05)

    def start_core(self) -> None:
        for name in ("cas-state", "ac-state"):
            (self.state / "storage" / name).mkdir(parents=True, exist_ok=True)
        self._spawn("storage", "bb_storage", "storage.jsonnet")
        self._wait_for(
            "storage",
            lambda: (
                _listening(self.storage_port) and (not self.tls_port or _listening(self.tls_port))
            ),
        )
        self._spawn("scheduler", "bb_scheduler", "scheduler.jsonnet")
        self._wait_for(
            "scheduler",
            lambda: (
                _listening(self.scheduler_client_port) and _listening(self.scheduler_worker_port)
            ),
        )

    def start_worker(self, worker: str) -> None:
        """Start worker `worker` (and its runner); a killed one can be started again."""
        base = self.state / worker
        shutil.rmtree(base / "build", ignore_errors=True)
        (base / "build").mkdir(parents=True, exist_ok=True)
        (base / "cache").mkdir(parents=True, exist_ok=True)
        sock = base / "runner.sock"
        if sock.exists():
            sock.unlink()
        self._spawn(f"runner-{worker}", "bb_runner", "runner.jsonnet", worker)
        self._wait_for(f"runner-{worker}", sock.exists)
        self._spawn(f"worker-{worker}", "bb_worker", "worker.jsonnet", worker)
        # Nothing to wait for: the scheduler's predeclared platform queue holds actions
        # until a worker takes them. Only make sure the worker did not die at start.
        time.sleep(0.2)
        name = f"worker-{worker}"
        if not _alive(self.pids[name]):
            raise EngineError(f"{name} exited at start; its log: {self.log(name)}\n"
                              + _tail(self.log(name)))  # fmt: skip

    def kill_worker(self, worker: str) -> None:
        """SIGKILL a worker and its runner, as a crashed machine would vanish."""
        for name in (f"worker-{worker}", f"runner-{worker}"):
            pid = self.pids.pop(name, None)
            if pid is not None:
                _kill(pid, signal.SIGKILL)
        self.save()

    def stop(self) -> None:
        for name in sorted(
            self.pids,
            key=lambda n: ("worker", "runner", "sched", "stor").index(
                next(p for p in ("worker", "runner", "sched", "stor") if n.startswith(p))
            ),
        ):
            _kill(self.pids[name], signal.SIGTERM)
        for pid in self.pids.values():
            deadline = time.monotonic() + 10
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _alive(pid):
                _kill(pid, signal.SIGKILL)
        self.pids.clear()
        (self.state / "engine.json").unlink(missing_ok=True)

    def running(self) -> bool:
        return (
            bool(self.pids)
            and all(_alive(p) for p in self.pids.values())
            and _listening(self.storage_port)
            and (not self.tls_port or _listening(self.tls_port))
        )

    def save(self) -> None:
        doc = {
            "address": self.address,
            "storage_port": self.storage_port,
            "scheduler_client_port": self.scheduler_client_port,
            "scheduler_worker_port": self.scheduler_worker_port,
            "pids": self.pids,
            "tls_port": self.tls_port,
            "tls_dir": self.tls_dir,
        }
        tmp = self.state / ".engine.json.tmp"
        tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        tmp.replace(self.state / "engine.json")

    @classmethod
    def load(cls, state: Path) -> Engine | None:
        try:
            doc = json.loads((state / "engine.json").read_text())
        except (OSError, ValueError):
            return None
        return cls(state, doc["storage_port"], doc["scheduler_client_port"],
                   doc["scheduler_worker_port"], dict(doc["pids"]), doc.get("tls_port", 0),
                   doc.get("tls_dir", ""))  # fmt: skip


def _kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start(
    state: Path,
    *,
    workers: int = 1,
    port: int | None = None,
    tls_dir: Path | None = None,
    own_sessions: bool = True,
) -> Engine:
    """Start an engine with `workers` workers (w1, w2, ...) keeping its state in `state`;
    an engine already running there is returned as it is (idempotent). With `tls_dir`
    (what `pki.make_pki` made), clients talk to it through a TLS listener that wants a
    client certificate and a bearer token (`Engine.address`). `own_sessions`: see
    `Engine.own_sessions`."""
    state = state.resolve()
    existing = Engine.load(state)
    if existing is not None:
        if existing.running():
            return existing
        existing.stop()
    build()
    state.mkdir(parents=True, exist_ok=True)
    count = 4 if tls_dir else 3
    ports = list(range(port, port + count)) if port else free_ports(count)
    for p in ports:
        if _listening(p):
            raise EngineError(f"port {p} on 127.0.0.1 is already in use")
    engine = Engine(state, *ports[:3], own_sessions=own_sessions)
    if tls_dir is not None:
        engine.tls_port, engine.tls_dir = ports[3], str(tls_dir.resolve())
    try:
        engine.start_core()
        for i in range(1, workers + 1):
            engine.start_worker(f"w{i}")
    except BaseException:
        engine.stop()
        raise
    return engine


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=".ci/remote-engine",
        description="Build, start and stop BuildBarn on loopback for dist-lto's remote"
        " execution (docs/remote.md).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build the BuildBarn binaries into .cache/buildbarn/bin")
    p_start = sub.add_parser("start", help="start an engine (no-op if it runs); print its address")
    p_start.add_argument("--workers", type=int, default=2, help="workers to start (default 2)")
    p_start.add_argument(
        "--port", type=int, default=DEFAULT_PORT,
        help=f"client port; the scheduler takes the next two (default {DEFAULT_PORT})",
    )  # fmt: skip
    for name in ("start", "stop", "status"):
        target = (
            p_start
            if name == "start"
            else sub.add_parser(
                name, help="stop the engine" if name == "stop" else "print the address if it runs"
            )
        )
        target.add_argument(
            "--state", type=Path, default=DEFAULT_STATE,
            help=f"state directory (default {DEFAULT_STATE})",
        )  # fmt: skip
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            seconds = build(verbose=True)
            print(f"buildbarn: binaries in {BIN}" + (f" (built in {seconds:.0f} s)" if seconds
                                                     else " (already built)"))  # fmt: skip
        elif args.command == "start":
            engine = start(args.state, workers=args.workers, port=args.port)
            print(engine.address)
        elif args.command == "stop":
            engine = Engine.load(args.state.resolve())
            if engine is not None:
                engine.stop()
        else:
            engine = Engine.load(args.state.resolve())
            if engine is None or not engine.running():
                print("not running", file=sys.stderr)
                return 1
            print(engine.address)
    except EngineError as err:
        print(f"remote-engine: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
