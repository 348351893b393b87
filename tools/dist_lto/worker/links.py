"""Links through the worker: the index step and the final link run the linker itself,
on the line its clang driver would give it (`llvm/driver_line.py`).

A driver that links spends about 30 ms starting before it starts the linker, and a
link's plan and final link stand one after the other on the build's critical path, as
in-process ThinLTO's one link does. The worker finds each driver's line once: for a
link's `--ready` request (`--link-driver`), while the compiles run, else for its first
plan or final link; a request whose driver's line is still being found runs the
driver. A plan request tells its planner the line (`plans.py`); a final link request,
`DRIVER... -o OUT @ARGS`, runs the linker on it with the argument file's words as the
linker takes them. Where the driver would do
anything else (`driver_line`), the request runs the driver, as its command does.
"""

import os
import tempfile
import threading

from dist_lto import TYPE_CHECKING
from dist_lto.errors import DistLtoError
from dist_lto.formats.response_file import parse_response_file, response_file
from dist_lto.fsutil import read_input, remove_quietly
from dist_lto.llvm import driver_line
from dist_lto.llvm.flags import read_args_file
from dist_lto.process import children

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from dist_lto.llvm.driver_line import LinkerLine
    from dist_lto.worker.requests import Reply, Running

OUTPUT_LIMIT = 1 << 20
"""What of a link's stdout and of its stderr reaches its reply (as for a plan's)."""
ARGS_LIMIT = 256 << 20
"""The largest final-link argument file read here (a million modules' take ~80 MB)."""


class _Resolving:
    """One driver's line: set once found (`line` None: the driver runs its links)."""

    __slots__ = ("done", "line")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.line: LinkerLine | None = None


class LinkerLines:
    """The line behind each driver command, found once (`driver_line.resolve`), by at most
    `at_once` drivers at a time (0: one per CPU): a build of many links with as many link
    commands sends as many `--ready` requests at its start. Why a driver has none is
    logged."""

    def __init__(
        self,
        note: "Callable[[str], None]",
        env: "Mapping[str, str] | None",
        scratch: str | None,
        at_once: int = 0,
    ) -> None:
        self.note = note
        self.turns = threading.BoundedSemaphore(at_once or os.cpu_count() or 1)
        self.env = env
        """The environment of drivers and linkers (None: this process's)."""
        self.scratch = scratch
        """Where a link's argument file for the linker goes (None: the system's)."""
        self.lock = threading.Lock()
        self.lines: dict[tuple[str, ...], _Resolving] = {}
        self.cpu = 0.0
        """CPU seconds of the drivers and linkers run so far (`spend`)."""

    def spend(self, seconds: float) -> None:
        with self.lock:
            self.cpu += seconds

    def find(self, driver_file: str) -> None:
        """Start finding the line behind the driver command in `driver_file` (one argument
        per line) ahead of its link, beside the request that asks; a file that cannot be
        read is only logged (the link's requests run the driver then)."""
        try:
            driver = read_args_file(driver_file)
        except DistLtoError as err:
            self.note(f"warning: {err}")
            return
        if not driver:
            return
        entry, mine = self._entry(driver)
        if mine:
            threading.Thread(target=self._resolve, args=(driver, entry), daemon=True).start()

    def get(self, driver: "Sequence[str]", wait: bool = True) -> "LinkerLine | None":
        """The line behind `driver`, found now unless it was before; one being found
        still is waited for, or with `wait` False taken as none (a plan or final link
        request then runs the driver rather than wait behind other links' drivers)."""
        entry, mine = self._entry(driver)
        if mine:
            self._resolve(driver, entry)
        elif wait:
            entry.done.wait()
        return entry.line  # None until found

    def _entry(self, driver: "Sequence[str]") -> "tuple[_Resolving, bool]":
        """The driver's entry, and whether this call made it (and so finds its line)."""
        key = tuple(driver)
        with self.lock:
            entry = self.lines.get(key)
            if entry is not None:
                return entry, False
            entry = self.lines[key] = _Resolving()
            return entry, True

    def _resolve(self, driver: "Sequence[str]", entry: _Resolving) -> None:
        try:
            with self.turns:
                found = driver_line.resolve(driver, self.env, self.spend)
            if isinstance(found, str):
                self.note(f"{driver[0]}: links run it as given: {found}")
            else:
                self.note(f"{driver[0]}: links run {found.before[0]} directly")
                entry.line = found
        finally:
            entry.done.set()


def link_request(argv: "list[str]") -> bool:
    """Whether `argv` is a final link: `DRIVER... -o OUT @ARGS`."""
    return (
        len(argv) >= 4
        and argv[-3] == "-o"
        and argv[-1].startswith("@")
        and not argv[0].startswith(("-", "@"))
    )


def run_link(argv: "list[str]", lines: LinkerLines, running: "Running") -> "Reply":
    """A final link request: the linker on its driver's line with the argument file's
    words, or the driver itself where `driver_line` says the line is not the same."""
    from dist_lto.worker.requests import Reply

    driver, output, args_file = argv[:-3], argv[-2], argv[-1][1:]
    command = argv
    scratch = None
    line = lines.get(driver, wait=False)
    words = None if line is None else _linker_words(args_file)
    if line is not None and words is not None:
        try:
            fd, scratch = tempfile.mkstemp(prefix="link-", suffix=".args", dir=lines.scratch)
            with os.fdopen(fd, "wb") as f:
                f.write(response_file(words))
            command = line.command(["@" + scratch], output)
        except OSError:  # no room for it: the driver runs, as the command does
            if scratch is not None:
                remove_quietly(scratch)
                scratch = None
    try:
        done = children.run(
            command,
            env=lines.env,
            stdin=children.DEVNULL,
            stdout=children.CAPTURE,
            on_start=running.started,
            cpu=True,
            limit=OUTPUT_LIMIT,
        )
    except children.CannotRun as err:
        return Reply(2, f"{command[0]}: cannot run: {err.reason}\n".encode())
    finally:
        running.close()
        if scratch is not None:
            remove_quietly(scratch)
    lines.spend(done.cpu)
    return Reply(children.action_status(done.status), done.stdout + done.stderr)


def _linker_words(args_file: str) -> "list[str] | None":
    """The argument file's words as the linker takes them, or None: unreadable or too
    large (the driver then says what it makes of it), or holding a word the driver does
    not copy in place."""
    try:
        data = read_input(args_file, "argument file", ARGS_LIMIT + 1)
        if len(data) > ARGS_LIMIT:
            return None
        return driver_line.linker_inputs(parse_response_file(data.decode(), args_file))
    except (DistLtoError, UnicodeDecodeError):
        return None
