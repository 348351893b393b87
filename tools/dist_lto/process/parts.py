"""Splitting the planner's per-object work over forked worker processes, in lock step.

At 100,000 objects the planner's time goes to reading `.imports` files and creating
plan files: system calls that one Python process issues one after another. Forked
workers (not threads: the GIL turns many tiny system calls into a convoy) each take a
share. The order stays "check everything, then write": every worker reads and
checks its share and reports; only when all shares are good does any write start,
and if any write fails every share's outputs are removed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

import orjson

from dist_lto.errors import DistLtoError
from dist_lto.fsutil import remove_output, write_failure
from dist_lto.process import children

_GO = b"g"


@dataclass(frozen=True)
class Part:
    """One share of the work: read and check it, write it, and what it writes."""

    read: Callable[[], None]
    write: Callable[[], None]
    outputs: Callable[[], list[str]]


def _report(fd: int, step: Callable[[], None]) -> bool:
    """Run `step` in a worker and send its outcome up as one JSON line."""
    try:
        step()
        message: dict[str, object] = {"ok": True}
    except (DistLtoError, OSError) as caught:
        err = write_failure(caught) if isinstance(caught, OSError) else caught
        message = {"ok": False, "message": err.message, "status": err.status, "detail": err.detail}
    except BaseException as err:  # reported by the parent as an internal error
        message = {
            "ok": False,
            "message": f"planner worker: {type(err).__name__}: {err}",
            "status": 1,
            "detail": "",
        }
    os.write(fd, orjson.dumps(message) + b"\n")
    return bool(message["ok"])


class _Worker:
    """A forked process holding one part; it waits for the word to write."""

    def __init__(self, part: Part) -> None:
        up_r, up_w = os.pipe()
        down_r, down_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker: never returns
            try:
                children.forked()
                os.close(up_r)
                os.close(down_w)
                if _report(up_w, part.read) and os.read(down_r, 1) == _GO:
                    _report(up_w, part.write)
            finally:
                os._exit(0)
        os.close(up_w)
        os.close(down_r)
        self.pid = pid
        self.up: BinaryIO = os.fdopen(up_r, "rb")
        self.down: int | None = down_w

    def result(self) -> DistLtoError | None:
        """The outcome of the worker's current step (None: it succeeded)."""
        line = self.up.readline()
        if not line:
            return DistLtoError("planner worker exited unexpectedly")
        message = orjson.loads(line)
        if message["ok"]:
            return None
        return DistLtoError(message["message"], status=message["status"], detail=message["detail"])

    def go(self) -> None:
        assert self.down is not None
        os.write(self.down, _GO)

    def reap(self) -> None:
        """Close the pipes (a worker still waiting then exits without writing) and wait."""
        if self.down is not None:
            os.close(self.down)
            self.down = None
        self.up.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def remove_files(paths: list[str]) -> None:
    """Remove what a failed run wrote; files already gone are fine, and what is not a
    regular file (a device or FIFO written through) stays (`fsutil.remove_output`)."""
    for path in paths:
        remove_output(path)


def run(
    parts: list[Part], read_shared: Callable[[], None], write_shared: Callable[[], None]
) -> None:
    """Run `parts[0]` and the shared steps here and every other part in a worker.

    Failures are reported as the first one in part order, shared work last: the same
    one a single process working through the parts in order would have met.
    """
    workers: list[_Worker] = []
    try:
        workers = [_Worker(part) for part in parts[1:]]
        errors: list[tuple[int, DistLtoError]] = []
        for rank, step in ((0, parts[0].read), (len(parts), read_shared)):
            try:
                step()
            except DistLtoError as err:
                errors.append((rank, err))
        for rank, worker in enumerate(workers, 1):
            error = worker.result()
            if error is not None:
                errors.append((rank, error))
        if errors:
            raise min(errors, key=lambda e: e[0])[1]
        for worker in workers:
            worker.go()
        failure: BaseException | None = None
        try:
            write_shared()
            parts[0].write()
        except BaseException as err:
            failure = err
        for worker in workers:
            error = worker.result()
            failure = failure or error
        if failure is not None:
            for part in parts:
                remove_files(part.outputs())
            raise failure
    finally:
        for worker in workers:
            worker.reap()
