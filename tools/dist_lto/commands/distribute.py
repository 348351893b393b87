"""`dist-lto distribute`: a distributor for LLD 22's DTLTO that is parallel, strict and cached.

LLD runs it once per link as `<prog> <args...> <output>.<pid>.dist-file.json`
(`clang -fthinlto-distributor=$(command -v dist-lto) -Xthinlto-distributor=distribute`).
It runs every job of the job file (`formats/jobfile.py`) with N worker threads, biggest
module first (`distribute/scheduler.py`), each job through the same strict runner as
`dist-lto opt` (`backend.py`: the module must be its index's primary module, clang's
status passes through, an exit 0 without a complete ELF object fails, outputs appear
only by rename), and keeps results in a cache shared by all links
(`distribute/result_cache.py`). No Python process per job: the threads only wait on
clang processes, which each thread forks from a clang of its own that has started once
(`process/forkserver.py`) where that is the same as starting clang. This module reads
the command line and puts those pieces together.
"""

import _signal
import os
import sys

from dist_lto import TYPE_CHECKING, backend
from dist_lto.backend import stop_with_parent
from dist_lto.cli import argument_parser, parse, scan
from dist_lto.distribute.reporting import PROG, Reporter
from dist_lto.distribute.scheduler import Distribution
from dist_lto.errors import BadInput, DistLtoError
from dist_lto.formats.jobfile import JobFile, read_job_file
from dist_lto.fsutil import remove_quietly

if TYPE_CHECKING:
    import argparse

    from dist_lto.distribute.jobserver import JobSlots
    from dist_lto.distribute.remote.cache_only import RemoteCache
    from dist_lto.distribute.remote.settings import RemoteSettings
    from dist_lto.distribute.result_cache import KeyMaker, ResultCache
    from dist_lto.distribute.trace import Trace

USAGE = (
    "dist-lto distribute [-h] [--jobs N] [--cache-dir DIR | --no-cache]\n"
    "                           [--cache-max-size SIZE] [--no-fork-server]\n"
    "                           [--verbose | --quiet] [--trace FILE]\n"
    "                           [--remote URL | --remote-cache URL] [--instance NAME]\n"
    "                           [--remote-ca PEM] [--remote-client-cert PEM\n"
    "                            --remote-client-key PEM] [--credential-helper PROGRAM]\n"
    "                           [--remote-header K=V]... [--platform K=V]...\n"
    "                           [--remote-timeout SECONDS] JOB_FILE"
)
DESCRIPTION = """\
A distributor for LLD's distributed ThinLTO (DTLTO). LLD runs it with the job file it
wrote as the last argument; give it to clang as

  clang -flto=thin -fuse-ld=lld ... -fthinlto-distributor=$(command -v dist-lto) \\
        -Xthinlto-distributor=distribute [-Xthinlto-distributor=--jobs=4]

It runs `common.args + job.args` for every job, N at a time, biggest module first. A job
fails when its compiler fails (its status; a signal N gives 128+N), when its module is
not the primary module of its index as spelled, or when the compiler exits 0 without a
complete ELF object. On the first failure no new job starts, running ones are stopped,
and the failing job's command and stderr are printed. Objects are written under
temporary names and renamed, so no output is ever left half-written. Results are kept
in a cache shared by every link (safe when links run at once); a job whose compiler,
arguments and input contents were seen before runs no compiler. Each worker forks its
jobs' compilers from a clang that has started once (a fork server), which saves clang's
start-up per job; --no-fork-server starts a compiler per job instead.

With --remote, each job runs as an action on a Remote Execution API engine (BuildBarn,
say) instead of here: the engine's action cache is asked first, so results any machine
computed are reused; inputs go to its CAS, the outputs come back and are checked as
strictly as local ones (docs/remote.md). With --remote-cache, jobs run here and only
results are shared through the service's action cache and CAS (like Bazel's
--remote_cache)."""
EPILOG = """\
The job file is LLD 22's format (docs/distribute.md); anything else is rejected with its
JSON pointer (exit 2). Progress: one updating line when stderr is a terminal, otherwise
one summary line per link (jobs, cached, failed, wall time, slowest module; --quiet
drops it), errors and the compilers' warnings (--verbose lists every job). Under
`make -jK` (MAKEFLAGS --jobserver-auth=fifo:PATH or R,W) every backend beyond the
first takes one of make's job slots, so concurrent links run at most K together.
Exit status: 0 success; 2 bad input, or a remote service that refuses our TLS
settings or credentials; the failing compiler's status (128+N for signal N); 1 when a
compiler exits 0 without a complete object, or the remote service fails; 128+N when
stopped by signal N."""

_VALUE_OPTIONS = {
    "--remote": "remote",
    "--remote-cache": "remote_cache",
    "--instance": "instance",
    "--remote-instance-name": "instance",
    "--remote-ca": "remote_ca",
    "--remote-client-cert": "remote_client_cert",
    "--remote-client-key": "remote_client_key",
    "--credential-helper": "credential_helper",
    "--remote-timeout": "remote_timeout",
    "--jobs": "jobs",
    "-j": "jobs",
    "--cache-dir": "cache_dir",
    "--cache-max-size": "cache_max_size",
    "--trace": "trace",
}
_FLAG_OPTIONS = {
    "--no-cache": "no_cache",
    "--no-fork-server": "no_fork_server",
    "--verbose": "verbose",
    "-v": "verbose",
    "--quiet": "quiet",
    "-q": "quiet",
}


class Options:
    """The command line, as strings (checked by `settings`)."""

    __slots__ = (
        "cache_dir", "cache_max_size", "credential_helper", "instance", "job_file", "jobs",
        "no_cache", "no_fork_server", "platform", "quiet", "remote", "remote_ca",
        "remote_cache", "remote_client_cert", "remote_client_key", "remote_header",
        "remote_timeout", "trace", "verbose",
    )  # fmt: skip

    def __init__(self) -> None:
        self.remote: str | None = None
        self.remote_cache: str | None = None
        self.instance: str | None = None
        self.remote_ca: str | None = None
        self.remote_client_cert: str | None = None
        self.remote_client_key: str | None = None
        self.credential_helper: str | None = None
        self.remote_timeout: str | None = None
        self.remote_header: list[str] = []
        self.platform: list[str] | None = None
        self.job_file = ""
        self.jobs: str | None = None
        self.cache_dir: str | None = None
        self.cache_max_size: str | None = None
        self.no_cache = False
        self.no_fork_server = False
        self.verbose = False
        self.quiet = False
        self.trace: str | None = None


def _parse_fast(argv: list[str]) -> Options | None:
    """The usual command line without argparse; None sends anything unusual to argparse."""
    opts = Options()
    positional = scan(argv, opts, _VALUE_OPTIONS, _FLAG_OPTIONS)
    if positional is None or len(positional) != 1:
        return None
    if (opts.no_cache and opts.cache_dir is not None) or (opts.verbose and opts.quiet):
        return None  # argparse says they exclude each other
    opts.job_file = positional[0]
    return opts


def build_parser() -> "argparse.ArgumentParser":
    """The argparse parser: the reference for `--help` and for usage errors."""
    from dist_lto import configuration

    epilog = EPILOG + "\n\n" + configuration.describe(configuration.LOCAL + configuration.REMOTE)
    parser = argument_parser(PROG, USAGE, DESCRIPTION, epilog)
    add_local_options(parser)
    add_report_options(parser)
    remote = parser.add_argument_group("remote execution and caching (docs/remote.md)")
    where = remote.add_mutually_exclusive_group()
    where.add_argument(
        "--remote",
        metavar="URL",
        help="run the jobs on this Remote Execution API engine: grpc://HOST:PORT"
        " (plaintext) or grpcs://HOST[:PORT] (TLS)",
    )
    where.add_argument(
        "--remote-cache",
        metavar="URL",
        help="run the jobs here, sharing their results through this REAPI action cache"
        " and CAS (grpc:// or grpcs://)",
    )
    remote.add_argument(
        "--instance",
        "--remote-instance-name",
        dest="instance",
        metavar="NAME",
        help="the service's instance name (default: none); --remote-instance-name is"
        " Bazel's spelling",
    )
    remote.add_argument(
        "--remote-ca",
        metavar="PEM",
        help="check the service's TLS certificate against these CAs (default: the system's roots)",
    )
    remote.add_argument(
        "--remote-client-cert",
        metavar="PEM",
        help="client certificate for mutual TLS (with --remote-client-key)",
    )
    remote.add_argument(
        "--remote-client-key", metavar="PEM", help="the client certificate's private key"
    )
    remote.add_argument(
        "--credential-helper",
        metavar="PROGRAM",
        help="a program speaking Bazel's credential-helper protocol, asked for the"
        " headers of every call (their values are never printed)",
    )
    remote.add_argument(
        "--remote-header",
        metavar="K=V",
        action="append",
        default=[],
        help="gRPC metadata sent with every remote call (repeatable; prefer a credential"
        " helper or the configuration file for secrets: a command line is visible to"
        " every user of the machine)",
    )
    remote.add_argument(
        "--platform",
        metavar="K=V",
        action="append",
        help="platform property of every action (repeatable; replaces the default"
        " OSFamily=linux toolchain=llvm-22, which says the compiler is preinstalled)",
    )
    remote.add_argument(
        "--remote-timeout",
        metavar="SECONDS",
        help="longest time one action may run on a worker (default: the engine's)",
    )
    parser.add_argument(
        "job_file",
        metavar="JOB_FILE",
        help="the job file LLD wrote (<output>.<pid>.dist-file.json)",
    )
    return parser


def add_local_options(parser: "argparse.ArgumentParser") -> None:
    """--jobs, the result cache's options and --no-fork-server (shared with `dist-lto
    link`)."""
    parser.add_argument(
        "-j",
        "--jobs",
        metavar="N",
        help="compilers to run at once (default: the CPUs this process may use)",
    )
    cache = parser.add_mutually_exclusive_group()
    cache.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="result cache directory (default: $XDG_CACHE_HOME/dist-lto, else ~/.cache/dist-lto)",
    )
    cache.add_argument(
        "--no-cache", action="store_true", help="neither use nor fill the result cache"
    )
    parser.add_argument(
        "--cache-max-size",
        metavar="SIZE",
        help="prune the cache, least recently used first, to this size after"
        " a link that added to it (bytes, or K/M/G/T; default: 2G)",
    )
    parser.add_argument(
        "--no-fork-server",
        action="store_true",
        help="start a compiler for every job instead of forking it from one clang per"
        " worker that has started already (docs/distribute.md)",
    )


def add_report_options(parser: "argparse.ArgumentParser") -> None:
    """--verbose, --quiet and --trace (shared with `dist-lto link`)."""
    talk = parser.add_mutually_exclusive_group()
    talk.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="print a line for every job (compiled or cached, and its time)",
    )
    talk.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no summary line (printed when stderr is not a terminal): errors and"
        " the compilers' warnings only",
    )
    parser.add_argument(
        "--trace",
        metavar="FILE",
        help="write where the time went as Chrome trace-event JSON (a slice per job"
        " per worker; open it in ui.perfetto.dev)",
    )


def parse_args(argv: list[str]) -> Options:
    return parse(argv, _parse_fast, build_parser, Options)


class Settings:
    """Checked options."""

    __slots__ = ("cache_dir", "cache_max_size", "fork_server", "jobs", "quiet", "remote",
                 "tools_dir", "trace", "verbose")  # fmt: skip

    def __init__(self, opts: Options, *, remote: bool = True) -> None:
        """`remote`: whether remote settings apply (`dist-lto link` has none)."""
        from dist_lto import configuration
        from dist_lto.distribute.result_cache import DEFAULT_MAX_SIZE, default_cache_dir, parse_size

        sources = configuration.LOCAL + (configuration.REMOTE if remote else ())
        origin = configuration.fill(opts, sources)
        self.remote = remote_settings(opts, origin)
        executes = self.remote is not None and not self.remote.cache_only
        self.jobs = REMOTE_JOBS if executes else _cpu_count()
        if opts.jobs is not None:
            if not (opts.jobs.isascii() and opts.jobs.isdigit() and int(opts.jobs) > 0):
                where = origin.get("jobs", "--jobs")
                raise BadInput(f"{where}: expected a positive integer, got {opts.jobs!r}")
            self.jobs = int(opts.jobs)
        self.cache_dir = None if opts.no_cache else (opts.cache_dir or default_cache_dir())
        self.tools_dir = default_cache_dir()
        """Where what belongs to this machine's tools is kept (the fork server's library,
        remembered compiler identities): per user, whatever --cache-dir says, since a
        shared cache directory may be another machine's, and a new one must not cost
        every compiler's identity again."""
        self.fork_server = not opts.no_fork_server and not executes
        self.cache_max_size = DEFAULT_MAX_SIZE
        if opts.cache_max_size is not None:
            try:
                self.cache_max_size = parse_size(opts.cache_max_size)
            except ValueError as err:
                where = origin.get("cache_max_size", "--cache-max-size")
                raise BadInput(f"{where}: {err}") from None
        self.verbose = opts.verbose
        self.quiet = opts.quiet
        self.trace = opts.trace


def remote_settings(opts: Options, origin: dict[str, str]) -> "RemoteSettings | None":
    """The remote service's settings, or None for none; each problem is named after
    where its value came from (an option, a variable, the configuration file). Remote
    settings from the environment or the file without an address there are unused."""
    address = opts.remote or opts.remote_cache
    if address is None:
        named = [
            origin.get(attr, option)
            for attr, option in (
                ("instance", "--instance"), ("remote_header", "--remote-header"),
                ("platform", "--platform"), ("remote_ca", "--remote-ca"),
                ("remote_client_cert", "--remote-client-cert"),
                ("remote_client_key", "--remote-client-key"),
                ("credential_helper", "--credential-helper"),
                ("remote_timeout", "--remote-timeout"),
            )
            if getattr(opts, attr) not in (None, []) and attr not in origin
        ]  # fmt: skip
        if named:
            raise BadInput(f"{named[0]} needs --remote or --remote-cache")
        return None
    from dist_lto.distribute.remote.settings import settings_from_options

    return settings_from_options(
        address,
        opts.instance,
        opts.remote_header,
        opts.platform,
        ca=opts.remote_ca,
        client_cert=opts.remote_client_cert,
        client_key=opts.remote_client_key,
        credential_helper=opts.credential_helper,
        timeout=opts.remote_timeout,
        cache_only=opts.remote is None,
        origin=origin,
    )


REMOTE_JOBS = 16
"""Jobs in flight at once with --remote when --jobs is not given: each only waits on
the engine, whose workers decide the real parallelism."""


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _open_cache(
    files: JobFile, settings: Settings, reporter: Reporter
) -> "tuple[ResultCache | None, KeyMaker | None]":
    from dist_lto.distribute.result_cache import KeyMaker, ResultCache, command_identity

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
    return cache, KeyMaker(files, identity)


def _open_remote_cache(
    files: JobFile, settings: Settings, reporter: Reporter
) -> "RemoteCache | None":
    """The remote cache (`--remote-cache`): keyed by the compiler's contents, like the
    local one. A service that refuses our TLS settings or credentials, or is not a
    cache clients may write, fails the link: that is a configuration to fix. One that
    cannot be reached only warns, and the jobs compile here."""
    from dist_lto.distribute.remote.cache_only import RemoteCache
    from dist_lto.distribute.remote.connection import RemoteFailed
    from dist_lto.distribute.result_cache import command_identity
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


def _private_tmpdir() -> str | None:
    """Point TMPDIR at a new directory, removed when the distribution ends: a compiler that
    crashes writes its reproducer files (preprocessed source, run script) there, and a
    link must not leave them in the user's temporary directory. None when it cannot be
    made (then TMPDIR stays as it is). Made by hand: `tempfile` and `shutil` cost the
    distributor's start-up imports it otherwise never needs."""
    base = os.environ.get("TMPDIR") or "/tmp"
    path = os.path.join(base, f"dist-lto-{os.getpid()}-{os.urandom(6).hex()}")
    try:
        os.mkdir(path, 0o700)
    except OSError:
        return None
    os.environ["TMPDIR"] = path
    return path


def _check_module_paths(files: JobFile) -> None:
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


def _report_damage(distribution: Distribution, reporter: Reporter) -> None:
    """One warning for every damaged result this link refused (cache entries evicted,
    remote blobs that did not match their digests): each job ran again instead."""
    damaged = list(distribution.cache.evicted) if distribution.cache is not None else []
    damaged += distribution.remote_damage
    if not damaged:
        return
    where, problem = damaged[0]
    more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
    with distribution.lock:
        reporter.note(
            f"warning: {len(damaged)} damaged cached result{'s' if len(damaged) > 1 else ''}"
            f" not used, the jobs ran again: {where}: {problem}{more}"
        )


def _fork_server_library(files: JobFile, settings: Settings, reporter: Reporter) -> str | None:
    """The fork server's preload library, or None (said with --verbose, or as a warning
    when it cannot be built) where compilers are to be started directly."""
    if not settings.fork_server:
        return None
    from dist_lto.process.forkserver import library, unusable_reason

    reason = unusable_reason(files.args)
    if reason is not None:
        if settings.verbose:
            reporter.note(f"no fork server: {reason}")
        return None
    try:
        return library(files.args[0], settings.tools_dir)
    except DistLtoError as err:
        reporter.note(f"warning: no fork server: {err.message}")
        return None


def main(argv: list[str]) -> int:
    stop_with_parent()
    opts = parse_args(argv)
    settings = Settings(opts)
    files = read_job_file(opts.job_file)
    _check_module_paths(files)
    reporter = Reporter(
        len(files.jobs), verbose=settings.verbose, tty=sys.stderr.isatty(), quiet=settings.quiet
    )
    run_jobs(files, settings, reporter)
    return 0


def _job_slots(settings: Settings, reporter: Reporter) -> "JobSlots | None":
    """The build's job slots when GNU make advertises a jobserver (local jobs only)."""
    if (settings.remote and not settings.remote.cache_only) or "MAKEFLAGS" not in os.environ:
        return None
    from dist_lto.distribute.jobserver import JobSlots, open_jobserver

    server, why = open_jobserver(os.environ)
    if server is None:
        if why and settings.verbose:
            reporter.note(f"no jobserver: {why}; running --jobs backends at once")
        return None
    return JobSlots(server)


def run_jobs(
    files: JobFile, settings: Settings, reporter: Reporter, trace: "Trace | None" = None
) -> Distribution:
    """Run every job of `files` with the cache, fork servers, jobserver and trace the
    settings ask for; the first failure is raised (after the summary line). A `trace`
    given is filled and left to the caller to write; otherwise --trace is written here."""
    own_trace = trace is None
    if trace is None and settings.trace is not None:
        from dist_lto.distribute.trace import Trace

        trace = Trace(settings.trace, f"{reporter.prog} {files.linker_output}")
    if not files.jobs:
        if own_trace:
            write_trace(trace, reporter)
        return Distribution(files, 1, reporter)
    cache, keys = _open_cache(files, settings, reporter)
    remote = remote_cache = None
    if settings.remote is not None and not settings.remote.cache_only:
        from dist_lto.distribute.remote.executor import RemoteExecutor

        remote = RemoteExecutor(files, settings.remote)
    elif settings.remote is not None:
        remote_cache = _open_remote_cache(files, settings, reporter)
    preload = _fork_server_library(files, settings, reporter)
    slots = _job_slots(settings, reporter)
    private_tmp = _private_tmpdir()
    distribution = Distribution(
        files, settings.jobs, reporter, cache, keys, remote, preload, slots=slots, trace=trace,
        remote_cache=remote_cache,
    )  # fmt: skip
    if settings.verbose:
        reporter.note(
            f"{len(files.jobs)} jobs from {files.path}, {distribution.workers} at a"
            f" time, cache {settings.cache_dir or 'off'}"
            + (f", remote {settings.remote.address}" if remote else "")
            + (f", remote cache {settings.remote.address}" if remote_cache else "")
            + (f", fork server {preload}" if preload else "")
            + (f", jobserver {slots.server.description}" if slots else "")
        )
    failure: DistLtoError | None = None
    try:
        try:
            distribution.run()
        except DistLtoError as err:
            failure = err
            if backend.gone_parent():
                # The linker died first; what failed since (its indexes vanished) is the
                # symptom.
                distribution.remove_outputs()
                failure = DistLtoError(
                    backend.stop_reason(_signal.SIGHUP), status=128 + _signal.SIGHUP
                )
            raise failure from None
    finally:
        if slots is not None:
            slots.close()
        if remote is not None:
            remote.close()
        if remote_cache is not None:
            remote_cache.close()
        _report_damage(distribution, reporter)
        if backend.gone_parent():
            _remove_linker_temporaries(files, backend.gone_parent())
        if private_tmp is not None:
            backend.remove_private_dir(private_tmp)
        if cache is not None:
            cache.record_use(distribution.cached, distribution.misses, distribution.stored)
        if own_trace:
            write_trace(trace, reporter)
        _summarise(files, distribution, reporter, failure)
    if cache is not None and distribution.stored:
        try:
            pruned = cache.prune()
        except OSError as err:
            reporter.note(f"warning: result cache: cannot prune: {err.strerror}")
        else:
            if pruned and settings.verbose:
                reporter.note(f"pruned {pruned} cache entries (limit {settings.cache_max_size})")
    return distribution


def _summarise(
    files: JobFile, distribution: Distribution, reporter: Reporter, failure: DistLtoError | None
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


def write_trace(trace: "Trace | None", reporter: Reporter) -> None:
    if trace is None:
        return
    try:
        trace.write()
    except OSError as err:
        reporter.note(f"warning: --trace: {trace.path}: {err.strerror}")
