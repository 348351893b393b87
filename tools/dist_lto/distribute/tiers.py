"""The tiers a job's result comes from, cheapest first: the local result cache; then
the remote engine (`--remote`), or the remote cache before a compile here
(`--remote-cache`); then a compile here, whose result is stored in the caches.

A cache or remote cache that fails costs speed, never the link: each warns once and is
passed over. A result that fails its checks (a damaged entry, a blob that does not
match its digest) is refused and recorded, and the job runs again.
"""

from __future__ import annotations

import os
import time

from dist_lto import TYPE_CHECKING
from dist_lto.backend import VerifiedModules, check_primary, run_backend
from dist_lto.distribute.reporting import Outcome, Status
from dist_lto.fsutil import remove_output

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable

    from dist_lto.distribute.cache_key import KeyMaker, WrittenIndex
    from dist_lto.distribute.compilers import WorkerCompiler
    from dist_lto.distribute.remote.cache_only import RemoteCache
    from dist_lto.distribute.remote.executor import RemoteExecutor
    from dist_lto.distribute.reporting import Reporter
    from dist_lto.distribute.result_cache import ResultCache
    from dist_lto.errors import DistLtoError
    from dist_lto.formats.jobfile import Job, JobFile

    Step = Callable[[str, int], None]
    """`step(name, started_ns)`: a step of the job ended (for the trace)."""


class Child:
    """Where a job's compiler is announced: `started(pid)` once it runs, `ended()` once
    it has been waited for (the pool pins it in between, to stop it early)."""

    __slots__ = ("ended", "started")

    def __init__(self, started: Callable[[int], None], ended: Callable[[], None]) -> None:
        self.started = started
        self.ended = ended


class Tiers:
    """Runs one job through the tiers; counts what each gave. Thread-safe through `lock`,
    the pool's, which also guards the reporter."""

    def __init__(
        self,
        files: JobFile,
        reporter: Reporter,
        lock: threading.Condition,
        cache: ResultCache | None = None,
        keys: KeyMaker | None = None,
        remote: RemoteExecutor | None = None,
        remote_cache: RemoteCache | None = None,
    ) -> None:
        self.files = files
        self.reporter = reporter
        self.lock = lock
        self.cache = cache
        self.keys = keys
        self.remote = remote
        """Where jobs run when not here: the seam between local and remote execution."""
        self.remote_cache = remote_cache
        """A shared cache of results for jobs that run here (`--remote-cache`)."""
        self.remote_cache_trouble = ""
        """Why the remote cache stopped being used (it costs reuse, never the link)."""
        self.misses = 0
        """Jobs the result cache was asked for and did not have."""
        self.stored = 0
        self.cache_warned = False
        self.remote_damage: list[tuple[str, str]] = []
        """(what, why) for every remote result refused for a blob that failed its digest."""
        self.verified_modules = VerifiedModules()
        """The modules `check_primary` found to match in this link."""

    def run(
        self,
        job: Job,
        compiler: WorkerCompiler,
        child: Child,
        step: Step,
    ) -> Outcome:
        """The job's outputs in place, from the first tier that has them. `child` is told
        when a compiler for the job starts and when it has been waited for."""
        started = time.monotonic_ns()
        index = self._read_index(job)
        key = self._key(job, index)  # before the check: it may remember the module table
        check_primary(
            job.module,
            job.index,
            index.modules() if index is not None else None,
            self.verified_modules,
        )
        if key is not None:
            restored = self._restore(key, job)
            step("cache lookup", started)
            if restored:
                return Outcome(Status.CACHED)
            with self.lock:
                self.misses += 1
        started = time.monotonic_ns()
        if self.remote is not None:
            outcome = self._run_remote(job)
            step("remote", started)
        elif self.remote_cache is not None and self._from_remote_cache(job):
            outcome = Outcome(Status.REMOTE_CACHED)
            step("remote cache lookup", started)
        else:
            status, warnings = self._run_local(job, compiler, child)
            outcome = Outcome(status)
            step("compile", started)
            if self.remote_cache is not None and not self.remote_cache_trouble:
                started = time.monotonic_ns()
                self._to_remote_cache(job, warnings)
                step("remote cache store", started)
        if key is not None and all(os.path.exists(extra) for extra in job.outputs[1:]):
            started = time.monotonic_ns()
            self._store(key, job)
            step("cache store", started)
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

    def _run_local(self, job: Job, compiler: WorkerCompiler, child: Child) -> tuple[Status, bytes]:
        for extra in job.outputs[1:]:
            remove_output(extra)
        try:
            warnings = run_backend(
                self.files.args + job.args_without_output(),
                module=job.module,
                output=job.output,
                on_start=child.started,
                runner=compiler.run,
            )
        except BaseException:
            for extra in job.outputs[1:]:
                remove_output(extra)
            raise
        finally:
            child.ended()
        if warnings:
            with self.lock:
                self.reporter.warnings(warnings)
        if compiler.served:
            return Status.SERVED, warnings or b""
        return (Status.FORKED if compiler.forked else Status.COMPILED), warnings or b""

    def _read_index(self, job: Job) -> WrittenIndex | None:
        """The job's index, read once for its check and its key when there is a key to
        make; None otherwise, or when it cannot be read (the check then says why)."""
        if self.keys is None:
            return None
        from dist_lto.distribute.cache_key import read_index
        from dist_lto.errors import BadInput

        try:
            return read_index(job.index)
        except BadInput:
            return None

    def _key(self, job: Job, index: WrittenIndex | None) -> str | None:
        if self.keys is None:
            return None
        return self.keys.key(job, index)

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

    def _cache_trouble(self, err: OSError) -> None:
        """A cache that cannot be read or written costs speed, never the link: warn once."""
        with self.lock:
            if not self.cache_warned:
                self.cache_warned = True
                where = err.filename or (self.cache.root if self.cache else "")
                self.reporter.note(f"warning: result cache: {where}: {err.strerror or err}")
