"""`dist-lto distribute`: a distributor for LLD 22's DTLTO that is parallel, strict and cached.

LLD runs it once per link as `<prog> <args...> <output>.<pid>.dist-file.json`
(`clang -fthinlto-distributor=$(command -v dist-lto) -Xthinlto-distributor=distribute`).
This module reads the command line and the job file (`formats/jobfile.py`) and runs
one distribution (`distribute/session.py`): every job with N worker threads, biggest
module first, each through the same strict runner as `dist-lto opt` (`backend.py`),
with results kept in a cache shared by all links.
"""

import os

from dist_lto import TYPE_CHECKING
from dist_lto.cli import argument_parser, parse, scan
from dist_lto.distribute.reporting import PROG, Reporter, progress_terminal
from dist_lto.distribute.session import check_inputs_are_files, check_module_paths, run_jobs
from dist_lto.distribute.settings import Options, Settings, add_local_options, add_report_options
from dist_lto.formats.jobfile import JobFile, read_job_file
from dist_lto.output_paths import refuse_overlaps

if TYPE_CHECKING:
    import argparse

USAGE = (
    "dist-lto distribute [-h] [--jobs N] [--cache-dir DIR | --no-cache]\n"
    "                           [--cache-max-size SIZE] [--no-fork-server]\n"
    "                           [--no-compile-server]\n"
    "                           [--verbose | --quiet] [--trace FILE]\n"
    "                           [--remote URL | --remote-cache URL] [--instance NAME]\n"
    "                           [--remote-ca PEM] [--remote-client-cert PEM\n"
    "                            --remote-client-key PEM] [--credential-helper PROGRAM]\n"
    "                           [--remote-header K=V]... [--platform K=V]...\n"
    "                           [--remote-timeout DURATION]\n"
    "                           [--remote-action-timeout DURATION] JOB_FILE"
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
arguments and input contents were seen before runs no compiler. Each worker runs its
jobs one after another in a compile server built against the compiler's own libraries
(where their headers are installed), and forks the compilers of jobs the server leaves,
fails or warns on from a clang that has started once (a fork server): no compiler
start-up per job. --no-compile-server forks every job; --no-fork-server starts a
compiler per job.

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
    "--remote-action-timeout": "remote_action_timeout",
    "--jobs": "jobs",
    "-j": "jobs",
    "--cache-dir": "cache_dir",
    "--cache-max-size": "cache_max_size",
    "--trace": "trace",
}
_FLAG_OPTIONS = {
    "--no-cache": "no_cache",
    "--no-fork-server": "no_fork_server",
    "--no-compile-server": "no_compile_server",
    "--verbose": "verbose",
    "-v": "verbose",
    "--quiet": "quiet",
    "-q": "quiet",
}


def _parse_fast(argv: list[str]) -> Options | None:
    """The usual command line without argparse; None sends anything unusual to argparse."""
    opts = Options()
    positional = scan(argv, opts, _VALUE_OPTIONS, _FLAG_OPTIONS)
    if positional is None or len(positional) != 1:
        return None
    if (
        (opts.no_cache and opts.cache_dir is not None)
        or (opts.verbose and opts.quiet)
        or (opts.remote is not None and opts.remote_cache is not None)
    ):
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
        metavar="DURATION",
        help="deadline of each remote call, transfers included, as Bazel's --remote_timeout"
        " (seconds, or a ms/s/m/h suffix: 60s, 5m; default: 60s)",
    )
    remote.add_argument(
        "--remote-action-timeout",
        metavar="DURATION",
        help="longest time one action may run on a worker (the Action's timeout;"
        " default: the engine's)",
    )
    parser.add_argument(
        "job_file",
        metavar="JOB_FILE",
        help="the job file LLD wrote (<output>.<pid>.dist-file.json)",
    )
    return parser


def parse_args(argv: list[str]) -> Options:
    return parse(argv, _parse_fast, build_parser, Options)


def _files_of(files: JobFile) -> list[tuple[str, str]]:
    """The job file, every input and every output it names, described for a message."""
    named = [("the job file", files.path)]
    named += [("a common input", path) for path in files.inputs]
    for job in files.jobs:
        named += [(f"an input of job {job.number + 1}", path) for path in job.inputs]
        named += [(f"an output of job {job.number + 1}", path) for path in job.outputs]
    return named


def main(argv: list[str]) -> int:
    opts = parse_args(argv)
    settings = Settings(opts)
    if settings.remote is not None:
        # gRPC's C core logs a failed TLS handshake at INFO on stderr; our message says
        # it once. Read when grpc is first imported, so set before the session starts.
        os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    files = read_job_file(opts.job_file)
    check_module_paths(files)
    check_inputs_are_files(files)
    if settings.trace is not None:
        refuse_overlaps([("--trace", settings.trace)], _files_of(files))
    reporter = Reporter(
        len(files.jobs),
        verbose=settings.verbose,
        tty=progress_terminal(),
        quiet=settings.quiet,
        name=os.path.basename(files.linker_output),
    )
    run_jobs(files, settings, reporter)
    return 0
