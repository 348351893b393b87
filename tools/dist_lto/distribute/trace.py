"""`--trace FILE`: where a link's time went, as Chrome trace-event JSON.

One process (the distribution), one thread per worker, and per job one slice named
after its module with the steps inside it as nested slices (`cache lookup`,
`compile`, `remote`, `cache store`, `link`). Perfetto (ui.perfetto.dev) and
`chrome://tracing` open it. The format: "JSON Object Format" of the Trace Event
Format, complete events (`"ph": "X"`, `ts` and `dur` in microseconds) plus
`process_name`/`thread_name` metadata events (`"ph": "M"`).
"""

import json
import os
import threading
import time

from dist_lto.fsutil import write_atomic

TRACE_PID = 1
"""One process per trace; a constant, so that traces of the same link compare."""


class Trace:
    """Slices collected from the worker threads, written once at the end."""

    def __init__(self, path: str, process_name: str) -> None:
        self.path = path
        self.process_name = process_name
        self.origin = time.monotonic_ns()
        self.events: list[dict[str, object]] = []
        self.threads: dict[int, str] = {}
        self.lock = threading.Lock()

    @staticmethod
    def now() -> int:
        return time.monotonic_ns()

    def name_thread(self, tid: int, name: str) -> None:
        with self.lock:
            self.threads[tid] = name

    def add(
        self,
        tid: int,
        name: str,
        category: str,
        start_ns: int,
        end_ns: int,
        args: "dict[str, object] | None" = None,
    ) -> None:
        """A complete event on thread `tid` from `start_ns` to `end_ns` (monotonic)."""
        event: dict[str, object] = {
            "name": name,
            "cat": category,
            "ph": "X",
            "ts": (start_ns - self.origin) // 1000,
            "dur": max((end_ns - start_ns) // 1000, 1),
            "pid": TRACE_PID,
            "tid": tid,
        }
        if args:
            event["args"] = args
        with self.lock:
            self.events.append(event)

    def document(self) -> dict[str, object]:
        with self.lock:
            slices = sorted(self.events, key=lambda e: (e["tid"], e["ts"], -int(e["dur"])))  # type: ignore[call-overload]
            threads = dict(self.threads)
        meta: list[dict[str, object]] = [
            {"name": "process_name", "ph": "M", "pid": TRACE_PID, "tid": 0,
             "args": {"name": self.process_name}},
        ]  # fmt: skip
        meta += [
            {"name": "thread_name", "ph": "M", "pid": TRACE_PID, "tid": tid,
             "args": {"name": name}}
            for tid, name in sorted(threads.items())
        ]  # fmt: skip
        return {"traceEvents": meta + slices, "displayTimeUnit": "ms"}

    def write(self) -> None:
        """Write the trace through a temporary name (OSError if it cannot be)."""
        directory = os.path.dirname(self.path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        write_atomic(self.path, json.dumps(self.document(), indent=None).encode() + b"\n")
