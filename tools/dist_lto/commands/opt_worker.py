"""`dist-lto opt-worker`: serve opt actions as a Buck2 persistent worker (docs/buck2.md).

Buck2 starts it once per build command (the toolchain's `WorkerInfo`), with the unix
socket to listen on in `WORKER_SOCKET`, and ends it with the command (SIGKILL to its
process group, which takes its fork servers and compilers along). It also stops, and
stops its compilers, on SIGTERM, SIGINT or SIGHUP, and when the process that started it
goes away (a killed Buck2). It serves the links' plan actions too (`worker/plans.py`).
"""

import _signal
import os
import threading

from dist_lto import TYPE_CHECKING
from dist_lto.cli import argument_parser, parse, scan
from dist_lto.errors import BadInput
from dist_lto.process.children import PARENT_POLL_SECONDS
from dist_lto.tmpdirs import private_tmpdir, remove_private_tmpdir

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from dist_lto.worker.reuse import Store

PROG = "dist-lto opt-worker"
USAGE = (
    "dist-lto opt-worker [-h] [--socket PATH] [--reuse-dir DIR] [--no-compile-server] [--jobs N]"
    " [--no-run-ahead] [--planner-python PYTHON]"
)
DESCRIPTION = """\
Serve Buck2's persistent-worker protocol (gRPC on a unix socket) for opt actions: each
request holds the arguments of `dist-lto opt` and runs exactly as that command would,
with the same checks, the same error lines and exit status, except that clang is not
started per module: backends run one after another in compile servers built against
the compiler's own libraries, or in clangs forked from one that started once. A request
whose first argument is `plan` runs `dist-lto plan` with the rest, in a child forked
from a planner process that imported the planner once (started with --planner-python,
which needs dist-lto's dependencies: the worker itself needs only the standard
library)."""
EPILOG = """\
Buck2 starts it; it listens on $WORKER_SOCKET unless --socket is given. With
--reuse-dir, a backend whose last run had the same module and index, apart from the
hashes of modules it imports from, and imports the same code from them (LLVM's `opt`
beside the compiler decides) gets that run's object without running clang; the
directory keeps each backend's last inputs and object (docs/buck2.md). While a
finished compile's slot returns to Buck2, its turn goes to a waiting request or, on
a link's first build with --reuse-dir, to the largest planned backend not yet
requested, run ahead of its request; --no-run-ahead turns both off. Requests that
hold no Buck2 slot (`dist-lto opt --unweighted`) compile first, the largest module
first, and, while no request holds a slot, --jobs of them at once. Its log (one line
at start, one per new peak of requests served at once, warnings) is its stderr. Exit
status: 0 when its parent has gone; 128+N when stopped by signal N; 2 when it cannot
start (no socket, a bad --jobs)."""

_STOP_SIGNALS = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP)


class Options:
    __slots__ = (
        "jobs",
        "no_compile_server",
        "no_run_ahead",
        "planner_python",
        "reuse_dir",
        "socket",
    )

    def __init__(self) -> None:
        self.socket: str | None = None
        self.reuse_dir: str | None = None
        self.no_compile_server = False
        self.jobs: str | None = None
        self.no_run_ahead = False
        self.planner_python: str | None = None


def _parse_fast(argv: list[str]) -> Options | None:
    opts = Options()
    positional = scan(argv, opts, {"--socket": "socket", "--reuse-dir": "reuse_dir",
                                   "--jobs": "jobs", "--planner-python": "planner_python"},
                      {"--no-compile-server": "no_compile_server",
                       "--no-run-ahead": "no_run_ahead"})  # fmt: skip
    return opts if positional == [] else None


def _jobs(text: str | None) -> int | None:
    """`--jobs`: a count of 1 or more; None without it."""
    if text is None:
        return None
    if not text.isdigit() or int(text) < 1:
        raise BadInput(f"--jobs: expected a count of 1 or more, got {text!r}")
    return int(text)


def build_parser() -> "argparse.ArgumentParser":
    parser = argument_parser(PROG, USAGE, DESCRIPTION, EPILOG)
    parser.add_argument(
        "--socket", metavar="PATH", help="the unix socket to listen on (default: $WORKER_SOCKET)"
    )
    parser.add_argument(
        "--reuse-dir",
        metavar="DIR",
        help="reuse a backend's last object when an edit did not change what it imports"
        " (kept in DIR; default: run every backend)",
    )
    parser.add_argument(
        "--no-compile-server",
        action="store_true",
        help="fork every backend's clang instead of running backends in compile servers",
    )
    parser.add_argument(
        "--jobs",
        metavar="N",
        help="backends compiled at once when no request in flight holds a Buck2 slot"
        " (default: the CPUs this process may run on)",
    )
    parser.add_argument(
        "--no-run-ahead",
        action="store_true",
        help="compile no more backends at once than the requests in flight hold slots for,"
        " even while a finished compile's slot returns to Buck2 (and none ahead of its"
        " request)",
    )
    parser.add_argument(
        "--planner-python",
        metavar="PYTHON",
        help="the interpreter that runs the planner, with dist-lto's dependencies"
        " (default: this one, with its flags)",
    )
    return parser


def main(argv: list[str]) -> int:
    opts = parse(argv, _parse_fast, build_parser, Options)
    jobs = _jobs(opts.jobs)
    socket_path = opts.socket or os.environ.get("WORKER_SOCKET")
    if not socket_path:
        raise BadInput("no socket: Buck2 names it in WORKER_SOCKET (or pass --socket)")
    from dist_lto.process import guard

    guard.start()  # before any thread: compilers it starts directly die with it, however
    from dist_lto.worker.http2 import listen_now

    try:  # at once: Buck2 connects while the worker starts (`listen_now`)
        listener = listen_now(socket_path)
    except OSError as err:
        raise BadInput(f"{socket_path}: cannot listen there: {err.strerror}") from None
    from dist_lto.distribute.result_cache import default_cache_dir
    from dist_lto.worker.requests import CompilerPool
    from dist_lto.worker.server import OptService, log, start

    tmp = private_tmpdir("dist-lto-worker")
    env = None if tmp is None else {**os.environ, "TMPDIR": tmp}
    pool = CompilerPool(default_cache_dir(), log, env, serve=not opts.no_compile_server,
                        scratch=tmp)  # fmt: skip
    store = None
    if opts.reuse_dir:
        import time

        from dist_lto.worker.reuse import Store

        store = Store(opts.reuse_dir, log)
        threading.Thread(target=_prune, args=(store, time.time()), daemon=True).start()
    from dist_lto.worker.links import LinkerLines
    from dist_lto.worker.plans import Planner

    planner = Planner(log, opts.planner_python)
    links = LinkerLines(log, env, tmp)
    service = OptService(pool, store, planner, jobs, not opts.no_run_ahead, links)
    stop = threading.Event()
    stopped_by: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopped_by.append(signum)
        stop.set()

    for sig in _STOP_SIGNALS:
        _signal.signal(sig, on_signal)
    server = start(listener, service)
    try:
        log(f"serving opt requests on {socket_path} (pid {os.getpid()},"
            f" {_cpu():.2f} s of CPU to start)")  # fmt: skip
        _watch_parent(stop)
        while not stop.wait(1.0):
            pass
        log(f"stopping: {f'signal {stopped_by[0]}' if stopped_by else 'its parent has gone'}")
    finally:
        server.close()
        service.stop_all()
        pool.close()
        service.close()
        compilers = _cpu(children=True) - links.cpu
        planner.close()
        _log_cpu(log, compilers, links.cpu)
        try:  # noqa: SIM105 (Buck2 may have removed it)
            os.unlink(socket_path)
        except OSError:
            pass
        if tmp is not None:
            remove_private_tmpdir(tmp)
    return 128 + stopped_by[0] if stopped_by else 0


def _cpu(children: bool = False) -> float:
    """User + system seconds so far of this process (all its threads) or, with
    `children`, of the children it reaped (theirs included)."""
    import resource

    used = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def _log_cpu(log: "Callable[[str], None]", compilers: float, links: float) -> None:
    """What the worker, the compilers it ran (`compilers`: its children reaped before the
    planner's last process but the drivers and linkers of `links`, so a planner that ended
    early too), those drivers and linkers, and that planner with its plans cost: where a
    build's time went outside Buck2 (bench/buck2.py reads it)."""
    planner = _cpu(children=True) - compilers - links
    log(f"cpu: worker {_cpu():.2f} s, compilers {compilers:.2f} s, links {links:.2f} s,"
        f" planner {planner:.2f} s (user + system)")  # fmt: skip


def _prune(store: "Store", started: float) -> None:
    """Prune the reuse store beside the first requests, when due. At the priority of the
    worker's other threads: at the lowest, on CPUs the compiles keep busy, this thread
    would be preempted holding the interpreter's lock, and every request would wait for
    it to run again (a thread waiting for the lock that way: 0.3 s at the 90th
    percentile, against 10 ms at the same priority)."""
    store.prune_when_due(started)


def _watch_parent(stop: threading.Event) -> None:
    """Set `stop` once the process that started the worker has gone: its compilers
    must not outlive a Buck2 that was killed."""
    parent = os.getppid()
    if parent <= 1:
        return

    def watch() -> None:
        while not stop.wait(PARENT_POLL_SECONDS):
            if os.getppid() != parent:
                stop.set()

    threading.Thread(target=watch, daemon=True).start()
