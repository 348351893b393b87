"""The opt worker compiles as many backends at once as its requests in flight hold
Buck2 slots, and requests that hold none (`--unweighted`: a link's largest module, or
every module with `[dist_lto] opt_queue`) first, the largest module first; the turn a
finished compile leaves goes to a waiting request while its slot returns to Buck2:
worker/slots.py."""

from __future__ import annotations

import threading
import time

from dist_lto.worker.slots import Slots
from support.processes import wait_until


class Request:
    """One request in its own thread: in flight at once, compiling until released."""

    def __init__(
        self, slots: Slots, name: str, started: list[str], unweighted: bool = False, size: int = 0
    ) -> None:
        self.slots = slots
        self.name = name
        self.started = started
        self.unweighted = unweighted
        self.size = size
        self.release = threading.Event()
        self.stopped = False
        self.arrived = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()
        self.arrived.wait()

    def _run(self) -> None:
        with self.slots.request(self.unweighted):
            self.arrived.set()
            with self.slots.compiling_turn(self.unweighted, lambda: self.stopped, self.size):
                self.started.append(self.name)
                self.release.wait()

    def finish(self) -> None:
        self.release.set()
        self.thread.join()


def settle() -> None:
    """Time for a waiting request to start, were it allowed to."""
    time.sleep(0.1)


def test_a_request_without_a_slot_compiles_in_the_one_another_request_brought() -> None:
    slots = Slots(jobs=2)
    started: list[str] = []
    largest = Request(slots, "largest", started, unweighted=True)
    wait_until('started == ["largest"]', lambda: started == ["largest"], 5.0)
    other = Request(slots, "other", started)  # Buck2 at -j 1: one slot
    settle()
    assert started == ["largest"]
    largest.finish()
    wait_until('started == ["largest", "other"]', lambda: started == ["largest", "other"], 5.0)
    other.finish()
    assert slots.most == 1


def test_a_waiting_request_without_a_slot_goes_before_those_with_one() -> None:
    slots = Slots(jobs=2)
    started: list[str] = []
    a = Request(slots, "a", started)
    b = Request(slots, "b", started)
    wait_until('sorted(started) == ["a", "b"]', lambda: sorted(started) == ["a", "b"], 5.0)
    largest = Request(slots, "largest", started, unweighted=True)
    settle()
    assert len(started) == 2  # the two slots are compiling
    c = Request(slots, "c", started)  # a third slot: the unweighted request takes it
    wait_until("len(started) == 3", lambda: len(started) == 3, 5.0)
    settle()
    assert started[2] == "largest"
    a.finish()  # its slot leaves with it: c still waits for one
    settle()
    assert len(started) == 3
    b.finish()
    largest.finish()
    wait_until('started[-1] == "c"', lambda: started[-1] == "c", 5.0)
    c.finish()
    assert slots.most == 3


def test_requests_without_slots_alone_compile_as_many_as_the_jobs() -> None:
    slots = Slots(jobs=2)
    started: list[str] = []
    links = [Request(slots, f"largest{i}", started, unweighted=True) for i in range(3)]
    wait_until("len(started) == 2", lambda: len(started) == 2, 5.0)
    settle()
    assert len(started) == 2
    links[int(started[0][-1])].finish()
    wait_until("len(started) == 3", lambda: len(started) == 3, 5.0)
    for link in links:
        link.finish()
    assert slots.most == 2


def test_a_stopped_request_stops_waiting_for_its_turn() -> None:
    slots = Slots(jobs=2)
    started: list[str] = []
    largest = Request(slots, "largest", started, unweighted=True)
    wait_until('started == ["largest"]', lambda: started == ["largest"], 5.0)
    other = Request(slots, "other", started)
    settle()
    assert started == ["largest"]
    other.stopped = True
    slots.wake()  # as `Running.stop` does
    wait_until('started == ["largest", "other"]', lambda: started == ["largest", "other"], 5.0)
    other.finish()
    largest.finish()


def test_the_most_compiling_at_once_is_told_as_it_grows() -> None:
    told: list[int] = []
    slots = Slots(jobs=2, on_most=told.append)
    started: list[str] = []
    a = Request(slots, "a", started)
    b = Request(slots, "b", started)
    wait_until("len(started) == 2", lambda: len(started) == 2, 5.0)
    a.finish()
    c = Request(slots, "c", started)
    wait_until("len(started) == 3", lambda: len(started) == 3, 5.0)
    b.finish()
    c.finish()
    assert told == [1, 2]


def test_waiting_requests_without_slots_compile_the_largest_module_first() -> None:
    slots = Slots(jobs=1)
    started: list[str] = []
    first = Request(slots, "first", started, unweighted=True, size=5)
    wait_until('started == ["first"]', lambda: started == ["first"], 5.0)
    queued = {size: Request(slots, f"size{size}", started, unweighted=True, size=size)
              for size in (1, 3, 2, 4)}  # fmt: skip
    settle()
    assert started == ["first"]
    first.finish()
    for size in (4, 3, 2, 1):
        wait_until(f"size{size} started", lambda s=size: started[-1] == f"size{s}", 5.0)
        settle()
        assert len(started) == 6 - size  # one at a time: --jobs 1
        queued[size].finish()
    assert slots.most == 1


def test_a_waiting_request_takes_the_turn_a_finished_compile_leaves_before_its_slot_returns() -> (
    None
):
    slots = Slots(jobs=2)
    started: list[str] = []
    # Buck2 at -j 2: the largest module without a slot, two requests with one each.
    largest = Request(slots, "largest", started, unweighted=True, size=9)
    a = Request(slots, "a", started)
    b = Request(slots, "b", started)
    wait_until("len(started) == 2", lambda: len(started) == 2, 5.0)
    settle()
    assert started == ["largest", "a"]  # b waits: the largest took the slot it brought
    a.finish()  # a's slot is on its way back to Buck2: b compiles meanwhile
    wait_until('started[-1] == "b"', lambda: started[-1] == "b", 5.0)
    c = Request(slots, "c", started)  # the slot back with c: two compile already
    settle()
    assert started[-1] == "b"
    b.finish()
    wait_until('started[-1] == "c"', lambda: started[-1] == "c", 5.0)
    largest.finish()
    c.finish()
    assert slots.most == 2
