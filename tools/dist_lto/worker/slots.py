"""How many backends the opt worker compiles at once, and which first.

Buck2 sends the worker a request per local slot it gives the worker's actions, and one
more for each action that takes no slot (`--unweighted`, sent at once): a link's
largest module, so that it starts first as in-process LLD starts its largest backend,
or, with `[dist_lto] opt_queue`, every module of the link, so that the worker holds
them all and none waits for Buck2 to hand out a slot again. Compiling all of them would
run more backends than there are slots, and backends sharing CPUs cost more CPU (Lua's
and zstd's, three at a time on two CPUs: 2-15% more than two at a time,
`bench/backend_cpu.py --at-once 2,3`). So the worker compiles as many as the requests
in flight hold slots, or as many unweighted ones as are in flight up to its `jobs`
(Buck2's `[build] threads`, or the CPUs) if that is more; unweighted ones first, the
largest module first: an unweighted backend takes a slot another request brought, and
that request waits.

When a compile ends, its slot leaves with the reply, and Buck2 brings it back with the
next request about 10 ms later (docs/benchmarks.md#queued-backends). Meanwhile its turn
is spare: it goes to a waiting request, else to a backend run ahead of its request
(`ahead.py`), and the next request waits for a turn as it would have for its slot. A
slot that has not come back within `RETURN_SECONDS` went to another action: its turn
is no longer lent, so the worker compiles more than its requests' slots only for as
long as one backend lent a turn takes, never more than the most turns Buck2 has given
at once.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager

from dist_lto import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from dist_lto.backend import Runner

RETURN_SECONDS = 0.1
"""How long a slot that left with a reply counts as on its way back (Buck2's hand-over
takes about 10 ms)."""


class _Waiter:
    """A request waiting for its turn to compile; told alone when it gets it."""

    __slots__ = ("granted", "size", "turn", "unweighted")

    def __init__(self, unweighted: bool, size: int, lock: threading.Lock) -> None:
        self.unweighted = unweighted
        self.size = size
        self.turn = threading.Condition(lock)
        self.granted = False


class Slots:
    """The requests in flight, by whether they hold a slot, and the backends compiling.

    A turn is handed to one waiting request at a time, the one it falls to: with a link's
    backends all waiting (`opt_queue`), waking every waiter at each change would cost the
    worker more CPU than deciding for them."""

    def __init__(
        self,
        jobs: int | None = None,
        on_most: Callable[[int], None] | None = None,
        spare_turns: bool = True,
    ) -> None:
        self.jobs = jobs if jobs is not None else len(os.sched_getaffinity(0))
        """How many unweighted backends compile at once when no request holds a slot."""
        self.lock = threading.Lock()
        self.slotted = 0
        self.unweighted = 0
        """Requests in flight that hold a slot, and that hold none."""
        self.compiling = 0
        self.waiting: list[_Waiter] = []
        """Requests waiting for their turn, in the order they came."""
        self.most = 0
        self.on_most = on_most
        """The most backends compiling at once so far, and who is told when it grows."""
        self.spare_turns = spare_turns
        """Whether a turn a finished compile leaves is used before its slot returns."""
        self.widest = 0
        """The most turns the requests in flight have given at once (up to `jobs`)."""
        self.returning: list[float] = []
        """When each slot that left with a reply stops counting as on its way back."""
        self.ahead: Callable[[], bool] | None = None
        """Starts a backend ahead of its request in a spare turn, if there is one
        (`ahead.RunAhead.start_next`, called with the lock held)."""

    @contextmanager
    def request(self, unweighted: bool) -> Iterator[None]:
        """A request in flight, from its arrival to its reply."""
        with self.lock:
            if unweighted:
                self.unweighted += 1
            else:
                self.slotted += 1
                if self.returning:  # a slot back
                    self.returning.pop(0)
            held = self._held(self.slotted, self.unweighted)
            self.widest = max(self.widest, min(max(1, held), self.jobs))
            self._hand_out(spare=False)  # one more slot to compile in, this request's
        try:
            yield
        finally:
            with self.lock:
                if unweighted:
                    self.unweighted -= 1
                else:
                    self.slotted -= 1
                self._hand_out()  # no slot left may let unweighted ones use `jobs`

    @contextmanager
    def compiling_turn(
        self, unweighted: bool, stopped: Callable[[], bool], size: int = 0,
        queued: Callable[[], None] | None = None,
    ) -> Iterator[None]:  # fmt: skip
        """Wait until this request's backend (of a module of `size` bytes) may compile,
        or the request is stopped (its compiler is then killed as it starts), and count
        it as compiling. `queued` is told once it waits in line (or has its turn)."""
        with self.lock:
            me = _Waiter(unweighted, size, self.lock)
            self.waiting.append(me)
            self._hand_out(spare=False)
            if queued is not None:
                queued()
            try:
                me.turn.wait_for(lambda: me.granted or stopped())
            finally:
                if not me.granted:
                    self.waiting.remove(me)
                    self._count_compiling()
        try:
            yield
        finally:
            with self.lock:
                self.compiling -= 1
                # As if this request had replied: its slot is about to leave with it...
                if not unweighted and self.spare_turns:  # ... and to come back
                    self.returning.append(time.monotonic() + RETURN_SECONDS)
                self._hand_out(leaving=unweighted)

    def _hand_out(self, leaving: bool | None = None, spare: bool = True) -> None:
        """Give turns while fewer compile than the slots in flight or, if more, the
        unweighted requests in flight up to `jobs`, not counting a request `leaving`
        (whether it is unweighted; None: none): unweighted requests first, the largest
        module first; the others in the order they came. When a turn has just ended
        (`spare`), one more per slot on its way back, up to the most turns Buck2 has
        given at once (`widest`): to waiting requests first, then to backends run ahead.
        Called with the lock held."""
        slotted = self.slotted - (leaving is False)
        unweighted = self.unweighted - (leaving is True)
        held = self._held(slotted, unweighted)
        lent = 0  # those and the turns of slots on their way back, up to `widest`
        if spare and self.returning:
            now = time.monotonic()
            self.returning = [t for t in self.returning if t > now]
            lent = min(self.widest, held + len(self.returning))
        limit = max(1, held, lent)
        while self.waiting and self.compiling < limit:
            first = [w for w in self.waiting if w.unweighted]
            chosen = max(first, key=lambda w: w.size) if first else self.waiting[0]
            self.waiting.remove(chosen)
            chosen.granted = True
            self._count_compiling()
            chosen.turn.notify()
        if self.ahead is not None and not self.waiting:
            while self.compiling < lent and self.ahead():
                self._count_compiling()

    def _held(self, slotted: int, unweighted: int) -> int:
        """The turns requests in flight bring: their slots or, if more, the unweighted
        ones up to `jobs`."""
        return max(slotted, min(unweighted, self.jobs))

    def ahead_ended(self) -> None:
        """A backend run ahead has ended: its turn is free."""
        with self.lock:
            self.compiling -= 1
            self._hand_out()

    def _count_compiling(self) -> None:
        self.compiling += 1
        if self.compiling > self.most:
            self.most = self.compiling
            if self.on_most is not None:
                self.on_most(self.most)

    def wake(self) -> None:
        """Let waiting requests look again (one of them was stopped)."""
        with self.lock:
            for waiter in self.waiting:
                waiter.turn.notify()

    def gate(
        self, run: Runner, unweighted: bool, stopped: Callable[[], bool], size: int = 0,
        queued: Callable[[], None] | None = None,
    ) -> Runner:  # fmt: skip
        """`run` (a compiler's), started in this request's turn (`size`: its modules'
        bytes; `queued`: as `compiling_turn` says)."""

        def in_turn(argv: list[str], on_start: Callable[[int], None] | None) -> tuple[int, bytes]:
            with self.compiling_turn(unweighted, stopped, size, queued):
                return run(argv, on_start)

        return in_turn
