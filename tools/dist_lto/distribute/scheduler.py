"""Running one job file's jobs: worker threads, biggest module first, first failure stops all.

Each worker takes a slot of the build's jobserver when there is one (`jobserver.py`),
then the next job, asks the result cache, runs the job here (through its fork server
when it has one) or on the remote engine, and stores the result (with a remote cache,
asked after the local one and given what compiled here); with `--trace`, each
job and its steps become slices of that worker's thread (`trace.py`). The first
failure stops the rest: no new job starts and running compilers get the signal.
"""

import _signal
import os
import threading
import time

from dist_lto import TYPE_CHECKING, backend
from dist_lto.backend import StopRequested, check_primary, raise_stop, run_backend, run_tool
from dist_lto.distribute.reporting import Outcome, Reporter, Status
from dist_lto.errors import EXIT_INTERNAL, DistLtoError
from dist_lto.formats.jobfile import Job, JobFile
from dist_lto.fsutil import remove_quietly

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from dist_lto.distribute.cache_key import KeyMaker
    from dist_lto.distribute.jobserver import JobSlots
    from dist_lto.distribute.remote.cache_only import RemoteCache
    from dist_lto.distribute.remote.executor import RemoteExecutor
    from dist_lto.distribute.result_cache import ResultCache
    from dist_lto.distribute.trace import Trace
    from dist_lto.process.forkserver import ForkServer

STOP_SIGNALS = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP)


def _ignore(_signum: int, _frame: object) -> None:
    pass


class WorkerCompiler:
    """How one worker thread runs compilers: forked from its own fork server while it has
    one that works (`forkserver.py`), else started directly."""

    def __init__(
        self,
        compiler: str,
        preload: str | None,
        on_trouble: "Callable[[str], None]",
        env: "Mapping[str, str] | None" = None,
    ) -> None:
        self.compiler = compiler
        self.preload = preload
        self.env = env
        """The compilers' environment (None: this process's)."""
        self.on_trouble = on_trouble
        """Told why the worker gave its fork server up."""
        self.server: ForkServer | None = None
        self.forked = False
        """Whether the last `run` went through the fork server."""

    def run(self, argv: list[str], on_start: "Callable[[int], None] | None") -> tuple[int, bytes]:
        from dist_lto.process.forkserver import ForkServer, ForkServerLost

        if self.server is None and self.preload is not None:
            try:
                self.server = ForkServer(self.compiler, self.preload, self.env)
            except DistLtoError as err:
                self._give_up(err)
        if self.server is not None:
            try:
                status_and_stderr = self.server.run(argv, on_start)
            except ForkServerLost as err:  # the job has not begun: run it directly
                self._give_up(err)
            else:
                self.forked = True
                return status_and_stderr
        self.forked = False
        return run_tool(argv, on_start, self.env)

    def _give_up(self, err: DistLtoError) -> None:
        self.close()
        self.preload = None
        self.on_trouble(err.message)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None


class Distribution:
    """Runs one job file's jobs on `workers` threads; `run` raises the first failure."""

    def __init__(
        self,
        files: JobFile,
        workers: int,
        reporter: Reporter,
        cache: "ResultCache | None" = None,
        keys: "KeyMaker | None" = None,
        remote: "RemoteExecutor | None" = None,
        preload: str | None = None,
        *,
        slots: "JobSlots | None" = None,
        trace: "Trace | None" = None,
        remote_cache: "RemoteCache | None" = None,
        env: "Mapping[str, str] | None" = None,
    ) -> None:
        self.files = files
        self.env = env
        """The compilers' environment (None: this process's)."""
        self.slots = slots
        """The build's job slots (GNU make's jobserver): each job runs in one."""
        self.trace = trace
        self.preload = preload
        """The fork server's library, when jobs are forked (`WorkerCompiler`)."""
        self.remote = remote
        """Where jobs run when not here: the seam between local and remote execution."""
        self.remote_cache = remote_cache
        """A shared cache of results for jobs that run here (`--remote-cache`)."""
        self.remote_cache_trouble = ""
        """Why the remote cache stopped being used (it costs reuse, never the link)."""
        self.reporter = reporter
        self.cache = cache
        self.keys = keys
        self.order = sorted(files.jobs, key=lambda job: -_size(job.module))
        """Biggest module first: one long backend started last would finish last."""
        self.workers = min(workers, len(self.order))
        self.lock = threading.Condition()
        self.next = 0
        self.running = 0
        self.done = 0
        self.cached = 0
        self.misses = 0
        """Jobs the result cache was asked for and did not have."""
        self.stored = 0
        self.failed = 0
        self.slowest: tuple[float, str] = (0.0, "")
        """(seconds, module) of the job that took longest."""
        self.active = 0
        self.stopping = 0
        """0, or the signal sent to running compilers once the distribution stops."""
        self.failure: DistLtoError | None = None
        self.cache_warned = False
        self.remote_damage: list[tuple[str, str]] = []
        """(what, why) for every remote result refused for a blob that failed its digest."""
        self.fork_server_warned = False
        self.children: dict[int, int] = {}
        """Job number -> pidfd (or pid where pidfds do not exist) of its running compiler."""

    def run(self) -> None:
        threads = [
            threading.Thread(target=self._work, args=(i,), name=f"dist-lto-{i}", daemon=True)
            for i in range(self.workers)
        ]
        previous = {sig: _signal.signal(sig, raise_stop) for sig in STOP_SIGNALS}
        try:
            try:
                with self.lock:
                    for thread in threads:
                        self.active += 1
                        thread.start()
                    while self.active:
                        self.lock.wait(0.25 if self.reporter.tty else 1.0)
                        self.reporter.progress(self.done, self.cached, self.running)
            except StopRequested as stop:
                self._halt(stop.signum, threads)
                self.remove_outputs()
                raise DistLtoError(
                    backend.stop_reason(stop.signum), status=128 + stop.signum
                ) from None
            except BaseException:
                self._halt(_signal.SIGTERM, threads)
                raise
        finally:
            for sig, handler in previous.items():
                _signal.signal(sig, handler)
            with self.lock:
                self.reporter.end()
        if self.failure is not None:
            raise self.failure
        if self.done != len(self.order):  # every path above counts a job or fails
            raise DistLtoError(f"internal error: {len(self.order) - self.done} jobs did not run")

    def _halt(self, signum: int, threads: list[threading.Thread]) -> None:
        """Stop the running compilers with `signum` and wait until every worker has left
        (each removes its own temporaries). Further stop signals are ignored meanwhile:
        we are stopping already, and must not leave before the workers do."""
        for sig in STOP_SIGNALS:
            _signal.signal(sig, _ignore)  # not SIG_IGN: compilers started now would inherit it
        with self.lock:
            self._stop_children(signum)
        for thread in threads:
            thread.join()

    def remove_outputs(self) -> None:
        """Remove the outputs of every job that ran: once stopped, no link will use them,
        and a linker that was killed cannot remove them any more."""
        for job in self.order[: self.next]:
            for output in job.outputs:
                remove_quietly(output)

    def _stop_children(self, signum: int) -> None:
        """Called with the lock held."""
        if not self.stopping:
            self.stopping = signum
        if self.remote is not None:
            self.remote.stop()
        for handle in self.children.values():
            _signal_child(handle, signum)

    def _over(self) -> bool:
        return bool(self.stopping) or self.next == len(self.order)

    def _work(self, worker: int) -> None:
        compiler = WorkerCompiler(
            self.files.args[0], self.preload, self._fork_server_trouble, self.env
        )
        if self.trace is not None:
            self.trace.name_thread(worker + 1, f"worker {worker + 1}")
        try:
            while True:
                slot = None
                if self.slots is not None:
                    slot = self.slots.acquire(self._over)
                    if slot is None:
                        return
                try:
                    if not self._work_one(worker, compiler):
                        return
                finally:
                    if slot is not None:
                        self.slots.release(slot)
        finally:
            compiler.close()
            with self.lock:
                self.active -= 1
                self.lock.notify()

    def _work_one(self, worker: int, compiler: WorkerCompiler) -> bool:
        """Run the next job, if there is one to run; False when there is none."""
        with self.lock:
            if self._over():
                return False
            job = self.order[self.next]
            self.next += 1
            self.running += 1
        started = time.monotonic()
        started_ns = time.monotonic_ns()
        try:
            outcome = self._run_job(job, compiler, worker)
        except BaseException as err:
            with self.lock:
                self.running -= 1
                self._fail(job, err)
            self._trace_job(worker, job, started_ns, "failed")
            return True
        seconds = time.monotonic() - started
        self._trace_job(worker, job, started_ns, outcome.status.value)
        with self.lock:
            self.running -= 1
            self.done += 1
            self.cached += outcome.status in (Status.CACHED, Status.REMOTE_CACHED)
            if seconds >= self.slowest[0]:
                self.slowest = (seconds, job.module)
            try:  # noqa: SIM105 (contextlib costs an import for one use)
                self.reporter.finished(job, outcome, seconds, self.done)
            except OSError:
                pass  # stderr closed: the job is done all the same
            self.lock.notify()
        return True

    def _trace_job(self, worker: int, job: Job, started_ns: int, how: str) -> None:
        if self.trace is not None:
            self.trace.add(worker + 1, job.module, "job", started_ns, self.trace.now(),
                           {"output": job.output, "outcome": how})  # fmt: skip

    def _step(self, worker: int, name: str, started_ns: int) -> None:
        """A step of a job in the trace (`cache lookup`, `compile`, ...)."""
        if self.trace is not None:
            self.trace.add(worker + 1, name, name, started_ns, self.trace.now())

    def _fail(self, job: Job, err: BaseException) -> None:
        """Record the first failure and stop the rest. Called with the lock held."""
        if self.failure is None and not self.stopping:
            self.failed += 1
            self.failure = _job_failure(self.files, job, err)
            self._stop_children(_signal.SIGTERM)
        self.lock.notify()

    def _run_job(self, job: Job, compiler: WorkerCompiler, worker: int = 0) -> Outcome:
        check_primary(job.module, job.index)
        step = time.monotonic_ns()
        key = self._key(job)
        if key is not None:
            restored = self._restore(key, job)
            self._step(worker, "cache lookup", step)
            if restored:
                return Outcome(Status.CACHED)
            with self.lock:
                self.misses += 1
        step = time.monotonic_ns()
        if self.remote is not None:
            outcome = self._run_remote(job)
            self._step(worker, "remote", step)
        elif self.remote_cache is not None and self._from_remote_cache(job):
            outcome = Outcome(Status.REMOTE_CACHED)
            self._step(worker, "remote cache lookup", step)
        else:
            status, warnings = self._run_local(job, compiler)
            outcome = Outcome(status)
            self._step(worker, "compile", step)
            if self.remote_cache is not None and not self.remote_cache_trouble:
                step = time.monotonic_ns()
                self._to_remote_cache(job, warnings)
                self._step(worker, "remote cache store", step)
        if key is not None and all(os.path.exists(extra) for extra in job.outputs[1:]):
            step = time.monotonic_ns()
            self._store(key, job)
            self._step(worker, "cache store", step)
        return outcome

    def _run_remote(self, job: Job) -> Outcome:
        assert self.remote is not None
        remote = self.remote.run(job)
        self.remote_damage.extend(remote.damage)
        if remote.stderr:
            with self.lock:
                self.reporter.warnings(remote.stderr)
        return Outcome(remote.how, remote.worker)

    def _from_remote_cache(self, job: Job) -> bool:
        """Whether the remote cache had the job (its outputs are then in place). A result
        that fails a check is refused (the job compiles); a service that fails is left
        alone for the rest of the link, with one warning."""
        from dist_lto.backend import BackendFailed
        from dist_lto.distribute.remote.connection import RemoteFailed

        assert self.remote_cache is not None
        if self.remote_cache_trouble:
            return False
        try:
            stderr, damage = self.remote_cache.lookup(job)
        except BackendFailed as err:  # exit 0 but no complete object: never use it
            with self.lock:
                self.remote_damage.append((f"remote result of {job.output}", err.message))
            return False
        except RemoteFailed as err:
            self._remote_cache_failed(err)
            return False
        with self.lock:
            self.remote_damage.extend(damage)
            if stderr:
                self.reporter.warnings(stderr)
        return stderr is not None

    def _to_remote_cache(self, job: Job, warnings: bytes) -> None:
        from dist_lto.distribute.remote.connection import RemoteFailed

        assert self.remote_cache is not None
        try:
            self.remote_cache.upload(job, warnings)
        except RemoteFailed as err:
            self._remote_cache_failed(err)

    def _remote_cache_failed(self, err: DistLtoError) -> None:
        with self.lock:
            if not self.remote_cache_trouble:
                self.remote_cache_trouble = err.message
                self.reporter.note(f"warning: remote cache not used from now on: {err.message}")

    def _run_local(self, job: Job, compiler: WorkerCompiler) -> tuple[Status, bytes]:
        for extra in job.outputs[1:]:
            remove_quietly(extra)
        try:
            warnings = run_backend(
                self.files.args + job.args_without_output(),
                module=job.module,
                output=job.output,
                on_start=lambda pid: self._started(job, pid),
                runner=compiler.run,
            )
        except BaseException:
            for extra in job.outputs[1:]:
                remove_quietly(extra)
            raise
        finally:
            with self.lock:
                handle = self.children.pop(job.number, None)
            if handle is not None and handle >= 0 and _HAVE_PIDFD:
                os.close(handle)
        if warnings:
            with self.lock:
                self.reporter.warnings(warnings)
        return (Status.FORKED if compiler.forked else Status.COMPILED), warnings or b""

    def _started(self, job: Job, pid: int) -> None:
        """The job's compiler runs: pin it, so `_stop_children` can reach it (and only it)."""
        handle = pid
        if _HAVE_PIDFD:
            try:
                handle = os.pidfd_open(pid)
            except OSError:
                handle = -1  # out of descriptors: it cannot be stopped early, only waited for
        with self.lock:
            self.children[job.number] = handle
            if self.stopping:
                _signal_child(handle, self.stopping)

    def _key(self, job: Job) -> str | None:
        if self.keys is None:
            return None
        return self.keys.key(job)

    def _restore(self, key: str, job: Job) -> bool:
        if self.cache is None:
            return False
        try:
            return self.cache.restore(key, job.outputs)
        except OSError as err:
            self._cache_trouble(err)
            return False

    def _store(self, key: str, job: Job) -> None:
        if self.cache is None:
            return
        try:
            self.cache.store(key, job.outputs)
        except OSError as err:
            self._cache_trouble(err)
            return
        with self.lock:
            self.stored += 1

    def _fork_server_trouble(self, message: str) -> None:
        """Forking saves time, and its loss costs only that: warn once, unless stopping
        (an interrupt from the terminal reaches the servers too)."""
        with self.lock:
            if not self.fork_server_warned and not self.stopping:
                self.fork_server_warned = True
                self.reporter.note(f"warning: {message}; starting a compiler per job")

    def _cache_trouble(self, err: OSError) -> None:
        """A cache that cannot be read or written costs speed, never the link: warn once."""
        with self.lock:
            if not self.cache_warned:
                self.cache_warned = True
                where = err.filename or (self.cache.root if self.cache else "")
                self.reporter.note(f"warning: result cache: {where}: {err.strerror or err}")


_HAVE_PIDFD = hasattr(os, "pidfd_open") and hasattr(_signal, "pidfd_send_signal")


def _signal_child(handle: int, signum: int) -> None:
    if handle < 0:
        return
    try:
        if _HAVE_PIDFD:
            _signal.pidfd_send_signal(handle, signum)
        else:
            os.kill(handle, signum)
    except OSError:
        pass  # it has exited already


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _job_failure(files: JobFile, job: Job, err: BaseException) -> DistLtoError:
    """One line naming the job, then its command and whatever the compiler printed."""
    import shlex

    where = f"job {job.number + 1} of {len(files.jobs)} ({job.module} -> {job.output})"
    command = "command: " + " ".join(shlex.quote(arg) for arg in files.command(job)) + "\n"
    if isinstance(err, DistLtoError):
        message = err.message.removeprefix(f"{job.module}: ")  # already in `where`
        return DistLtoError(f"{where}: {message}", status=err.status, detail=command + err.detail)
    if isinstance(err, OSError):
        return DistLtoError(
            f"{where}: {err.filename or ''}: {err.strerror or err}",
            status=EXIT_INTERNAL,
            detail=command,
        )
    return DistLtoError(
        f"{where}: internal error: {type(err).__name__}: {err}",
        status=EXIT_INTERNAL,
        detail=command,
    )
