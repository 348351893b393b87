"""What `dist-lto distribute` tells the user, and how each job ended.

A job's `Outcome` is a `Status` (what the pool counts) plus the worker that ran it
remotely; `Reporter` turns outcomes into stderr lines: a progress line on a terminal,
one line per job with `--verbose`, the compilers' warnings always, and one summary line
per link where no progress line shows it (stderr not a terminal, or `--verbose`) unless
`--quiet`: a build log (make, Ninja, CI) gets one line per link saying what it cost.
"""

import enum
import os
import sys
import time

from dist_lto.formats.jobfile import Job

PROG = "dist-lto distribute"
"""How every line the distributor writes begins."""


class Status(enum.StrEnum):
    """How a job's outputs came to be. (`enum` costs no start-up here: reading the job
    file's JSON has loaded it.)"""

    COMPILED = "compiled"
    FORKED = "forked"
    """Compiled by a compiler forked from the worker's fork server."""
    SERVED = "served"
    """Compiled in the worker's compile server (process/cc1server.py)."""
    CACHED = "cached"
    """Restored from the local result cache."""
    REMOTE_EXECUTED = "executed remotely"
    REMOTE_CACHED = "remote cache"
    """Found in the remote engine's action cache."""


class Outcome:
    """How one job ended: its status and, for a remote one, the worker that ran it."""

    __slots__ = ("status", "worker")

    def __init__(self, status: Status, worker: str = "") -> None:
        self.status = status
        self.worker = worker

    def message(self) -> str:
        """The words `--verbose` prints for the job."""
        worker = self.worker or "an unnamed worker"
        if self.status is Status.REMOTE_CACHED:
            return f"from the remote action cache (ran on {worker})"
        if self.status is Status.REMOTE_EXECUTED:
            return f"executed remotely on {worker}"
        if self.status in (Status.FORKED, Status.SERVED):
            return Status.COMPILED.value
        return self.status.value


def progress_terminal() -> bool:
    """Whether stderr is a terminal that may get an updating progress line: not when
    `TERM=dumb` or `NO_COLOR` asks for plain output (no escape codes)."""
    if os.environ.get("TERM") == "dumb" or os.environ.get("NO_COLOR"):
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class Reporter:
    """What the user sees on stderr: a progress line on a terminal, `--verbose` job lines,
    compiler warnings. Called with the distribution's lock held."""

    def __init__(
        self,
        total: int,
        *,
        verbose: bool,
        tty: bool,
        quiet: bool = False,
        prog: str = PROG,
        name: str = "",
    ) -> None:
        self.prog = prog
        """How each line begins (`dist-lto link` reuses the distributor's reporting)."""
        self.name = name
        """The link's output, named on the progress line: concurrent links (`make -j`)
        share one terminal, and each line must say whose it is."""
        self.total = total
        self.verbose = verbose
        self.tty = tty
        """Whether a progress line shows (`progress_terminal`); else the summary line."""
        self.quiet = quiet
        self.started = time.monotonic()
        self.shown = False

    def _write(self, text: str) -> None:
        sys.stderr.write(text)
        sys.stderr.flush()

    def _clear(self) -> None:
        if self.shown:
            self._write("\r\x1b[K")
            self.shown = False

    def note(self, text: str) -> None:
        self._clear()
        self._write(f"{self.prog}: {text}\n")

    def warnings(self, data: bytes) -> None:
        self._clear()
        sys.stderr.flush()
        sys.stderr.buffer.write(data if data.endswith(b"\n") else data + b"\n")
        sys.stderr.buffer.flush()

    def progress(self, done: int, cached: int, running: int) -> None:
        if self.tty and not self.quiet:
            elapsed = time.monotonic() - self.started
            whose = f"{self.name}: " if self.name else ""
            self._write(
                f"\r\x1b[K{self.prog}: {whose}{done}/{self.total} done, {cached} cached,"
                f" {running} running, {elapsed:.1f} s"
            )
            self.shown = True

    def finished(self, job: Job, outcome: Outcome, seconds: float, done: int) -> None:
        if self.verbose:
            how = outcome.status in (Status.FORKED, Status.SERVED)
            forked = f", {outcome.status.value}" if how else ""
            self.note(
                f"[{done}/{self.total}] {outcome.message()} {job.module} -> {job.output}"
                f" ({seconds:.2f} s{forked})"
            )

    def summary(
        self, name: str, done: int, cached: int, failed: int, slowest: tuple[float, str]
    ) -> str | None:
        """`PROG: NAME: 33 jobs, 5 cached, 0 failed, 4.21 s, slowest lvm.o 0.83 s`, or None
        where it is not to be shown (`--quiet`; a terminal shows the progress line)."""
        if self.quiet or (self.tty and not self.verbose):
            return None
        elapsed = time.monotonic() - self.started
        text = f"{self.prog}: {name}: {self.total} jobs, {cached} cached, {failed} failed"
        if done + failed < self.total:
            text += f", {self.total - done - failed} not done"
        text += f", {elapsed:.2f} s"
        seconds, module = slowest
        if module:
            text += f", slowest {module} {seconds:.2f} s"
        return text

    def end(self) -> None:
        if self.shown:
            self._write("\n")
            self.shown = False
