"""Where a Buck2 build's time goes, from its own record: used by bench/buck2.py.

From the event log and `buck2 log what-ran` of one build (read while its buck-out is
still there):

    cpu        every link action of the build run again, one at a time, with the CPU
               time (user + sys, all threads and children) the kernel gives its
               process tree; each opt action also as the bare clang backend that
               `dist-lto opt --print-command` prints (what the backends alone cost)
    actions    how many actions the build ran; the mean time Buck2 spent on each after
               its command ended (outputs hashed and recorded); and, over the opt
               actions' span, the local slots' time not spent in an opt command, per
               opt action (all of them are ready at once after the plan, so the idle
               time is what each action costs outside its command)
    biggest    when the longest backend's command started, against the end of the
               last compile (in-process LLD starts its biggest backend first)
"""

from __future__ import annotations

import collections
import os
import re
import shlex
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path

import orjson

COMPILE_CATEGORIES = ("cxx_compile", "c_compile")
OPT_CATEGORIES = (
    "thin_lto_opt",
    "thin_lto_opt_object_executable",
    "thin_lto_opt_archive_executable",
)


@dataclass(frozen=True, slots=True)
class Action:
    """One action a build ran: its span in Buck2 and its command's run, in seconds."""

    category: str
    identifier: str
    span_start: float
    span_end: float
    command_start: float | None
    command_secs: float
    argv: tuple[str, ...]
    env: dict[str, str]


def _seconds(stamp: list[int]) -> float:
    return stamp[0] + stamp[1] / 1e9


def _commands(what_ran: str) -> dict[tuple[str, str], tuple[list[str], dict[str, str]]]:
    """Each action's command line and environment, by (category, identifier)."""
    found = {}
    for line in what_ran.splitlines():
        if not line:
            continue
        row = orjson.loads(line)
        if row["reproducer"]["executor"] == "WorkerInit":
            continue
        what = row["identity"].rsplit(" (", 1)[-1].rstrip(")")
        category, _, identifier = what.partition(" ")
        details = row["reproducer"]["details"]
        found[(category, identifier)] = (details.get("command", []), details.get("env", {}))
    return found


def actions(events: str, what_ran: str) -> list[Action]:
    """The actions of one build that ran a command, from `buck2 log show` and `buck2 log
    what-ran --format json` of it. A worker's action gets its fallback command (what it
    runs without the worker)."""
    commands = _commands(what_ran)
    found = []
    for line in events.splitlines():
        if '"SpanEnd"' not in line or '"ActionExecution"' not in line:
            continue
        event = orjson.loads(line)["Event"]
        end = event["data"]["SpanEnd"]
        action = end["data"]["ActionExecution"]
        if not action["commands"]:
            continue
        name = action["name"]
        details = action["commands"][-1]["details"]
        argv, env = commands.get((name["category"], name["identifier"]), ([], {}))
        worker = details["command_kind"]["command"].get("WorkerCommand")
        if worker is not None:
            argv = [*worker["fallback_exe"], *argv]
        span_end = _seconds(event["timestamp"])
        metadata = details["metadata"]
        found.append(
            Action(
                category=name["category"],
                identifier=name["identifier"],
                span_start=span_end - end["duration_us"] / 1e6,
                span_end=span_end,
                command_start=_seconds(metadata["start_time"]) if metadata else None,
                command_secs=(metadata["wall_time_us"] if metadata else 0) / 1e6,
                argv=tuple(argv),
                env=env,
            )
        )
    return found


def cpu_seconds(argv: list[str] | tuple[str, ...], env: dict[str, str], cwd: Path) -> float | None:
    """User + system CPU seconds of `argv` and everything it started, run to completion;
    None when it fails run again (a tool that refuses to write over its own earlier
    outputs, as `prepare` does, which Buck2 deletes before it runs the action)."""
    full_env = {**os.environ, **env}
    scratch = env.get("BUCK_SCRATCH_PATH")
    if scratch:
        os.makedirs(cwd / scratch, exist_ok=True)
    if "TMPDIR" in env:
        os.makedirs(env["TMPDIR"], exist_ok=True)
    proc = subprocess.Popen(
        argv, cwd=cwd, env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode != 0:
        return None
    return usage.ru_utime + usage.ru_stime


def backend_commands(opt: Action, cwd: Path) -> list[list[str]]:
    """The bare clang backends an opt action runs, one per module of its batch (`dist-lto
    opt --print-command`)."""
    argv = list(opt.argv)
    split = argv.index("--")
    printed = subprocess.run(
        [*argv[:split], "--print-command", *argv[split:]],
        cwd=cwd, env={**os.environ, **opt.env}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [shlex.split(line) for line in printed.stdout.splitlines() if line and line[0] != "#"]


@dataclass(frozen=True, slots=True)
class Gap:
    """One build's figures (seconds)."""

    cpu: dict[str, float]
    """CPU of the build's link actions, by category; `backends` is the bare clang
    backends' of its opt actions."""
    unmeasured: tuple[str, ...]
    """Categories with an action that failed when run again (left out of `cpu`)."""
    actions: int
    after_command_mean: float
    """Mean seconds an action spent in Buck2 after its command ended."""
    opt_idle_per_action: float | None
    """Slot-seconds not in an opt command over the opt actions' span, per opt action."""
    biggest: str
    biggest_secs: float
    biggest_start: float | None
    """When the longest backend's command started, after the last compile ended."""
    first_backend_start: float | None


def opt_idle(opts: list[Action], slots: int) -> float | None:
    """Slot-seconds the opt actions' span left without an opt command, per action."""
    ran = [a for a in opts if a.command_start is not None]
    if not ran:
        return None
    start = min(a.command_start for a in ran if a.command_start is not None)
    end = max(a.command_start + a.command_secs for a in ran if a.command_start is not None)
    return (slots * (end - start) - sum(a.command_secs for a in ran)) / len(ran)


def measure(
    events: str, what_ran: str, project: Path, link_categories: tuple[str, ...], slots: int
) -> Gap:
    """The figures of one build whose outputs are still in `project`'s buck-out, run
    with `slots` local slots."""
    ran = actions(events, what_ran)
    cpu: dict[str, float] = collections.defaultdict(float)
    unmeasured = set()
    for action in ran:
        runs = []
        if action.category in link_categories:
            runs.append((action.category, list(action.argv)))
        if action.category == "thin_lto_opt":  # our `dist-lto opt` command line
            runs += [("backends", command) for command in backend_commands(action, project)]
        for category, argv in runs:
            spent = cpu_seconds(argv, action.env, project)
            if spent is None:
                unmeasured.add(category)
            else:
                cpu[category] += spent
    compiles = [a.span_end for a in ran if a.category in COMPILE_CATEGORIES]
    last_compile = max(compiles) if compiles else None
    opts = [a for a in ran if a.category in OPT_CATEGORIES]
    biggest = max(opts, key=lambda a: a.command_secs, default=None)

    def after_compiles(start: float | None) -> float | None:
        if start is None or last_compile is None:
            return None
        return start - last_compile

    first = min((a.command_start for a in opts if a.command_start), default=None)
    after = [
        a.span_end - a.command_start - a.command_secs for a in ran if a.command_start is not None
    ]
    return Gap(
        cpu={k: v for k, v in cpu.items() if k not in unmeasured},
        unmeasured=tuple(sorted(unmeasured)),
        actions=len(ran),
        after_command_mean=statistics.mean(after) if after else 0.0,
        opt_idle_per_action=opt_idle(opts, slots),
        biggest=biggest.identifier if biggest else "",
        biggest_secs=biggest.command_secs if biggest else 0.0,
        biggest_start=after_compiles(biggest.command_start) if biggest else None,
        first_backend_start=after_compiles(first),
    )


WORKER_LOGS = Path("/tmp/buck2_worker")
"""Where Buck2 keeps each worker's stderr: BUILD_ID-N/stderr."""


@dataclass(frozen=True)
class WorkerCpu:
    """CPU seconds of a build's opt workers, from their logs (summed over them)."""

    own: float
    """The workers themselves, all threads."""
    start: float
    """Of `own`, until each was ready to serve: the interpreter, imports, gRPC."""
    compilers: float
    """Their compile servers and forked compilers."""
    planner: float
    """Their planners, with the plans and the plans' index steps."""
    links: float = 0.0
    """The drivers asked for their linker's line and the final links they ran."""
    ahead: int = 0
    """Backends whose requests took an object compiled ahead of them (worker/ahead.py)."""


_STARTED = re.compile(r"serving opt requests on .* \(pid \d+, ([0-9.]+) s of CPU to start\)")


def _figure(words: list[str], name: str) -> float:
    return float(words[words.index(name) + 1]) if name in words else 0.0


def worker_cpu(build_id: str, wait: float = 0.0) -> WorkerCpu | None:
    """The build's opt workers' CPU from their logs: the `cpu:` line each ends with once
    Buck2 has stopped it, and what its first line says it took to start; None without
    a `cpu:` line. Waits up to `wait` seconds for a worker that has not written it yet
    (it notices its daemon's end within a second)."""
    import time

    deadline = time.monotonic() + wait
    while True:
        logs = sorted(WORKER_LOGS.glob(f"{build_id}-*/stderr"))
        texts = [log.read_text(errors="replace") for log in logs]
        if all("cpu: " in text for text in texts) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    found = None
    for text in texts:
        start = 0.0
        for line in text.splitlines():
            started = _STARTED.search(line)
            if started:
                start = float(started.group(1))
            words = line.split()
            if "cpu:" in words and "compilers" in words:
                before = found or WorkerCpu(0.0, 0.0, 0.0, 0.0)
                found = WorkerCpu(
                    before.own + _figure(words, "worker"),
                    before.start + start,
                    before.compilers + _figure(words, "compilers"),
                    before.planner + _figure(words, "planner"),
                    before.links + _figure(words, "links"),
                    before.ahead + text.count(": compiled ahead of its request"),
                )
    return found


def describe(
    gap: Gap, baseline: Gap | None, worker: WorkerCpu | None = None, queued: bool = False
) -> list[str]:
    """Lines for one build against its in-process twin's; `worker`: its opt worker's
    CPU, its compilers' and its planner's (`worker_cpu`). With `queued` (opt actions
    that waited in the worker, whose commands' times in Buck2 hold the wait), none of
    what those times say: idle slots, when the longest backend started."""
    total = sum(v for k, v in gap.cpu.items() if k != "backends")
    parts = ", ".join(f"{k} {v:.2f}" for k, v in sorted(gap.cpu.items()))
    missing = f" (not measured: {', '.join(gap.unmeasured)})" if gap.unmeasured else ""
    lines = [f"cpu s of the link actions: {parts}; total {total:.2f}{missing}"]
    if baseline is not None:
        base = sum(v for k, v in baseline.cpu.items() if k != "backends")
        if base:
            lines.append(f"link cpu / in-process link cpu: {total / base:.3f}")
            if "backends" in gap.cpu:
                lines.append(
                    f"backends cpu / in-process link cpu: {gap.cpu['backends'] / base:.3f}"
                )
    if worker is not None:
        lines.append(f"opt worker cpu s: itself {worker.own:.2f} ({worker.start:.2f} to start),"
                     f" its compilers {worker.compilers:.2f}, its planner and plans"
                     f" {worker.planner:.2f}, its links {worker.links:.2f}")  # fmt: skip
        if worker.ahead:
            lines.append(f"opt worker: {worker.ahead} backends compiled ahead of their requests"
                         " (Buck2's times for those hold the wait for them)")  # fmt: skip
        base = sum(baseline.cpu.values()) if baseline is not None else 0.0
        if base:
            lines.append(
                f"worker's compilers cpu / in-process link cpu: {worker.compilers / base:.3f}"
            )
    idle = gap.opt_idle_per_action
    lines.append(
        f"actions {gap.actions}, {gap.after_command_mean * 1e3:.1f} ms each after its command"
        + ("" if queued else "; slots idle over the opt span: "
           + ("?" if idle is None else f"{idle * 1e3:.1f} ms per opt action"))
    )  # fmt: skip
    if gap.biggest and not queued:

        def at(t: float | None) -> str:
            return "?" if t is None else f"{t:+.2f} s"

        lines.append(
            f"longest backend {gap.biggest} ({gap.biggest_secs:.2f} s) started at"
            f" {at(gap.biggest_start)} from the last compile's end; the first backend at"
            f" {at(gap.first_backend_start)}"
        )
    return lines
