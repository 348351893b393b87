"""The distributor's settings: its options as given, and as checked.

`Options` holds what the command line said, as strings; `configuration.fill` completes
it from DIST_LTO_* variables and the configuration file; `Settings` checks it, naming
where each bad value came from. Shared by `dist-lto distribute` and `dist-lto link`
(which has no remote settings), with the argparse declarations of the options both
commands take.
"""

from __future__ import annotations

import os

from dist_lto import TYPE_CHECKING
from dist_lto.errors import BadInput

if TYPE_CHECKING:
    import argparse

    from dist_lto.distribute.remote.settings import RemoteSettings


class Options:
    """The command line, as strings (checked by `settings`)."""

    __slots__ = (
        "cache_dir", "cache_max_size", "credential_helper", "instance", "job_file", "jobs",
        "no_cache", "no_compile_server", "no_fork_server", "platform", "quiet", "remote",
        "remote_action_timeout", "remote_ca", "remote_cache", "remote_client_cert",
        "remote_client_key", "remote_header", "remote_timeout", "trace", "verbose",
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
        self.remote_action_timeout: str | None = None
        self.remote_header: list[str] = []
        self.platform: list[str] | None = None
        self.job_file = ""
        self.jobs: str | None = None
        self.cache_dir: str | None = None
        self.cache_max_size: str | None = None
        self.no_cache = False
        self.no_fork_server = False
        self.no_compile_server = False
        self.verbose = False
        self.quiet = False
        self.trace: str | None = None


def add_local_options(parser: argparse.ArgumentParser) -> None:
    """--jobs, the result cache's options, --no-fork-server and --no-compile-server
    (shared with `dist-lto link`)."""
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
    parser.add_argument(
        "--no-compile-server",
        action="store_true",
        help="fork every job's compiler instead of running jobs one after another in a"
        " compile server per worker (docs/distribute.md)",
    )


def add_report_options(parser: argparse.ArgumentParser) -> None:
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


class Settings:
    """Checked options."""

    __slots__ = ("cache_dir", "cache_max_size", "compile_server", "fork_server",
                 "fork_server_dir", "jobs", "quiet", "remote", "tools_dir", "trace",
                 "verbose")  # fmt: skip

    def __init__(self, opts: Options, *, remote: bool = True) -> None:
        """`remote`: whether remote settings apply (`dist-lto link` has none)."""
        from dist_lto import configuration
        from dist_lto.distribute.result_cache import default_cache_dir, user_cache_dir

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
        home = user_cache_dir()
        self.cache_dir = None if opts.no_cache else (opts.cache_dir or default_cache_dir())
        self.tools_dir = home or self.cache_dir or ""
        """Where remembered compiler identities are kept: per user, whatever --cache-dir
        says, since a new cache directory must not cost every compiler's identity again
        ("": nowhere, without HOME and a cache)."""
        self.fork_server_dir = opts.cache_dir or home or ""
        """Where the fork server's library is built: the configured cache directory (with
        --no-cache too), so a user who moved the cache finds nothing new in ~/.cache. Its
        name carries the machine and C library, so a shared directory is safe ("": none,
        without HOME and --cache-dir; compilers then start directly)."""
        self.fork_server = not opts.no_fork_server and not executes
        self.compile_server = self.fork_server and not opts.no_compile_server
        """Whether jobs may run in compile servers (process/cc1server.py), built in
        `tools_dir`."""
        self.cache_max_size = cache_max_size(opts.cache_max_size, origin)
        self.verbose = opts.verbose
        self.quiet = opts.quiet
        self.trace = opts.trace


def cache_max_size(value: str | None, origin: dict[str, str]) -> int:
    """The result cache's size limit in bytes: `value` (--cache-max-size or where
    `origin` says it came from), else the default; BadInput naming its origin."""
    from dist_lto.distribute.result_cache import DEFAULT_MAX_SIZE, parse_size

    if value is None:
        return DEFAULT_MAX_SIZE
    try:
        return parse_size(value)
    except ValueError as err:
        raise BadInput(f"{origin.get('cache_max_size', '--cache-max-size')}: {err}") from None


def remote_settings(opts: Options, origin: dict[str, str]) -> RemoteSettings | None:
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
                ("remote_action_timeout", "--remote-action-timeout"),
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
        action_timeout=opts.remote_action_timeout,
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
