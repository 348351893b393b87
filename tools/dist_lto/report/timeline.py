"""Where a link's time went, from the trace `distribute --trace` or `link --trace`
wrote (Chrome trace-event JSON, distribute/trace.py): the longest backends, and the
critical path, the chain of slices that decided when the link ended.

Each worker runs one job after another, so a job on it starts when the one before it
on the same worker ends. Walking back from the slice that ended last (the final link
of `dist-lto link`, else the last job to end) through the job it waited for (for the
final link: the job that ended last before it started; for a job: the one before it on
its worker) gives the chain whose durations add up, with the gaps between them, to the
wall time: shortening any other job would not have ended the link sooner."""

from __future__ import annotations

from dataclasses import dataclass

from dist_lto.errors import BadInput
from dist_lto.formats.jsonio import Fields, read_json


@dataclass(frozen=True, slots=True)
class Slice:
    """One job (or the final link) on one thread; times in microseconds from the
    distributor's start."""

    name: str
    """The job's module as the job file or the plans spell it; `final link`."""
    outcome: str
    """`compiled`, `forked`, `cached`, ...; `link` for the final link."""
    thread: int
    start: int
    duration: int

    @property
    def end(self) -> int:
        return self.start + self.duration


@dataclass(frozen=True, slots=True)
class Timeline:
    path: str
    jobs: tuple[Slice, ...]
    final_link: Slice | None
    threads: dict[int, str]

    @property
    def wall(self) -> int:
        ends = [s.end for s in self.jobs] + ([self.final_link.end] if self.final_link else [])
        return max(ends, default=0)

    def longest(self, top: int) -> list[Slice]:
        """The `top` longest jobs, longest first (ties by name)."""
        return sorted(self.jobs, key=lambda s: (-s.duration, s.name))[:top]

    def critical_path(self) -> list[Slice]:
        """The chain that decided the wall time, first slice first (module docstring)."""
        if not self.jobs:
            return [self.final_link] if self.final_link else []
        by_thread: dict[int, list[Slice]] = {}
        for job in self.jobs:
            by_thread.setdefault(job.thread, []).append(job)
        for lane in by_thread.values():
            lane.sort(key=lambda s: (s.start, s.end))
        chain: list[Slice] = []
        if self.final_link is not None:
            chain.append(self.final_link)
            before = [j for j in self.jobs if j.end <= self.final_link.start + _SLACK]
            current = max(before or self.jobs, key=lambda s: (s.end, s.start))
        else:
            current = max(self.jobs, key=lambda s: (s.end, s.start))
        while True:
            chain.append(current)
            lane = by_thread[current.thread]
            earlier = [s for s in lane[: lane.index(current)] if s.end <= current.start + _SLACK]
            if not earlier:
                break
            current = earlier[-1]
        chain.reverse()
        return chain


_SLACK = 1000
"""Microseconds by which a slice may seem to start before the one it waited for ended:
the trace rounds each time to a microsecond and takes them on different threads."""


def read_trace(path: str) -> Timeline:
    """The jobs and final link of a trace our distributor wrote; BadInput naming the
    file and the JSON pointer for anything else."""
    fields = Fields(path)
    doc = fields.expect(read_json(path, "trace"), dict, "")
    events = fields.get(doc, "traceEvents", list, "")
    jobs: list[Slice] = []
    final_link: Slice | None = None
    threads: dict[int, str] = {}
    for i, raw in enumerate(events):
        at = f"/traceEvents/{i}"
        event = fields.expect(raw, dict, at)
        phase = fields.get(event, "ph", str, at)
        if phase == "M" and event.get("name") == "thread_name":
            args = fields.get(event, "args", dict, at)
            threads[fields.get(event, "tid", int, at)] = fields.get(args, "name", str, at + "/args")
            continue
        category = event.get("cat")
        if phase != "X" or category not in ("job", "link"):
            continue  # steps inside a job, and anything another tool added
        args = event.get("args", {})
        outcome = args.get("outcome", category) if isinstance(args, dict) else category
        piece = Slice(
            name=fields.get(event, "name", str, at),
            outcome=outcome if isinstance(outcome, str) else category,
            thread=fields.get(event, "tid", int, at),
            start=fields.get(event, "ts", int, at),
            duration=fields.get(event, "dur", int, at),
        )
        if piece.start < 0 or piece.duration < 0:
            fields.fail(at, "negative ts or dur")
        if category == "link":
            final_link = piece
        else:
            jobs.append(piece)
    if not jobs and final_link is None:
        raise BadInput(f"{path}: no job slices: not a trace of `dist-lto distribute` or `link`")
    return Timeline(path, tuple(jobs), final_link, threads)
