"""`distribute --trace FILE`: Chrome trace-event JSON, one slice per job per worker."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from dist_lto.formats.jobfile import read_job_file
from support.links import DtltoLink
from test_distribute_failures import captured

STEPS = {"cache lookup", "compile", "cache store", "remote"}


@pytest.fixture(scope="module")
def dist_lto(dist_lto_cmd: list[str]) -> str:
    (exe,) = dist_lto_cmd
    return exe


def traced(dist_lto: str, root: Path, job_file: Path, *args: str) -> dict[str, object]:
    done = subprocess.run([dist_lto, "distribute", "--jobs=2", "--trace=trace.json", *args,
                           job_file.name], cwd=root, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads((root / "trace.json").read_text())
    assert isinstance(doc, dict)
    return doc


def check_shape(doc: dict[str, object]) -> list[dict[str, object]]:
    """What Perfetto and chrome://tracing read: the JSON object form, complete events
    with integer microsecond times, named threads, and slices on one thread that nest
    rather than overlap. Returns the complete events."""
    assert set(doc) == {"traceEvents", "displayTimeUnit"}
    events = doc["traceEvents"]
    assert isinstance(events, list)
    slices = [e for e in events if e["ph"] == "X"]
    meta = [e for e in events if e["ph"] == "M"]
    assert len(slices) + len(meta) == len(events)
    for e in slices:
        assert set(e) <= {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"}
        assert isinstance(e["name"], str) and isinstance(e["cat"], str)
        for key in ("ts", "dur", "pid", "tid"):
            assert isinstance(e[key], int) and e[key] >= 0, e
        assert e["dur"] >= 1
    named = {e["tid"] for e in meta if e["name"] == "thread_name"}
    assert {e["tid"] for e in slices} <= named
    assert [e["name"] for e in meta].count("process_name") == 1
    for tid in named:
        open_ends: list[int] = []
        for e in sorted((e for e in slices if e["tid"] == tid),
                        key=lambda e: (e["ts"], -e["dur"])):  # fmt: skip
            while open_ends and open_ends[-1] <= e["ts"]:
                open_ends.pop()
            if open_ends:  # inside the enclosing slice, whole (1 µs of rounding allowed)
                assert e["ts"] + e["dur"] <= open_ends[-1] + 1, e
            open_ends.append(e["ts"] + e["dur"])
    return slices


def test_a_trace_has_one_slice_per_job_with_its_steps_inside(
    tmp_path: Path, small_dtlto: DtltoLink, dist_lto: str
) -> None:
    root, job_file = captured(tmp_path, small_dtlto)
    cache = f"--cache-dir={tmp_path / 'cache'}"
    slices = check_shape(traced(dist_lto, root, job_file, cache))
    jobs = read_job_file(str(job_file)).jobs
    job_slices = [e for e in slices if e["cat"] == "job"]
    assert sorted(e["name"] for e in job_slices) == sorted(job.module for job in jobs)
    assert {e["args"]["outcome"] for e in job_slices} <= {"compiled", "forked", "served"}
    assert {e["tid"] for e in job_slices} <= {1, 2}
    steps = [e for e in slices if e["cat"] != "job"]
    assert {e["name"] for e in steps} == {"cache lookup", "compile", "cache store"}
    for name in ("cache lookup", "compile", "cache store"):
        assert sum(e["name"] == name for e in steps) == len(jobs)
    for output in root.glob("*.native.o"):
        output.unlink()
    again = check_shape(traced(dist_lto, root, job_file, cache))
    assert {e["args"]["outcome"] for e in again if e["cat"] == "job"} == {"cached"}
    assert {e["name"] for e in again if e["cat"] != "job"} == {"cache lookup"}


def test_a_trace_is_written_when_the_link_fails(
    tmp_path: Path, small_dtlto: DtltoLink, dist_lto: str
) -> None:
    root, job_file = captured(tmp_path, small_dtlto)
    doc = json.loads(job_file.read_text())
    doc["common"]["args"].append("-mno-such-flag")
    job_file.write_text(json.dumps(doc))
    done = subprocess.run([dist_lto, "distribute", "--no-cache", "--trace=t.json", "--quiet",
                           job_file.name], cwd=root, capture_output=True, text=True)  # fmt: skip
    assert done.returncode != 0
    slices = check_shape(json.loads((root / "t.json").read_text()))
    assert "failed" in {e["args"]["outcome"] for e in slices if e["cat"] == "job"}
    assert not [p for p in root.iterdir() if ".tmp-" in p.name]
