"""Backends compiled ahead of their requests, in the moments Buck2 hands a slot over.

Between two opt actions Buck2 takes about 10 ms to give the freed slot to the next one
(docs/benchmarks.md#queued-backends), while in-process LLD's threads take the next
backend at once, the largest first. Once a link's plan has run through the worker, the
worker knows every backend the link will ask for (its plans name each module, its index
and its size) and, once one of them has been asked for, the flags they share. So when a
compile ends and no request waits for the turn, the worker compiles the largest backend
of the link not yet asked for into a file of its own (`slots.py` gives it the turn; it
never compiles more at once than Buck2 has given it slots for); the request, when it
comes, takes that object, or waits for it, instead of compiling.

The request takes it only when its backend command is the one that ran, word for word,
and its module, its index and every module the index names are the files that were
read (inode, size, modification time); anything else and the request compiles as it
would have. It runs only on a link's first build in the worker's reuse store: later
builds rerun only the backends whose inputs changed, most of which the store reuses.
Standard library only.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tempfile
import threading

from dist_lto import TYPE_CHECKING
from dist_lto.backend import check_primary, prepare_outputs, run_backend
from dist_lto.fsutil import install, remove_quietly, write_atomic
from dist_lto.opt_request import (
    Options,
    backend_command,
    check_outputs,
    copy_options,
    split_dwarf_mode,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from dist_lto.backend import Runner, VerifiedModules
    from dist_lto.worker.reuse import Inputs

LINKS = "ran-ahead"
"""The reuse store's directory of links whose backends have run ahead once (a file each,
named by the SHA-256 of the meta's path): their next builds do not."""
SCRATCH_PREFIX = "ahead-"
"""A worker's directory of backends run ahead, in the reuse store: `ahead-RANDOM`,
removed when the worker stops (a killed worker's, by the next one's prune)."""

Signature = tuple[tuple[str, int, int, int], ...]
"""(path, inode, size, modification time) of every file a backend read."""


class Candidate:
    """A backend of a planned link, from its plan until a request asks for it."""

    __slots__ = ("command", "done", "failed", "index", "input", "link", "object", "read",
                 "size", "started", "warnings")  # fmt: skip

    def __init__(self, link: _Link, module: str, index: str, size: int) -> None:
        self.link = link
        self.input = module
        self.index = index
        self.size = size
        self.started = False
        """Run ahead (it may still be running: `done`)."""
        self.command: list[str] = []
        self.object = ""
        """Where the object went, once compiled."""
        self.warnings = b""
        self.read: Signature = ()
        self.done = threading.Event()
        self.failed = False


class _Link:
    """A planned link: its backends, the largest first, and the first request's options,
    which its other backends share but for their files."""

    __slots__ = ("backends", "next", "template")

    def __init__(self) -> None:
        self.backends: list[Candidate] = []
        self.next = 0
        """Where to look for the next backend to run ahead: those before it have started
        or been asked for."""
        self.template: Options | None = None

    def largest_left(self, waiting: dict[tuple[str, str], Candidate]) -> Candidate | None:
        """The largest backend neither asked for nor started (`waiting` holds those not
        asked for)."""
        while self.next < len(self.backends):
            candidate = self.backends[self.next]
            key = (candidate.input, candidate.index)
            if not candidate.started and waiting.get(key) is candidate:
                return candidate
            self.next += 1
        return None


class RunAhead:
    """The worker's backends run ahead, under the reuse store's directory `store_root`."""

    def __init__(
        self,
        store_root: str,
        runner: Callable[[str], Runner],
        note: Callable[[str], None],
        verified: VerifiedModules,
    ) -> None:
        self.store_root = store_root
        self.runner = runner
        """The runner of a compiler's backends (the worker's pooled compilers)."""
        self.note = note
        self.verified = verified
        """The modules the worker's backends found to match their indexes, which a
        backend run ahead checks only once, as its requests do."""
        self.lock = threading.Lock()
        self.candidates: dict[tuple[str, str], Candidate] = {}
        """Backends not asked for yet, by their module and index."""
        self.links: list[_Link] = []
        """Links with a template and backends that may run ahead."""
        self.asked: dict[tuple[str, str], Options] = {}
        """Backends asked for before their link's plans were read, and how."""
        self.ended: Callable[[], None] = lambda: None
        """Told when a backend run ahead has ended (`Slots.ahead_ended`)."""
        self.dir = ""
        self.off = False
        """Set when an object run ahead cannot be moved to its output (another file
        system): nothing runs ahead from then on."""
        self.count = 0
        """Backends started ahead of their requests."""
        self.taken = 0
        """Of those, the ones whose requests took their objects."""

    def learn(self, argv: list[str]) -> None:
        """Read the plans of the link whose `dist-lto plan ARGV` has just succeeded; best
        effort: a link whose plans cannot be read runs nothing ahead."""
        from dist_lto.formats.meta import read_meta
        from dist_lto.formats.plans import read_archive_plan, read_object_plan

        meta_path = argv[0] if argv and not argv[0].startswith("-") else None
        if meta_path is None:
            return
        marker = os.path.join(self.store_root, LINKS,
                              hashlib.sha256(os.fsencode(meta_path)).hexdigest())  # fmt: skip
        if os.path.exists(marker):
            return
        link = _Link()
        try:
            meta = read_meta(meta_path)
            for obj in meta.objects():
                plan = read_object_plan(obj.plan_output)
                if plan["is_bitcode"] and plan["index_file"]:
                    link.backends.append(
                        Candidate(link, plan["path"], plan["index_file"], plan["size"])
                    )
            for archive in meta.archives():
                plans = read_archive_plan(archive.plan_output)
                for member in plans["members"]:
                    if member["opt"] and member["index_file"]:
                        index = os.path.join(plans["index_dir"], member["index_file"])
                        link.backends.append(
                            Candidate(link, member["input"], index, member["size"])
                        )
            os.makedirs(os.path.dirname(marker), exist_ok=True)
            write_atomic(marker, b"")
        except Exception:  # best effort: this link runs nothing ahead
            return
        link.backends.sort(key=lambda c: -c.size)
        with self.lock:
            for candidate in link.backends:
                key = (candidate.input, candidate.index)
                asked = self.asked.get(key)
                if asked is not None and not (asked.dwo or asked.split_dwarf):
                    link.template = link.template or asked
                if asked is None and key not in self.candidates:
                    self.candidates[key] = candidate
            if link.template is not None:
                self.links.append(link)

    def claim(self, opts: Options) -> Candidate | None:
        """The backend `opts` asks for, if it has run ahead or is running; otherwise it
        never will (and `opts` become its link's template)."""
        key = (opts.input, opts.index)
        with self.lock:
            candidate = self.candidates.pop(key, None)
            if candidate is None:
                self.asked[key] = opts
                return None
            link = candidate.link
            if link.template is None and not (opts.dwo or opts.split_dwarf):
                link.template = opts  # (split DWARF names its files after the output)
                self.links.append(link)
            return candidate if candidate.started else None

    def start_next(self) -> bool:
        """Start the largest backend not asked for yet of a link with a template; False
        when there is none. Called by `Slots` with its lock held."""
        with self.lock:
            left = [] if self.off else [
                c for link in self.links if (c := link.largest_left(self.candidates))
            ]  # fmt: skip
            if not left:
                return False
            first = max(left, key=lambda c: c.size)
            first.started = True
            self.count += 1
            number = self.count
        threading.Thread(target=self._run, args=(first, number), daemon=True).start()
        return True

    def _run(self, candidate: Candidate, number: int) -> None:
        try:
            template = candidate.link.template
            if template is None:  # never: only a link with a template runs ahead
                raise ValueError("no template")
            opts = copy_options(template)
            opts.input, opts.index, opts.out = candidate.input, candidate.index, ""
            candidate.command = backend_command(opts, None)
            before, inputs = _read(candidate.input, candidate.index)
            check_primary(candidate.input, candidate.index, inputs.table, self.verified)
            scratch = self._dir()
            out = os.path.join(scratch, f"{number}.o")
            candidate.warnings = run_backend(
                candidate.command, module=candidate.input, output=out,
                runner=self.runner(candidate.command[0]), scratch=scratch,
            )  # fmt: skip
            candidate.object = out
            candidate.read = before
        except Exception:  # the request compiles it itself, with its own error lines
            candidate.failed = True
        finally:
            candidate.done.set()
            self.ended()

    def _dir(self) -> str:
        with self.lock:
            if not self.dir:
                os.makedirs(self.store_root, exist_ok=True)
                self.dir = tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=self.store_root)
            return self.dir

    def adopt(
        self, candidate: Candidate, opts: Options, stopped: Callable[[], bool]
    ) -> tuple[bytes, Inputs] | None:
        """The request `opts` takes `candidate`'s object (waiting for it): its warnings
        and the inputs it read (as the reuse store reads them); None (nothing written)
        when the request must compile after all."""
        while not candidate.done.wait(0.05):
            if stopped():
                return None
        if candidate.failed or split_dwarf_mode(opts) is not None:
            return None
        if backend_command(opts, None) != candidate.command:
            return None
        try:
            now, inputs = _read(opts.input, opts.index)
        except (OSError, ValueError):  # the request's own run says what is wrong
            return None
        if now != candidate.read:
            return None
        check_outputs(opts)
        prepare_outputs(opts.out, None)
        try:
            install(candidate.object, opts.out)
        except OSError as err:
            remove_quietly(candidate.object)
            if err.errno == errno.EXDEV and not self.off:  # every object would be in vain
                self.off = True
                self.note(f"{self.store_root}: not on the outputs' file system: no backend"
                          " runs ahead of its request")  # fmt: skip
            return None
        self.note(f"{opts.out}: compiled ahead of its request")
        with self.lock:
            self.taken += 1
        return candidate.warnings, inputs

    def close(self) -> None:
        """Say how many backends ran ahead and were taken; remove those not taken."""
        if self.count:
            self.note(f"{self.count} backends ran ahead of their requests, {self.taken} taken")
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def _read(module: str, index: str) -> tuple[Signature, Inputs]:
    """What identifies the files a backend reads (its module, its index and the modules
    the index names), and the index's inputs as the reuse store reads them."""
    from dist_lto.worker.reuse import read_inputs

    inputs = read_inputs(module, index)
    if inputs is None:
        raise ValueError("an index the worker cannot read")
    signature = []
    for path in [module, index, *(path for path, _ in inputs.modules)]:
        st = os.stat(path)
        signature.append((path, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(signature), inputs
