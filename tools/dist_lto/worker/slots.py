"""How many backends the opt worker compiles at once, and which first.

Buck2 sends the worker a request per local slot it gives the worker's actions, and one
more for each action that takes no slot: the link's largest module (`--unweighted`,
sent at once so that it starts first, as in-process LLD starts its largest backend).
Compiling all of them would run one backend more than there are slots, and backends
sharing CPUs cost more CPU (Lua's and zstd's, three at a time on two CPUs: 2-15% more
than two at a time, `bench/backend_cpu.py --at-once 2,3`). So the worker compiles as
many as the requests in flight hold slots, unweighted ones first: the largest module
takes one of those slots, and the request that brought the slot waits for it.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager

from dist_lto import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from dist_lto.backend import Runner


class Slots:
    """The requests in flight, by whether they hold a slot, and the backends compiling."""

    def __init__(
        self, cpus: int | None = None, on_most: Callable[[int], None] | None = None
    ) -> None:
        self.cpus = cpus if cpus is not None else len(os.sched_getaffinity(0))
        """How many unweighted backends compile at once when no request holds a slot."""
        self.changed = threading.Condition()
        self.slotted = 0
        self.unweighted = 0
        """Requests in flight that hold a slot, and that hold none."""
        self.compiling = 0
        self.unweighted_waiting = 0
        self.most = 0
        self.on_most = on_most
        """The most backends compiling at once so far, and who is told when it grows."""

    @contextmanager
    def request(self, unweighted: bool) -> Iterator[None]:
        """A request in flight, from its arrival to its reply."""
        with self.changed:
            if unweighted:
                self.unweighted += 1
            else:
                self.slotted += 1
            self.changed.notify_all()  # one more slot to compile in
        try:
            yield
        finally:
            with self.changed:
                if unweighted:
                    self.unweighted -= 1
                else:
                    self.slotted -= 1
                self.changed.notify_all()

    @contextmanager
    def compiling_turn(self, unweighted: bool, stopped: Callable[[], bool]) -> Iterator[None]:
        """Wait until this request's backend may compile (or the request is stopped:
        its compiler is then killed as it starts), and count it as compiling."""
        with self.changed:
            if unweighted:
                self.unweighted_waiting += 1
            try:
                self.changed.wait_for(lambda: stopped() or self._may_start(unweighted))
            finally:
                if unweighted:
                    self.unweighted_waiting -= 1
            self.compiling += 1
            if self.compiling > self.most:
                self.most = self.compiling
                if self.on_most is not None:
                    self.on_most(self.most)
        try:
            yield
        finally:
            with self.changed:
                self.compiling -= 1
                self.changed.notify_all()

    def _may_start(self, unweighted: bool) -> bool:
        limit = max(1, self.slotted, min(self.unweighted, self.cpus))
        return self.compiling < limit and (unweighted or self.unweighted_waiting == 0)

    def wake(self) -> None:
        """Let waiting requests look again (one of them was stopped)."""
        with self.changed:
            self.changed.notify_all()

    def gate(self, run: Runner, unweighted: bool, stopped: Callable[[], bool]) -> Runner:
        """`run` (a compiler's), started in this request's turn."""

        def in_turn(argv: list[str], on_start: Callable[[int], None] | None) -> tuple[int, bytes]:
            with self.compiling_turn(unweighted, stopped):
                return run(argv, on_start)

        return in_turn
