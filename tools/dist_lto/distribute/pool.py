"""Running one job file's jobs: worker threads, biggest module first, first failure stops all.

Each worker takes a slot of the build's jobserver when there is one (`jobserver.py`),
then the next job, and gets its result through the tiers (`tiers.py`: the caches, the
remote engine, a compile here through the worker's own fork server); with `--trace`,
each job and its steps become slices of that worker's thread (`trace.py`). The first
failure stops the rest: no new job starts and running compilers get the signal.
"""

from __future__ import annotations

import _signal
import os
import threading
import time

from dist_lto import TYPE_CHECKING
from dist_lto.distribute.compilers import WorkerCompiler
from dist_lto.distribute.reporting import Status
from dist_lto.distribute.tiers import Child
from dist_lto.errors import EXIT_INTERNAL, DistLtoError
from dist_lto.fsutil import remove_output
from dist_lto.process.children import (
    KILL_AFTER_SECONDS,
    StopRequested,
    catch_stop_signals,
    restore_handlers,
    stop_reason,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dist_lto.distribute.jobserver import JobSlots
    from dist_lto.distribute.reporting import Reporter
    from dist_lto.distribute.tiers import Tiers
    from dist_lto.distribute.trace import Trace
    from dist_lto.formats.jobfile import Job, JobFile

STOP_SIGNALS = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP)


def _ignore(_signum: int, _frame: object) -> None:
    pass


class Pool:
    """Runs one job file's jobs on `workers` threads; `run` raises the first failure."""

    def __init__(
        self,
        files: JobFile,
        workers: int,
        reporter: Reporter,
        tiers: Tiers,
        preload: str | None = None,
        *,
        cc1: str | None = None,
        slots: JobSlots | None = None,
        trace: Trace | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.files = files
        self.reporter = reporter
        self.tiers = tiers
        self.lock = tiers.lock
        """Guards the counters, the reporter and the tiers' own state."""
        self.preload = preload
        """The fork server's library, when jobs are forked (`WorkerCompiler`)."""
        self.cc1 = cc1
        """The compile server's program, when jobs run in compile servers."""
        self.slots = slots
        """The build's job slots (GNU make's jobserver): each job runs in one."""
        self.trace = trace
        self.env = env
        """The compilers' environment (None: this process's)."""
        self.order = sorted(files.jobs, key=lambda job: -_size(job.module))
        """Biggest module first: one long backend started last would finish last."""
        self.workers = min(workers, len(self.order))
        self.next = 0
        self.running = 0
        self.done = 0
        self.cached = 0
        self.failed = 0
        self.slowest: tuple[float, str] = (0.0, "")
        """(seconds, module) of the job that took longest."""
        self.active = 0
        self.stopping = 0
        """0, or the signal sent to running compilers once the distribution stops."""
        self.stopped_at = 0.0
        """When (`time.monotonic`) the distribution began to stop."""
        self.failure: DistLtoError | None = None
        self.fork_server_warned = False
        self.compile_server_warned = False
        self.children: dict[int, tuple[int, int]] = {}
        """Job number -> (pidfd, or -1 where pidfds do not exist; pid) of its running
        compiler."""

    def run(self) -> None:
        threads = [
            threading.Thread(target=self._work, args=(i,), name=f"dist-lto-{i}", daemon=True)
            for i in range(self.workers)
        ]
        previous = catch_stop_signals()
        try:
            try:
                with self.lock:
                    for thread in threads:
                        self.active += 1
                        thread.start()
                    while self.active:
                        if self.stopping:
                            self.lock.wait(_STOP_POLL_SECONDS)
                            self._press_stop()
                            continue
                        self.lock.wait(0.25 if self.reporter.tty else 1.0)
                        self.reporter.progress(self.done, self.cached, self.running)
            except StopRequested as stop:
                self._halt(stop.signum, threads)
                self.remove_outputs()
                raise DistLtoError(stop_reason(stop.signum), status=128 + stop.signum) from None
            except BaseException:
                self._halt(_signal.SIGTERM, threads)
                raise
        finally:
            restore_handlers(previous)
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
            while self.active:
                self.lock.wait(_STOP_POLL_SECONDS)
                self._press_stop()
        for thread in threads:
            thread.join()

    def _press_stop(self) -> None:
        """While stopping: SIGKILL the group of every compiler that has left (what is
        left in it, a wrapper's child deaf to the stop signal, holds its stderr open), and
        every group once KILL_AFTER_SECONDS have passed. Called with the lock held."""
        late = time.monotonic() - self.stopped_at > KILL_AFTER_SECONDS
        for handle, pid in self.children.values():
            if pid > 0 and (late or _has_left(handle)):
                _signal_child(handle, pid, _signal.SIGKILL)

    def remove_outputs(self) -> None:
        """Remove the outputs of every job that ran: once stopped, no link will use them,
        and a linker that was killed cannot remove them any more."""
        for job in self.order[: self.next]:
            for output in job.outputs:
                remove_output(output)

    def _stop_children(self, signum: int) -> None:
        """Called with the lock held."""
        if not self.stopping:
            self.stopping = signum
            self.stopped_at = time.monotonic()
        if self.tiers.remote is not None:
            self.tiers.remote.stop()
        for handle, pid in self.children.values():
            _signal_child(handle, pid, signum)

    def _over(self) -> bool:
        return bool(self.stopping) or self.next == len(self.order)

    def _work(self, worker: int) -> None:
        compiler = WorkerCompiler(self.files.args[0], self.preload, self._fork_server_trouble,
                                  self.env, self.cc1, self._compile_server_trouble)  # fmt: skip
        if self.trace is not None:
            self.trace.name_thread(worker + 1, f"worker {worker + 1}")
        try:
            while True:
                slots, slot = self.slots, None
                if slots is not None:
                    slot = slots.acquire(self._over)
                    if slot is None:
                        return
                try:
                    if not self._work_one(worker, compiler):
                        return
                finally:
                    if slots is not None and slot is not None:
                        slots.release(slot)
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

        def step(name: str, step_started_ns: int) -> None:
            if self.trace is not None:
                self.trace.add(worker + 1, name, name, step_started_ns, self.trace.now())

        child = Child(lambda pid: self._started(job, pid), lambda: self._ended(job))
        try:
            outcome = self.tiers.run(job, compiler, child, step)
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

    def _fail(self, job: Job, err: BaseException) -> None:
        """Record the first failure and stop the rest. Called with the lock held."""
        if self.failure is None and not self.stopping:
            self.failed += 1
            self.failure = _job_failure(self.files, job, err)
            self._stop_children(_signal.SIGTERM)
        self.lock.notify()

    def _started(self, job: Job, pid: int) -> None:
        """The job's compiler runs: pin it, so `_stop_children` can reach it (and only it)."""
        handle = -1
        if _HAVE_PIDFD:
            try:
                handle = os.pidfd_open(pid)
            except OSError:
                pid = 0  # out of descriptors: it cannot be stopped early, only waited for
        with self.lock:
            earlier, _ = self.children.get(job.number, (-1, 0))
            if earlier >= 0:  # its compile server's, before the clang that runs it again
                os.close(earlier)
            self.children[job.number] = (handle, pid)
            if self.stopping:
                _signal_child(handle, pid, self.stopping)

    def _ended(self, job: Job) -> None:
        """The job's compiler, if it ran one, has been waited for: unpin it."""
        with self.lock:
            handle, _ = self.children.pop(job.number, (-1, 0))
        if handle >= 0:
            os.close(handle)

    def _compile_server_trouble(self, message: str) -> None:
        with self.lock:
            if not self.compile_server_warned and not self.stopping:
                self.compile_server_warned = True
                self.reporter.note(f"warning: {message}; forking compilers instead")

    def _fork_server_trouble(self, message: str) -> None:
        """Forking saves time, and its loss costs only that: warn once, unless stopping
        (an interrupt from the terminal reaches the servers too)."""
        with self.lock:
            if not self.fork_server_warned and not self.stopping:
                self.fork_server_warned = True
                self.reporter.note(f"warning: {message}; starting a compiler per job")


_HAVE_PIDFD = hasattr(os, "pidfd_open") and hasattr(_signal, "pidfd_send_signal")


_STOP_POLL_SECONDS = 0.05


def _has_left(handle: int) -> bool:
    """Whether the compiler behind pidfd `handle` has exited (it is not reaped yet)."""
    if handle < 0:
        return False
    import select

    return bool(select.select([handle], [], [], 0)[0])


def _signal_child(handle: int, pid: int, signum: int) -> None:
    """Signal a job's compiler and, when it leads a process group (started directly, not
    forked from a fork server), its group: a wrapper's children too. Through its pidfd
    first, which fails once the compiler has been reaped, so its id is not reused yet."""
    if pid <= 0:
        return
    try:
        if handle >= 0:
            _signal.pidfd_send_signal(handle, signum)
        else:
            os.kill(pid, signum)
        if os.getpgid(pid) == pid:
            os.killpg(pid, signum)
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
