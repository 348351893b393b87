"""Backend compiles forked from a waiting clang instead of started afresh.

A distributor runs one clang per module. Each start of a clang linked against shared
libLLVM and libclang-cpp spends CPU before it reads its input (binding symbols across
those libraries, then static constructors): for small modules, more than the compile
itself (docs/benchmarks.md).
`forkserver.c`, preloaded into one clang per distributor worker, does that work once and
then forks the compiler's own `main` for every job; see its header for the protocol.

Used only where it is the same as starting the compiler: `common.args[0]` is an ELF
program named clang*, run directly (no wrapper before it), no LD_PRELOAD of the user's
is in force, and Linux with glibc. Anything else, or a server that does not come up, and the
distributor starts a compiler per job as before. The preload library is built with the
job file's own clang the first time it is needed and kept in the per-user cache
directory (whatever --cache-dir says: it belongs to this machine).
"""

import os
import sys

from dist_lto import TYPE_CHECKING
from dist_lto.errors import BadInput, DistLtoError
from dist_lto.fsutil import remove_quietly, temp_path_for
from dist_lto.installed import package_file
from dist_lto.llvm.toolchain import which
from dist_lto.process.children import describe_status, exit_status, reap, run_tool, spawn

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from socket import socket

SOURCE = package_file("process", "forkserver.c")
HEADER = package_file("process", "jobsocket.h")
"""The job socket's server side, included by this source and by the compile server's."""
FD_VARIABLE = "DIST_LTO_FORK_SERVER_FD"
SERVER_FD = 3
_RECORD_SIZE = 5


class ForkServerLost(DistLtoError):
    """The server went away; before a job started, the caller may run it directly."""


class JobDeclined(DistLtoError):
    """The server does not run this job (cc1server.cpp): the caller runs it elsewhere."""


def unusable_reason(args: list[str]) -> str | None:
    """Why the compiler of `common.args` cannot be fork-served (None: it can)."""
    compiler = args[0]
    if not os.path.basename(compiler).startswith("clang"):
        return f"{compiler} is not clang"
    if len(args) > 1 and not args[1].startswith("-"):
        return f"{compiler} is a wrapper around {args[1]}"
    if sys.platform != "linux":
        return "not Linux"
    if not _glibc():
        return "the C library is not glibc"
    if os.environ.get("LD_PRELOAD"):
        return "LD_PRELOAD is set"
    path = which(compiler)
    if path is None:
        return f"{compiler} not found"
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"\x7fELF":
                return f"{path} is not an ELF program"
    except OSError as err:
        return f"{path}: {err.strerror}"
    return None


def _glibc() -> bool:
    """Whether this system's C library is glibc: the preload library takes over glibc's
    `__libc_start_main`, which other C libraries (musl) do not call the same way. Asked of
    `confstr`, which costs no import (`platform.libc_ver` would load `platform` and read
    the interpreter's binary)."""
    return _libc_version().startswith("glibc")


def _libc_version() -> str:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return ""


def library(compiler: str, root: str) -> str:
    """The preload library under `root`, built with `compiler` if it is not there yet.

    Named after the hash of its source, the machine and the C library, so a changed
    source, another architecture or another glibc (a cache directory shared between
    machines) gets its own; written through a temporary and a rename, so links
    building it at once each see a complete one. DistLtoError if it cannot be built.
    """
    import hashlib

    try:
        source = read_sources(SOURCE)
        host = f"{os.uname().machine}\0{_libc_version()}".encode()
        digest = hashlib.sha256(source + b"\0" + host).hexdigest()[:24]
        path = os.path.join(root, "forkserver", f"forkserver-{digest}.so")
        built_once(path, lambda tmp: _build(compiler, tmp))
    except OSError as err:
        raise DistLtoError(f"{err.filename or SOURCE}: {err.strerror}") from None
    return path


def read_sources(source: str) -> bytes:
    """`source` and the header it includes, as the key of what is built from them."""
    with open(source, "rb") as f, open(HEADER, "rb") as h:
        return f.read() + b"\0" + h.read()


def built_once(path: str, build: "Callable[[str], None]") -> None:
    """`build(TEMPORARY)` renamed to `path` unless `path` is there already: processes
    building it at once each see a complete one. OSError from the file system."""
    if os.path.exists(path):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = temp_path_for(path)
    try:
        build(tmp)
        os.replace(tmp, path)
    finally:
        remove_quietly(tmp)


def _build(compiler: str, output: str) -> None:
    command = [compiler, "-shared", "-fPIC", "-O2", "-fuse-ld=lld", "-o", output, SOURCE, "-ldl"]
    status, stderr = run_tool(command)
    if status != 0:
        lines = stderr.decode(errors="replace").strip().splitlines()
        raise DistLtoError(
            f"cannot build {output}: {compiler} {describe_status(status)}"
            + (f": {lines[-1]}" if lines else "")
        )


class ForkServer:
    """One clang waiting to fork jobs; used by one thread at a time.

    `run` has the contract of `children.run_tool` (the distributor passes it to
    `run_backend`), except that it leaves stop signals to the caller: the distributor
    stops jobs through the pids that `on_start` receives.
    """

    def __init__(self, compiler: str, preload: str, env: "Mapping[str, str] | None" = None) -> None:
        import socket

        self.compiler = compiler
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        self.pid = 0
        self.ended = 0
        """The server's wait status once `close` has reaped it."""
        try:
            self._start(theirs, preload, os.environ if env is None else env)
        except BaseException:
            self.close()
            raise
        finally:
            theirs.close()

    def _start(self, theirs: "socket", preload: str, base_env: "Mapping[str, str]") -> None:
        env = {**base_env, "LD_PRELOAD": preload, FD_VARIABLE: str(SERVER_FD)}
        self._spawn([self.compiler], env, theirs)

    def _spawn(self, argv: list[str], env: "Mapping[str, str]", theirs: "socket") -> None:
        """Start the server `argv` with the socket `theirs` as its SERVER_FD."""
        given = theirs.fileno()
        moved = os.dup(given) if given == SERVER_FD else given  # dup2(3, 3) keeps CLOEXEC
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            self.pid = spawn(
                argv,
                env,
                [
                    (os.POSIX_SPAWN_DUP2, moved, SERVER_FD),
                    (os.POSIX_SPAWN_DUP2, devnull, 2),  # a server that fails says so by leaving
                ],
                # In our group, like the jobs it forks: it ends, and kills its job, when
                # its client goes (however it died), so it needs no guard.
                own_group=False,
            )
        finally:
            os.close(devnull)
            if moved != given:
                os.close(moved)
        kind, _ = self._receive()
        if kind != b"R":
            raise ForkServerLost(f"{self.compiler}: fork server did not start")

    def run(
        self, argv: list[str], on_start: "Callable[[int], None] | None" = None
    ) -> tuple[int, bytes]:
        """Run `argv` in a process forked from the server: (exit status, stderr)."""
        read_end, write_end = os.pipe()
        try:
            self._send_job(argv, write_end)
        finally:
            os.close(write_end)
        try:
            kind, value = self._receive()
            if kind == b"N":
                raise JobDeclined(f"{self.compiler}: the server leaves this job to others")
            if kind == b"E":
                raise BadInput(f"{argv[0]}: cannot run: {os.strerror(value)}")
            if kind != b"P":
                raise ForkServerLost(f"{self.compiler}: fork server ended before the job began")
            try:
                if on_start is not None:
                    on_start(value)
            finally:
                self._send(b"A")
            chunks = []
            while chunk := os.read(read_end, 65536):
                chunks.append(chunk)
            kind, status = self._receive()
            if kind != b"S":
                raise DistLtoError(f"{argv[0]}: fork server ended while the job ran")
        except (BadInput, ForkServerLost, JobDeclined):
            os.close(read_end)
            raise
        except BaseException:
            os.close(read_end)  # first: a job writing to a pipe nobody reads never ends
            self.close()  # out of step with the server: it serves no more jobs
            raise
        os.close(read_end)
        return exit_status(status), b"".join(chunks)

    def _send_job(self, argv: list[str], stderr_fd: int) -> None:
        import socket

        payload = b"".join(os.fsencode(arg) + b"\0" for arg in argv)
        try:
            socket.send_fds(self.sock, [payload], [stderr_fd])
        except OSError:  # gone, or a command line larger than the socket takes
            raise ForkServerLost(
                f"{self.compiler}: fork server ended before the job began"
            ) from None

    def _send(self, record: bytes) -> None:
        try:  # noqa: SIM105 (contextlib is an import for one use)
            self.sock.send(record)
        except OSError:
            pass  # the server is gone: the next record it does not send says so

    def _receive(self) -> tuple[bytes, int]:
        try:
            record = self.sock.recv(_RECORD_SIZE)
        except OSError:
            record = b""
        if len(record) != _RECORD_SIZE:
            return b"", 0
        return record[:1], int.from_bytes(record[1:], sys.byteorder, signed=True)

    def close(self) -> None:
        """End the server (it leaves when its socket closes) and reap it."""
        self.sock.close()
        if self.pid:
            try:  # noqa: SIM105 (contextlib is an import for one use)
                self.ended = reap(self.pid)
            except ChildProcessError:
                pass
            self.pid = 0
