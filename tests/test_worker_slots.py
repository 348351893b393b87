"""The opt worker compiles as many backends at once as its requests in flight hold
Buck2 slots, and a request that holds none (`--unweighted`, a link's largest module)
first: worker/slots.py."""

from __future__ import annotations

import threading
import time

from dist_lto.worker.slots import Slots
from support.processes import wait_until


class Request:
    """One request in its own thread: in flight at once, compiling until released."""

    def __init__(self, slots: Slots, name: str, started: list[str], unweighted: bool = False):
        self.slots = slots
        self.name = name
        self.started = started
        self.unweighted = unweighted
        self.release = threading.Event()
        self.stopped = False
        self.arrived = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()
        self.arrived.wait()

    def _run(self) -> None:
        with self.slots.request(self.unweighted):
            self.arrived.set()
            with self.slots.compiling_turn(self.unweighted, lambda: self.stopped):
                self.started.append(self.name)
                self.release.wait()

    def finish(self) -> None:
        self.release.set()
        self.thread.join()


def settle() -> None:
    """Time for a waiting request to start, were it allowed to."""
    time.sleep(0.1)


def test_a_request_without_a_slot_compiles_in_the_one_another_request_brought() -> None:
    slots = Slots(cpus=2)
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
    slots = Slots(cpus=2)
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


def test_requests_without_slots_alone_compile_one_per_cpu() -> None:
    slots = Slots(cpus=2)
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
    slots = Slots(cpus=2)
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
    slots = Slots(cpus=2, on_most=told.append)
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
