"""The farm model (bench/farm_model.py): its scheduler and its readers of build records,
on hand-made records whose answers can be worked out by hand."""

from __future__ import annotations

import sys

import orjson
import pytest
from support.tools import REPO

sys.path.insert(0, str(REPO / "bench"))  # what is tested here is the benchmark's model
import farm_model as fm


def test_backends_go_in_issue_order_to_the_worker_free_first() -> None:
    # w1: 4+.5 -> 4.5, then 2+.5 -> 7.0; w2: 3+.5 -> 3.5, then 2+.5 -> 6.0, then 1+.5 -> 7.5
    assert fm.makespan([4, 3, 2, 2, 1], 2, 0.5) == pytest.approx(7.5)
    # issued smallest first, the big one lands last: 1, 2, 2 | 3 then 4 on the worker free first
    assert fm.makespan([1, 2, 2, 3, 4], 2, 0.5) == pytest.approx(8.5)


def test_one_worker_runs_everything_in_turn_and_many_are_floored_by_the_largest() -> None:
    backends = [4.0, 3.0, 2.0, 2.0, 1.0]
    assert fm.makespan(backends, 1, 0.25) == pytest.approx(12 + 5 * 0.25)
    assert fm.makespan(backends, 1000, 0.25) == pytest.approx(4.25)
    assert fm.makespan([], 10, 0.25) == 0.0


def test_wall_time_adds_the_local_steps_and_in_process_is_cpu_over_threads_or_the_largest() -> None:
    record = fm.Record(local=1.5, backends=(4.0, 3.0, 2.0, 2.0, 1.0))
    assert fm.predict(record, 2, 0.5) == pytest.approx(1.5 + 7.5)
    assert fm.in_process(record, 2) == pytest.approx(1.5 + 6.0)
    assert fm.in_process(record, 64) == pytest.approx(1.5 + 4.0)


def _slice(name: str, cat: str, ts: int, dur: int) -> dict:
    return {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "pid": 1, "tid": 1}


def test_a_distribute_trace_gives_the_jobs_in_start_order_and_the_rest_as_local() -> None:
    trace = {
        "traceEvents": [
            {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "d"}},
            _slice("b.o", "job", 2_000_000, 1_000_000),
            _slice("compile", "compile", 2_000_100, 999_000),
            _slice("a.o", "job", 0, 2_000_000),
        ]
    }
    record = fm.from_trace(trace, wall=4.0)
    assert record.backends == (2.0, 1.0)
    assert record.local == pytest.approx(1.0)


def _action(category: str, wall_us: int, start: int) -> str:
    event = {
        "Event": {
            "data": {
                "SpanEnd": {
                    "duration_us": wall_us,
                    "data": {
                        "ActionExecution": {
                            "name": {"category": category, "identifier": "x"},
                            "execution_kind": 1,
                            "wall_time_us": wall_us,
                            "commands": [{"details": {"metadata": {"start_time": [start, 0]}}}],
                        }
                    },
                }
            }
        }
    }
    return orjson.dumps(event).decode()


def test_a_buck2_event_log_gives_opt_actions_in_start_order_and_plan_and_link_as_local() -> None:
    lines = [
        _action("cxx_compile", 9_000_000, 1),
        _action("thin_lto_plan", 500_000, 10),
        _action("thin_lto_opt", 1_000_000, 13),
        _action("thin_lto_opt_archive_executable", 3_000_000, 11),
        _action("thin_lto_link", 250_000, 20),
        "not an event",
    ]
    record = fm.from_buck2_log(lines)
    assert record.backends == (3.0, 1.0)
    assert record.local == pytest.approx(0.75)


def test_an_extrapolated_record_repeats_every_backend_but_the_largest() -> None:
    record = fm.Record(local=0.5, backends=(1.0, 4.0, 2.0))
    bigger = fm.extrapolated(record, 3, largest=6.0)
    assert bigger.backends == (1.0, 1.0, 1.0, 6.0, 2.0, 2.0, 2.0)
    assert bigger.local == pytest.approx(1.5)
    assert fm.extrapolated(record, 2, None).backends == (1.0, 1.0, 4.0, 2.0, 2.0)


def test_a_process_cpu_line_gives_its_own_and_its_childrens_seconds_whatever_its_name() -> None:
    tick = fm.TICKS
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
    # utime stime cutime cstime ...: a name holding ") " must not shift the fields
    line = f"42 (bb_runner) x (y) S 1 42 42 0 -1 4194560 10 0 0 0 {3 * tick} {tick}"
    line += f" {10 * tick} {2 * tick} 20 0 8 0 100 0 0\n"
    assert fm.process_cpu(line) == pytest.approx((4.0, 12.0))


def test_the_machine_is_busy_for_all_but_idle_and_iowait() -> None:
    tick = fm.TICKS
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat = f"cpu  {5 * tick} {tick} {2 * tick} {100 * tick} {7 * tick} 0 {tick} {tick} 9 9\n"
    stat += "cpu0 1 2 3 4 5 6 7 8 9 10\n"
    assert fm.machine_busy(stat) == pytest.approx(10.0)


def test_cpu_not_spent_by_the_engine_the_link_or_its_backends_is_others() -> None:
    start = fm.Snapshot({"storage": (1.0, 0.0), "runner-w1": (0.5, 4.0)}, 2.0, 100.0)
    end = fm.Snapshot({"storage": (3.0, 0.0), "runner-w1": (1.0, 14.0)}, 3.5, 130.0)
    cpu = start.until(end)
    assert (cpu.engine, cpu.backends, cpu.client) == pytest.approx((2.5, 10.0, 1.5))
    assert cpu.others == pytest.approx(30.0 - 14.0)
    assert cpu.per_action(10) == pytest.approx(0.4)


def _taken(record: fm.Record, cores: float = 1.0, others: float = 0.0) -> fm.Taken:
    return fm.Taken(record, cores, others)


def test_a_point_predicts_the_mean_of_its_records_around_the_measurement() -> None:
    before = fm.Record(local=1.0, backends=(4.0, 3.0, 2.0, 2.0, 1.0))  # 12 s of backends
    after = fm.Record(local=1.0, backends=(6.0, 5.0, 4.0, 4.0, 1.0))  # 20 s: the load rose
    cpu = fm.HostCpu(client=0.0, engine=0.0, backends=0.0, others=0.0)
    point = fm.Point(_taken(before), _taken(after), measured=19.0, cpu=cpu)
    # one worker: 1 + 12 + 5 * 0.5 = 15.5 and 1 + 20 + 2.5 = 23.5
    assert point.predict(1, 0.5, 0.0) == pytest.approx(19.5)
    # the overhead that meets 19 s: (19 - 13) / 5 = 1.2 and (19 - 21) / 5 = -0.4
    assert point.overhead() == pytest.approx(0.4)


def test_workers_filling_the_host_pay_its_cpu_per_action_over_the_cores_the_link_got() -> None:
    record = fm.Record(local=1.0, backends=(4.0, 3.0, 2.0, 2.0, 1.0))
    # the workers' bound: 1 + 7.5 (the scheduler test's makespan)
    assert fm.predict_shared(record, 2, 0.5, 0.0, 2.0, 2) == pytest.approx(8.5)
    # span 6 (4 | 3 2 1, then 2 on the first free), five actions' 0.4 s of host CPU on 1 core
    assert fm.predict_shared(record, 2, 0.5, 0.4, 1.0, 2) == pytest.approx(1 + 6 + 2)
    # on 2 cores that CPU costs 1 s: the workers' bound holds
    assert fm.predict_shared(record, 2, 0.5, 0.4, 2.0, 2) == pytest.approx(8.5)
    # fewer workers than cores: the host's CPU runs on the cores they leave free
    assert fm.predict_shared(record, 1, 0.5, 0.4, 0.5, 2) == pytest.approx(1 + 12 + 2.5)


def test_others_are_the_most_any_part_of_a_point_saw() -> None:
    record = fm.Record(local=0.0, backends=(1.0,))
    cpu = fm.HostCpu(client=0.0, engine=0.0, backends=0.0, others=3.0)
    point = fm.Point(_taken(record, others=0.2), _taken(record, others=0.1), 10.0, cpu)
    assert point.others == pytest.approx(0.3)


def _point(others: float, measured: float) -> fm.Point:
    record = fm.Record(local=0.0, backends=(1.0,))
    cpu = fm.HostCpu(client=0.0, engine=0.0, backends=0.0, others=0.0)
    return fm.Point(_taken(record, others=others), _taken(record), measured, cpu)


def test_the_first_quiet_point_is_kept_else_the_least_disturbed_of_the_tries() -> None:
    tries = iter([_point(1.2, 1.0), _point(0.1, 2.0), _point(0.0, 3.0)])
    kept = fm.quietest(lambda: next(tries), 3)
    assert (kept.measured, kept.attempts) == (2.0, 2)
    tries = iter([_point(1.2, 1.0), _point(0.5, 2.0), _point(0.9, 3.0)])
    kept = fm.quietest(lambda: next(tries), 3)
    assert (kept.measured, kept.attempts) == (2.0, 3)
