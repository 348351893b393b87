"""One distribution: every job of a job file run with the cache, remote service, fork
servers, jobserver, private temporary directory and trace its settings ask for.

`run_jobs` assembles those pieces into the tiers a job's result comes from (`tiers.py`)
and the pool of worker threads that runs the jobs (`pool.py`), runs it, and
always cleans up, records cache use and prints the summary line, whether the jobs
succeeded or not. `dist-lto distribute` runs it on the job file LLD wrote; `dist-lto
link` on the jobs its plans describe.
"""

from __future__ import annotations

import _signal
import os
import stat
import threading

from dist_lto import TYPE_CHECKING
from dist_lto.distribute.pool import Pool
from dist_lto.distribute.relocation import with_module_models
from dist_lto.distribute.tiers import Tiers
from dist_lto.errors import BadInput, DistLtoError
from dist_lto.fsutil import open_input, remove_quietly
from dist_lto.process import children
from dist_lto.tmpdirs import private_tmpdir, remove_private_tmpdir

if TYPE_CHECKING:
    from dist_lto.distribute.cache_key import KeyMaker
    from dist_lto.distribute.jobserver import JobSlots
    from dist_lto.distribute.remote.cache_only import RemoteCache
    from dist_lto.distribute.reporting import Reporter
    from dist_lto.distribute.result_cache import ResultCache
    from dist_lto.distribute.settings import Settings
    from dist_lto.distribute.trace import Trace
    from dist_lto.formats.jobfile import JobFile


def _open_cache(
    files: JobFile, settings: Settings, reporter: Reporter
) -> tuple[ResultCache | None, KeyMaker | None]:
    from dist_lto.distribute.cache_key import KeyMaker, command_identity
    from dist_lto.distribute.result_cache import ALIASES, LAYOUT, ResultCache

    if settings.cache_dir is None:
        return None, None
    cache = ResultCache(settings.cache_dir, settings.cache_max_size)
    try:
        cache.create()
    except OSError as err:
        reporter.note(f"warning: result cache not used: {settings.cache_dir}: {err.strerror}")
        return None, None
    try:
        identity = command_identity(files.args, settings.tools_dir)
    except BadInput as err:  # the jobs will say what is wrong with the compiler, if anything
        reporter.note(f"warning: result cache not used: {err.message}")
        return None, None
    except OSError as err:
        reporter.note(f"warning: result cache not used: {err.filename}: {err.strerror}")
        return None, None
    aliases = os.path.join(cache.root, LAYOUT, ALIASES)
    return cache, KeyMaker(files, identity, aliases)


def _open_remote_cache(
    files: JobFile, settings: Settings, reporter: Reporter
) -> RemoteCache | None:
    """The remote cache (`--remote-cache`): keyed by the compiler's contents, like the
    local one. A service that refuses our TLS settings or credentials, or is not a
    cache clients may write, fails the link: that is a configuration to fix. One that
    cannot be reached only warns, and the jobs compile here."""
    from dist_lto.distribute.cache_key import command_identity
    from dist_lto.distribute.remote.cache_only import RemoteCache
    from dist_lto.distribute.remote.connection import RemoteFailed
    from dist_lto.errors import EXIT_BAD_INPUT

    assert settings.remote is not None
    try:
        identity = command_identity(files.args, settings.tools_dir)
    except (BadInput, OSError):
        return None  # the jobs will say what is wrong with the compiler
    try:
        return RemoteCache(files, settings.remote, "cache-only\0" + identity)
    except RemoteFailed as err:
        if err.status == EXIT_BAD_INPUT or "cannot reach" not in err.message:
            raise
        reporter.note(f"warning: remote cache not used: {err.message}")
        return None


def check_module_paths(files: JobFile) -> None:
    """Refuse a job file whose modules have non-ASCII paths before any backend runs: LLD
    22 wrote them into the indexes as garbage (llvm-project issue 194318), so every
    backend that names one would fail, each with a message about a missing module."""
    for job in files.jobs:
        for i, path in enumerate(job.inputs):
            if i != 1 and not path.isascii():
                raise BadInput(
                    f"{files.path}: job {job.number + 1} ({job.module}): module path {path!r}"
                    " is not ASCII; LLVM 22 corrupts such paths in ThinLTO index files"
                    " (llvm-project issue 194318): give the object an ASCII path, or link"
                    " with in-process ThinLTO"
                )


def check_inputs_are_files(files: JobFile) -> None:
    """Refuse a job file naming an input that is not a regular file (a FIFO would block
    the compiler reading it, a device never end it) before any backend runs. Missing
    inputs are left to the job that needs them (its compiler names them)."""
    seen: set[str] = set()
    for job in files.jobs:
        for path in [*files.inputs, *job.inputs]:
            if path in seen:
                continue
            seen.add(path)
            try:
                mode = os.stat(path).st_mode
            except OSError:
                continue
            if not stat.S_ISREG(mode):
                open_input(path, "job input")  # raises, naming what it is


def _remove_linker_temporaries(files: JobFile, pid: int) -> None:
    """Remove what LLD (process `pid`, gone) wrote for this link and would have removed
    at its end: the job file, each job's index and the archive members it extracted.
    Only files named after its process id: `prog.<pid>.dist-file.json`,
    `<output>.thinlto.bc` for outputs `<module>.<job>.<pid>.native.o`, and members
    `lib.a(m.o at N).<job>.<pid in hex>.o`."""
    job_file = f"{os.path.basename(files.linker_output)}.{pid}.dist-file.json"
    if os.path.basename(files.path) == job_file:
        remove_quietly(files.path)
    member_suffix = f".{pid:X}.o"
    for job in files.jobs:
        if job.output.endswith(f".{pid}.native.o") and job.index == job.output + ".thinlto.bc":
            remove_quietly(job.index)
        for path in job.inputs:
            if path.endswith(member_suffix) and " at " in path and "(" in path:
                remove_quietly(path)


def _report_damage(tiers: Tiers, reporter: Reporter) -> None:
    """One warning for every damaged result this link refused (cache entries evicted,
    remote blobs that did not match their digests): each job ran again instead."""
    damaged = list(tiers.cache.evicted) if tiers.cache is not None else []
    damaged += tiers.remote_damage
    if not damaged:
        return
    where, problem = damaged[0]
    more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
    with tiers.lock:
        reporter.note(
            f"warning: {len(damaged)} damaged cached result{'s' if len(damaged) > 1 else ''}"
            f" not used, the jobs ran again: {where}: {problem}{more}"
        )


def _fork_server_library(
    files: JobFile, settings: Settings, reporter: Reporter, cache_warned: bool
) -> str | None:
    """The fork server's preload library, or None (said with --verbose, or as a warning
    when it cannot be built) where compilers are to be started directly. It lives in
    the cache directory: when that has already been warned about (`cache_warned`), its
    failure there is said only with --verbose."""
    if not settings.fork_server:
        return None
    if not settings.fork_server_dir:
        if settings.verbose:
            reporter.note("no fork server: no directory to keep its library in (no HOME)")
        return None
    from dist_lto.process.forkserver import library, unusable_reason

    reason = unusable_reason(files.args)
    if reason is not None:
        if settings.verbose:
            reporter.note(f"no fork server: {reason}")
        return None
    try:
        return library(files.args[0], settings.fork_server_dir)
    except DistLtoError as err:
        if settings.verbose or not cache_warned:
            reporter.note(f"warning: no fork server: {err.message}")
        return None


def _compile_server(files: JobFile, settings: Settings, reporter: Reporter) -> str | None:
    """The compile server's program (process/cc1server.py), or None (said with
    --verbose) where jobs are to be forked or started. Built once per user (it takes
    seconds), whatever --cache-dir says, as compiler identities are kept."""
    if not settings.compile_server or not settings.tools_dir:
        return None
    from dist_lto.process.cc1server import find_server

    try:
        program, why = find_server(files.args[0], settings.tools_dir)
    except DistLtoError as err:
        reporter.note(f"warning: no compile server: {err.message}")
        return None
    if program is None and settings.verbose:
        reporter.note(f"no compile server: {why}")
    return program


def _job_slots(settings: Settings, reporter: Reporter) -> JobSlots | None:
    """The build's job slots when GNU make advertises a jobserver (local jobs only)."""
    if (settings.remote and not settings.remote.cache_only) or "MAKEFLAGS" not in os.environ:
        return None
    from dist_lto.distribute.jobserver import JobSlots, open_jobserver

    server, why = open_jobserver(os.environ)
    if server is None:
        if why and not settings.quiet:
            # Said without --verbose: the link then runs --jobs backends beside make's
            # own jobs, which overloads the machine without any other sign.
            reporter.note(f"warning: no jobserver: {why}; running --jobs backends at once")
        return None
    return JobSlots(server)


def run_jobs(
    files: JobFile, settings: Settings, reporter: Reporter, trace: Trace | None = None
) -> Pool:
    """Run every job of `files` with the cache, fork servers, jobserver and trace the
    settings ask for, each with a relocation model (`relocation.py`); the first failure is
    raised (after the summary line). A `trace`
    given is filled and left to the caller to write; otherwise --trace is written here."""
    files = with_module_models(files)
    own_trace = trace is None
    if trace is None and settings.trace is not None:
        from dist_lto.distribute.trace import Trace

        trace = Trace(settings.trace, f"{reporter.prog} {files.linker_output}")
    if not files.jobs:
        if own_trace:
            write_trace(trace, reporter)
        return Pool(files, 1, reporter, Tiers(files, reporter, threading.Condition()))
    cache, keys = _open_cache(files, settings, reporter)
    remote = remote_cache = None
    if settings.remote is not None and not settings.remote.cache_only:
        from dist_lto.distribute.remote.executor import RemoteExecutor

        remote = RemoteExecutor(files, settings.remote)
    elif settings.remote is not None:
        remote_cache = _open_remote_cache(files, settings, reporter)
    cache_warned = (
        cache is None
        and settings.cache_dir is not None
        and settings.cache_dir == settings.fork_server_dir
    )
    preload = _fork_server_library(files, settings, reporter, cache_warned)
    cc1 = _compile_server(files, settings, reporter) if preload else None
    slots = _job_slots(settings, reporter)
    private_tmp = private_tmpdir("dist-lto")
    env = os.environ if private_tmp is None else {**os.environ, "TMPDIR": private_tmp}
    tiers = Tiers(files, reporter, threading.Condition(), cache, keys, remote, remote_cache)
    distribution = Pool(
        files, settings.jobs, reporter, tiers, preload, cc1=cc1, slots=slots, trace=trace,
        env=env,
    )  # fmt: skip
    if settings.verbose:
        address = settings.remote.address if settings.remote is not None else ""
        reporter.note(
            f"{len(files.jobs)} jobs from {files.path}, {distribution.workers} at a"
            f" time, cache {settings.cache_dir or 'off'}"
            + (f", remote {address}" if remote else "")
            + (f", remote cache {address}" if remote_cache else "")
            + (f", fork server {preload}" if preload else "")
            + (f", compile server {cc1}" if cc1 else "")
            + (f", jobserver {slots.server.description}" if slots else "")
        )
    failure: DistLtoError | None = None
    try:
        try:
            distribution.run()
        except DistLtoError as err:
            failure = err
            if children.gone_parent():
                # The linker died first; what failed since (its indexes vanished) is the
                # symptom.
                distribution.remove_outputs()
                failure = DistLtoError(
                    children.stop_reason(_signal.SIGHUP), status=128 + _signal.SIGHUP
                )
            raise failure from None
    finally:
        if slots is not None:
            slots.close()
        if remote is not None:
            remote.close()
        if remote_cache is not None:
            remote_cache.close()
        _report_damage(tiers, reporter)
        if children.gone_parent():
            _remove_linker_temporaries(files, children.gone_parent())
        if private_tmp is not None:
            remove_private_tmpdir(private_tmp)
        if cache is not None:
            cache.record_use(distribution.cached, tiers.misses, tiers.stored)
        if own_trace:
            write_trace(trace, reporter)
        _summarise(files, distribution, reporter, failure)
    if cache is not None and tiers.stored:
        try:
            pruned = cache.prune()
        except OSError as err:
            reporter.note(f"warning: result cache: cannot prune: {err.strerror}")
        else:
            if pruned and settings.verbose:
                reporter.note(f"pruned {pruned} cache entries (limit {settings.cache_max_size})")
    return distribution


def _summarise(
    files: JobFile, distribution: Pool, reporter: Reporter, failure: DistLtoError | None
) -> None:
    """The summary line: after the error (its command and the compiler's stderr) when
    the link failed, so that the error stays the first line."""
    with distribution.lock:
        line = reporter.summary(
            os.path.basename(files.linker_output),
            distribution.done,
            distribution.cached,
            distribution.failed,
            distribution.slowest,
        )
        if line is None:
            return
        if failure is None:
            reporter.note(line.removeprefix(f"{reporter.prog}: "))
        else:
            failure.detail += "" if failure.detail.endswith("\n") or not failure.detail else "\n"
            failure.detail += line + "\n"


def write_trace(trace: Trace | None, reporter: Reporter) -> None:
    if trace is None:
        return
    try:
        trace.write()
    except OSError as err:
        reporter.note(f"warning: --trace: {trace.path}: {err.strerror}")
