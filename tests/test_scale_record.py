"""bench/scale.py's reader of a build's event log, on hand-made records whose answers can
be worked out by hand."""

from __future__ import annotations

import sys

import orjson
from support.tools import REPO

sys.path.insert(0, str(REPO / "bench"))  # what is tested here is the benchmark's reader
import scale


def _event(at: float, data: dict[str, object]) -> str:
    secs = int(at)
    event = {"timestamp": [secs, int((at - secs) * 1e9)], "data": data}
    return orjson.dumps({"Event": event}).decode()


def _opt(start: float, stop: float, category: str = "thin_lto_opt") -> str:
    action = {"name": {"category": category}, "execution_kind": 8}
    return _event(stop, {"SpanEnd": {"duration_us": int((stop - start) * 1e6),
                                     "data": {"ActionExecution": action}}})  # fmt: skip


def _snapshot(at: float, cpu_s: float) -> str:
    half = int(cpu_s * 1e6 / 2)
    snapshot = {"buck2_user_cpu_us": half, "buck2_system_cpu_us": half, "buck2_max_rss": 7}
    return _event(at, {"Instant": {"data": {"Snapshot": snapshot}}})


def test_the_daemons_cpu_per_opt_action_is_taken_over_their_span() -> None:
    # 200 opt actions between t=10 and t=20; the daemon's CPU goes from 1 s to 5 s then.
    lines = [_snapshot(0, 0.5), _snapshot(10, 1.0), _snapshot(20, 5.0), _snapshot(30, 9.0)]
    lines += [_opt(10 + i * 0.05, 10 + i * 0.05 + 0.5) for i in range(190)]
    lines += [_opt(19, 20, "thin_lto_opt_archive_executable") for _ in range(10)]
    record = scale.read_record(lines)
    assert record.actions["thin_lto_opt"] == 190
    assert record.opt_daemon_ms == 4.0 / 200 * 1000
    assert record.daemon_peak == 7


def test_few_opt_actions_give_no_per_action_figure() -> None:
    lines = [_snapshot(0, 0.0), _snapshot(10, 1.0)] + [_opt(1, 9) for _ in range(3)]
    assert scale.read_record(lines).opt_daemon_ms == 0.0
