"""One request, run exactly as its command runs it: an opt request as `dist-lto opt`
(below), a plan request (`plan ARGS`) as `dist-lto plan` (`plans.py`).

The arguments are the action's own (Buck2 sends the worker only those, and appends them
to the fallback `dist-lto opt` command otherwise), so they are parsed by the same fast
parser, checked by the same `opt_request.execute` and reported with the same line
(`cli.error_report`) and exit status. Only clang is run differently: in a compile server
of this worker's, or forked from a waiting clang of its own (`CompilerPool`). An
argument list the fast parser declines (never one our rules write) runs the command
itself in a child process, so its messages stay argparse's.
"""

import os
import sys
import threading

from dist_lto import TYPE_CHECKING, opt_request
from dist_lto.backend import VerifiedModules
from dist_lto.cli import error_report, internal_error_report
from dist_lto.distribute.compilers import WorkerCompiler
from dist_lto.errors import EXIT_INTERNAL, DistLtoError
from dist_lto.fsutil import write_output
from dist_lto.installed import MAIN
from dist_lto.process.children import CAPTURE, DEVNULL, action_status, exit_status, run
from dist_lto.worker.links import link_request, run_link
from dist_lto.worker.reuse import backend_for

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from dist_lto.backend import Runner
    from dist_lto.worker.ahead import RunAhead
    from dist_lto.worker.links import LinkerLines
    from dist_lto.worker.plans import Planner
    from dist_lto.worker.reuse import Backend, Store
    from dist_lto.worker.slots import Slots

VERIFIED = VerifiedModules(files=True)
"""The modules this worker's backends found to match their indexes, across requests and
builds."""


def _options(argv: list[str]) -> "opt_request.Options | None":
    """The parsed request, or None for arguments only argparse should judge."""
    parsed = opt_request.parse_fast(argv)
    if parsed is None or parsed.print_command:
        return None
    return parsed


class CompilerPool:
    """Compilers, one per backend compiling at once, kept between requests.

    A `WorkerCompiler` serves one thread at a time; the pool grows to the most backends
    compiled at once (`slots.py`) and hands idle ones out again. Its backends run in a
    compile server (`process/cc1server.py`) where the compiler's headers let the worker
    build one, else forked (`process/forkserver.py`), else started directly, as in
    `dist-lto distribute`; the server and the preload library are built (or found) once
    per compiler.
    """

    def __init__(
        self,
        tools_dir: str,
        note: "Callable[[str], None]",
        env: "Mapping[str, str] | None",
        serve: bool = True,
        scratch: str | None = None,
    ) -> None:
        self.tools_dir = tools_dir
        self.serve = serve
        """Whether backends may run in a compile server (`cc1server.py`)."""
        self.note = note
        self.env = env
        """The compilers' environment (None: this process's)."""
        self.scratch = scratch
        """The worker's own directory (its compilers' TMPDIR), where a backend's clang
        writes when it is on the output's file system (`scratch_for`)."""
        self.scratch_device: int | None = None
        if scratch is not None:
            try:
                self.scratch_device = os.stat(scratch).st_dev
            except OSError:
                self.scratch = None
        self.lock = threading.Lock()
        self.preload_lock = threading.Lock()
        self.warm_lock = threading.Lock()
        self.idle: dict[str, list[WorkerCompiler]] = {}
        self.preloads: dict[str, str | None] = {}
        self.servers: dict[str, str | None] = {}
        """Each compiler's compile server program (`cc1server.py`), or None."""
        self.all: list[WorkerCompiler] = []
        self.closed = False

    def _preload(self, compiler: str) -> str | None:
        from dist_lto.process.forkserver import library, unusable_reason

        reason = unusable_reason([compiler])
        if reason is not None:
            self.note(f"no fork server for {compiler}: {reason}")
            return None
        try:
            return library(compiler, self.tools_dir)
        except DistLtoError as err:
            self.note(f"warning: no fork server: {err.message}")
            return None

    def _server(self, compiler: str) -> str | None:
        from dist_lto.process.cc1server import find_server

        try:
            program, why = find_server(compiler, self.tools_dir)
        except DistLtoError as err:
            self.note(f"warning: no compile server: {err.message}")
            return None
        if program is None:
            self.note(f"no compile server for {compiler}: {why}")
        else:
            self.note(f"backends of {compiler} run in compile servers ({program})")
        return program

    def runner(self, compiler: str) -> "Runner":
        """Runs a backend of `compiler` in a compiler of the pool's, taken for the run."""

        def pooled(
            command: list[str], on_start: "Callable[[int], None] | None"
        ) -> tuple[int, bytes]:
            taken = self.take(compiler)
            try:
                return taken.run(command, on_start)
            finally:
                self.give_back(compiler, taken)

        return pooled

    def take(self, compiler: str) -> WorkerCompiler:
        with self.lock:
            idle = self.idle.setdefault(compiler, [])
            if idle:
                return idle.pop()
        with self.preload_lock:  # built once, whoever asks first
            if compiler not in self.preloads:
                self.preloads[compiler] = self._preload(compiler)
                self.servers[compiler] = self._server(compiler) if self.serve else None
            preload = self.preloads[compiler]
            server = self.servers[compiler]
        with self.lock:
            taken = WorkerCompiler(compiler, preload, self._trouble, self.env, server,
                                   self._server_trouble)  # fmt: skip
            self.all.append(taken)
            return taken

    def scratch_for(self, output: str, dwo: str | None = None) -> str | None:
        """Where clang writes the backend whose object goes to `output` (and split DWARF
        to `dwo`), before they are checked and renamed into place
        (`backend.run_backend`): the worker's own directory when they are on its file
        system, else None (a directory made beside each)."""
        if self.scratch is None:
            return None
        for path in (output, dwo) if dwo else (output,):
            try:
                device = os.stat(os.path.dirname(path) or ".").st_dev
            except OSError:
                return None
            if device != self.scratch_device:
                return None
        return self.scratch

    def warm(self, compiler: str) -> None:
        """Start one server of `compiler`'s backends unless the pool has one already: what a
        `--ready` request asks for (every link of a build sends one, at once)."""
        with self.warm_lock:
            with self.lock:
                if any(c.compiler == compiler for c in self.all):
                    return
            taken = self.take(compiler)
            try:
                taken.start()
            finally:
                self.give_back(compiler, taken)

    def give_back(self, compiler: str, taken: WorkerCompiler) -> None:
        with self.lock:
            if self.closed:
                taken.close()
            else:
                self.idle.setdefault(compiler, []).append(taken)

    def _trouble(self, message: str) -> None:
        self.note(f"warning: {message}; starting a compiler per request")

    def _server_trouble(self, message: str) -> None:
        self.note(f"warning: {message}; forking compilers instead")

    def close(self) -> None:
        """End every fork server (each kills a job it still runs, then exits)."""
        with self.lock:
            self.closed = True
            every = list(self.all)
        for compiler in every:
            compiler.close()


class Reply:
    """What the action exits with and prints (its stderr)."""

    __slots__ = ("status", "stderr")

    def __init__(self, status: int, stderr: bytes) -> None:
        self.status = status
        self.stderr = stderr


class Running:
    """A request's clang, so that a cancelled or timed-out request can stop it."""

    def __init__(self, on_stop: "Callable[[], None] | None" = None) -> None:
        self.lock = threading.Lock()
        self.pidfd = -1
        self.stopped = False
        self.timed_out = False
        self.on_stop = on_stop
        """Told once the request is stopped (it may be waiting for its turn to compile)."""
        self.parts: list[Running] = []
        """The clangs of a batch's backends compiling side by side, stopped with it."""

    def part(self) -> "Running":
        """One backend's clang of a batch compiling side by side (`_side_by_side`)."""
        part = Running(self.on_stop)
        with self.lock:
            self.parts.append(part)
            if self.stopped:
                part.stopped = True
        return part

    def started(self, pid: int) -> None:
        with self.lock:
            if self.pidfd >= 0:  # the importer's (worker/reuse.py), before clang's
                os.close(self.pidfd)
            try:
                self.pidfd = os.pidfd_open(pid)
            except OSError:
                self.pidfd = -1
            if self.stopped:
                self._kill()

    def time_out(self) -> None:
        self.timed_out = True
        self.stop()

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            self._kill()
            parts = list(self.parts)
        for part in parts:
            part.stop()
        if self.on_stop is not None:
            self.on_stop()

    def _kill(self) -> None:
        if self.pidfd >= 0:
            import signal

            try:  # noqa: SIM105 (gone already)
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            except OSError:
                pass

    def close(self) -> None:
        with self.lock:
            if self.pidfd >= 0:
                os.close(self.pidfd)
                self.pidfd = -1


def run_request(
    argv: list[str],
    pool: CompilerPool,
    running: Running,
    slots: "Slots",
    store: "Store | None" = None,
    planner: "Planner | None" = None,
    ahead: "RunAhead | None" = None,
    links: "LinkerLines | None" = None,
) -> Reply:
    """Run one request's backend, its clang in its turn among the requests in flight
    (`slots`), with the worker's reuse `store` if it has one, or take its object if it
    ran `ahead`; or, given a `planner`, a plan request; or, given `links`, a final link
    (`links.py`); never raises. A batch's warnings come before its failure, if any."""
    warnings = b""
    try:
        if planner is not None and argv[:1] == ["plan"]:
            return _run_plan(argv[1:], planner, running, ahead, links)
        if links is not None and link_request(argv):
            return run_link(argv, links, running)
        opts = _options(argv)
        if opts is None:
            return _run_command(argv)
        if opts.ready is not None:  # a server for the first backend, a planner for the plan
            if planner is not None:
                planner.warm()
            pool.warm(opts.command[0])
            if store is not None:  # and what the reuse store asks of the compiler once
                store.compiler(opts.command[0])
            if links is not None and opts.link_driver is not None:  # and the link's line
                links.find(opts.link_driver)
            write_output(opts.ready, b"")
            return Reply(0, b"")
        if opts.unweighted and opts.more:
            return _side_by_side(opts.backends(), pool, running, slots, store, ahead)
        size = _size(opts.backends()) if opts.unweighted else 0  # only unweighted go by size
        runner = slots.gate(pool.runner(opts.command[0]), opts.unweighted,
                            lambda: running.stopped, size)  # fmt: skip
        with slots.request(opts.unweighted):  # a batch's backends one after another
            for backend in opts.backends():
                scratch = pool.scratch_for(backend.out, backend.dwo)
                warnings += _run_backend(backend, runner, running, store, ahead, scratch=scratch)
        return Reply(0, warnings)
    except Exception as err:
        return _failure(err, warnings)


def _failure(err: Exception, warnings: bytes) -> Reply:
    """The reply of a request that failed with `err` after printing `warnings`."""
    if isinstance(err, DistLtoError):
        return Reply(err.status, warnings + error_report("opt", err).encode())
    return Reply(EXIT_INTERNAL, warnings + internal_error_report("opt", err).encode())


def _run_backend(
    backend: "opt_request.Options", runner: "Runner", running: Running,
    store: "Store | None", ahead: "RunAhead | None",
    settled: "Callable[[], None] | None" = None, scratch: str | None = None,
) -> bytes:  # fmt: skip
    """One backend of a request: its warnings; DistLtoError if it fails. `settled` is
    told before a wait that is not for a turn: for the backend that ran ahead, or for
    the reuse store's answer. `scratch`: where its clang writes (`CompilerPool.scratch_for`)."""
    try:
        adopted = _ran_ahead(ahead, store, backend, running, settled)
        if adopted is not None:
            return adopted
        reuse = _reuse(store, backend)
        if reuse is not None and settled is not None:
            reuse = _telling_first(settled, reuse)
        return opt_request.execute(backend, runner=runner, on_start=running.started,
                                   reuse=reuse, verified=VERIFIED, scratch=scratch)  # fmt: skip
    finally:
        running.close()


def _telling_first(
    tell: "Callable[[], None]", lookup: "Callable[[list[str]], Backend | None]"
) -> "Callable[[list[str]], Backend | None]":
    """`lookup`, calling `tell` before it asks the reuse store."""

    def told(command: list[str]) -> "Backend | None":
        tell()
        return lookup(command)

    return told


def _side_by_side(
    backends: "list[opt_request.Options]", pool: CompilerPool, running: Running,
    slots: "Slots", store: "Store | None", ahead: "RunAhead | None",
) -> Reply:  # fmt: skip
    """An unweighted batch: its backends compile side by side, each as if it came in an
    unweighted request of its own (the largest first, `jobs` at once while no request
    holds a slot), as a link's backends do in one in-process LLD. They join the line one
    by one, the largest first, each once the one before waits in it (or waits for
    something else: its backend run ahead, the reuse store), so that the first turns go
    to the largest whatever their threads do before. The reply holds their warnings in
    the batch's order; the first backend to fail stops the others, and its error ends
    the reply."""
    parts = [running.part() for _ in backends]
    sizes = [_size([backend]) for backend in backends]
    warnings: list[bytes] = [b""] * len(backends)
    failed: list[tuple[int, Exception]] = []
    lock = threading.Lock()

    def one(i: int, queued: threading.Event) -> None:
        backend, part = backends[i], parts[i]
        runner = slots.gate(pool.runner(backend.command[0]), True, lambda: part.stopped,
                            sizes[i], queued.set)  # fmt: skip
        try:
            with slots.request(True):
                scratch = pool.scratch_for(backend.out, backend.dwo)
                warnings[i] = _run_backend(backend, runner, part, store, ahead, queued.set,
                                           scratch=scratch)  # fmt: skip
        except Exception as err:
            with lock:
                failed.append((i, err))
            if not part.stopped:  # it failed, rather than being stopped: stop the rest
                for other in parts:
                    if other is not part:
                        other.stop()
        finally:
            queued.set()

    threads = []
    for i in sorted(range(len(backends)), key=lambda i: -sizes[i]):
        queued = threading.Event()
        threads.append(threading.Thread(target=one, args=(i, queued), daemon=True))
        threads[-1].start()
        queued.wait()
    for thread in threads:
        thread.join()
    if not failed:
        return Reply(0, b"".join(warnings))
    first, err = next(((i, e) for i, e in failed if not parts[i].stopped), failed[0])
    return _failure(err, b"".join(warnings[:first]))


def _size(backends: "list[opt_request.Options]") -> int:
    """The bytes of `backends`' modules: the larger go first (`slots.py`)."""
    size = 0
    for backend in backends:
        try:  # noqa: SIM105 (its backend says what is wrong with it)
            size += os.stat(backend.input).st_size
        except OSError:
            pass
    return size


def _reuse(
    store: "Store | None", opts: "opt_request.Options"
) -> "Callable[[list[str]], Backend | None] | None":
    """How `opts`' backend looks up its last run in the reuse `store`, if there is one."""
    if store is None:
        return None
    return lambda command: backend_for(store, command, opts.input, opts.index, opts.out, opts.dwo)


def _ran_ahead(
    ahead: "RunAhead | None", store: "Store | None", opts: "opt_request.Options",
    running: Running, settled: "Callable[[], None] | None" = None,
) -> bytes | None:  # fmt: skip
    """The warnings of `opts`' backend if it ran ahead of this request and its object is
    now at `opts.out` (kept in the reuse `store` as if compiled here); None otherwise.
    `settled` is told when it ran ahead, before this waits for it."""
    if ahead is None:
        return None
    candidate = ahead.claim(opts)
    if candidate is None:
        return None
    if settled is not None:
        settled()
    taken = ahead.adopt(candidate, opts, lambda: running.stopped)
    if taken is None:
        return None
    warnings, inputs = taken
    if store is not None:
        seen = backend_for(store, candidate.command, opts.input, opts.index, opts.out,
                           opts.dwo, inputs)  # fmt: skip
        if seen is not None:
            seen.remember(warnings)
    return warnings


def _run_plan(
    argv: list[str],
    planner: "Planner",
    running: Running,
    ahead: "RunAhead | None",
    links: "LinkerLines | None",
) -> Reply:
    """`dist-lto plan ARGV` in a child of the warm planner, told the line behind its
    driver (`links`): its status and its output; once it has succeeded, `ahead` reads
    its plans (beside the reply)."""
    driver = argv[argv.index("--") + 1 :] if "--" in argv else []
    line = links.get(driver, wait=False) if links is not None and driver else None
    try:
        status, output = planner.run(argv, running.started, line)
    except OSError as err:
        return Reply(EXIT_INTERNAL, f"dist-lto plan: error: {err}\n".encode())
    finally:
        running.close()
    if status == 0 and ahead is not None:
        threading.Thread(target=ahead.learn, args=(argv,), daemon=True).start()
    return Reply(action_status(exit_status(status)), output)


def _run_command(argv: list[str]) -> Reply:
    """The command itself, for arguments the worker leaves to argparse."""
    done = run(
        [sys.executable, "-S", "-E", MAIN, "opt", *argv],
        stdin=DEVNULL,
        stdout=CAPTURE,
    )
    # A worker's reply has no stdout: what the command printed there (--print-command)
    # comes first in its stderr.
    return Reply(action_status(done.status), done.stdout + done.stderr)
