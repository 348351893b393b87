"""Each tool SIGKILLed at random points of real work on Lua: no declared output is ever
partial, and a rerun succeeds with the same outputs as an uninterrupted run.

A build system stops an action by killing its process group, so that is what the tests
do (the tool and the clang or LLD it runs die together). Delays are drawn from a seeded
generator over the whole length of an uninterrupted run, measured first; a kill that
lands after the tool has finished simply checks the finished state. After each kill,
every declared output that exists must be byte-identical to the uninterrupted run's
(every output here is deterministic), temporaries may remain only under dot-names,
and the rerun must succeed and reproduce the reference exactly.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from dist_lto.formats.plans import read_archive_plan
from support import workloads
from support.lua_link import PREPARE_ARGV, lua_meta
from support.processes import session, wait_until
from support.tools import Llvm

pytestmark = pytest.mark.slow  # drives real Buck2 or whole real pipelines

DIST_LTO = [sys.executable, "-m", "dist_lto"]
KILLS = {"prepare": 8, "plan": 8, "opt": 6, "distribute": 3, "distribute-from-cache": 4}
LINK = ["-fuse-ld=lld", "-O2"]


@dataclass(frozen=True)
class Step:
    """One tool's run: how to set up its inputs in an empty directory, its command, and
    which of the files it writes are declared outputs."""

    name: str
    setup: Callable[[Path], None]
    argv: list[str]
    declared: Callable[[Path], list[str]]
    """Declared outputs that exist under a directory, relative to it."""
    whole: str = ""
    """A declared directory that must be absent, empty or complete (never half-filled)."""
    before_rerun: Callable[[Path], None] = lambda _: None
    """What a build system does before it runs the action again."""


def files_under(root: Path, top: str) -> list[str]:
    base = root / top
    if base.is_file():
        return [top]
    return sorted(
        str(p.relative_to(root))
        for p in base.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.parts)
    )


def contents(root: Path, paths: list[str]) -> dict[str, bytes]:
    return {p: (root / p).read_bytes() for p in paths}


# ---------------------------------------------------------------------------------
# The Lua pipeline, built once: inputs of each step and an uninterrupted reference


@dataclass(frozen=True)
class Pipeline:
    source: Path
    """Inputs: Lua's objects, its archive, and each step's inputs from the reference."""
    steps: dict[str, Step]


def _copy(src: Path, dst: Path, names: list[str]) -> None:
    for name in names:
        target = dst / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (src / name).is_dir():
            shutil.copytree(src / name, target)
        else:
            shutil.copy2(src / name, target)


KEEP_JOB = (
    "import concurrent.futures, json, shutil, subprocess, sys\n"
    "shutil.copy(sys.argv[-1], 'job.json')\n"
    "jobs = json.load(open(sys.argv[-1]))\n"
    "def run(job):\n"
    "    subprocess.run(jobs['common']['args'] + job['args'], check=True)\n"
    "with concurrent.futures.ThreadPoolExecutor(2) as pool:\n"
    "    list(pool.map(run, jobs['jobs']))\n"
)
"""A distributor that keeps LLD's job file (as job.json) and runs the jobs two at a time."""


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, lua_objects: workloads.Build,
             llvm: Llvm) -> Pipeline:  # fmt: skip
    root = tmp_path_factory.mktemp("kill-pipeline")
    build = lua_objects
    shutil.copytree(build.root / "obj", root / "obj")
    subprocess.run([llvm.ar, "rcs", "liblua.a", *build.library], cwd=root, check=True)
    prepare_argv = PREPARE_ARGV
    subprocess.run([*DIST_LTO, *prepare_argv], cwd=root, check=True)
    (root / "meta.json").write_text(json.dumps(lua_meta(build)))
    plan_argv = ["plan", "meta.json", "--", llvm.clang, *LINK, "-o", "lua"]
    subprocess.run([*DIST_LTO, *plan_argv], cwd=root, check=True)
    (root / "link.args").write_text("\n".join([*LINK, *build.link_flags]) + "\n")
    archive = read_archive_plan(str(root / "out/archive-plans/0.json"))
    (lvm,) = (m for m in archive["members"] if m["name"] == "lvm.o")
    opt_argv = ["opt", "--input", lvm["input"], "--index",
                f"{archive['index_dir']}/{lvm['index_file']}", "--out", "opt/lvm.o",
                "--args", "link.args", "--", llvm.clang]  # fmt: skip
    # LLD's own DTLTO, keeping its job file and the indexes it names (--save-temps).
    dtlto = root / "dtlto"
    shutil.copytree(build.root / "obj", dtlto / "obj")
    (root / "keep-job.py").write_text(KEEP_JOB)
    subprocess.run([llvm.clang, "-flto=thin", *LINK, *build.objects, *build.link_flags, "-o",
                    "lua", f"-fthinlto-distributor={sys.executable}",
                    f"-Xthinlto-distributor={root / 'keep-job.py'}", "-Wl,--save-temps"],
                   cwd=dtlto, check=True, capture_output=True)  # fmt: skip
    job = json.loads((dtlto / "job.json").read_text())
    job_inputs = sorted({p for j in job["jobs"] for p in j["inputs"]})
    job_outputs = sorted(j["outputs"][0] for j in job["jobs"])
    distribute_argv = ["distribute", "--jobs", "2", "--cache-dir", "cache", "job.json"]

    # A warm result cache for the same jobs: the restore path.
    warm = root / "warm"
    warm.mkdir()
    _copy(dtlto, warm, ["job.json", *job_inputs])
    subprocess.run([*DIST_LTO, *distribute_argv], cwd=warm, check=True)

    prep_inputs = ["obj", "liblua.a", "prep", "meta.json"]
    steps = {
        "prepare": Step(
            "prepare", lambda d: _copy(root, d, ["liblua.a"]), prepare_argv,
            lambda d: files_under(d, "prep/lua/manifest.json") + files_under(d, "prep/lua/objects"),
            whole="prep/lua/objects",
            # Its objects directory must be missing or empty: outputs go first, as in Buck2.
            before_rerun=lambda d: shutil.rmtree(d / "prep" / "lua" / "objects", True),
        ),
        "plan": Step(
            "plan", lambda d: _copy(root, d, prep_inputs), plan_argv,
            # The meta's declared outputs (the rest of out/index is the index step's own).
            lambda d: [p for top in ("out/plans", "out/archive-plans", "out/archive-index",
                                     "out/link-plan.json", "out/final-link.args",
                                     *(f"out/index/{o}.thinlto.bc" for o in build.main))
                       if (d / top).exists() for p in files_under(d, top)],
        ),
        "opt": Step(
            "opt", lambda d: (_copy(root, d, ["prep", "out", "link.args"]),
                              (d / "opt").mkdir()),
            opt_argv, lambda d: files_under(d, "opt"),
        ),
        "distribute": Step(
            "distribute", lambda d: _copy(dtlto, d, ["job.json", *job_inputs]), distribute_argv,
            lambda d: [p for p in job_outputs if (d / p).exists()],
        ),
        "distribute-from-cache": Step(
            "distribute-from-cache",
            lambda d: (_copy(dtlto, d, ["job.json", *job_inputs]), _copy(warm, d, ["cache"])),
            distribute_argv, lambda d: [p for p in job_outputs if (d / p).exists()],
        ),
    }  # fmt: skip
    return Pipeline(root, steps)


# ---------------------------------------------------------------------------------
# Killing


def run_to_end(step: Step, work: Path) -> float:
    start = time.monotonic()
    done = subprocess.run([*DIST_LTO, *step.argv], cwd=work, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, f"{step.name}: {done.stderr}"
    return time.monotonic() - start


def kill_at(step: Step, work: Path, delay: float) -> int:
    """Start the step, SIGKILL its whole process group after `delay` s; its exit status."""
    proc = subprocess.Popen([*DIST_LTO, *step.argv], cwd=work, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the leader is not reaped yet: the group is ours
        proc.wait()
    return proc.returncode


@pytest.mark.parametrize("name", list(KILLS))
def test_killed_at_random_points_leaves_no_partial_output_and_reruns(
    name: str, pipeline: Pipeline, tmp_path: Path
) -> None:
    step = pipeline.steps[name]
    reference_dir = tmp_path / "reference"
    reference_dir.mkdir()
    step.setup(reference_dir)
    duration = run_to_end(step, reference_dir)
    declared = step.declared(reference_dir)
    assert declared, f"{name} declared nothing"
    reference = contents(reference_dir, declared)
    rng = random.Random(f"kill:{name}")
    interrupted = 0
    for i in range(KILLS[name]):
        work = tmp_path / f"kill{i}"
        work.mkdir()
        step.setup(work)
        status = kill_at(step, work, rng.uniform(0, duration * 1.2))
        interrupted += status == -signal.SIGKILL
        left = step.declared(work)
        unexpected = set(left) - set(reference)
        assert not unexpected, f"kill {i}: outputs an uninterrupted run has not: {unexpected}"
        partial = [p for p in left if (work / p).read_bytes() != reference[p]]
        assert not partial, f"kill {i} (status {status}): partial outputs {partial[:5]}"
        if step.whole:
            inside = {p for p in left if p.startswith(step.whole + "/")}
            expected = {p for p in reference if p.startswith(step.whole + "/")}
            assert inside in (set(), expected), f"kill {i}: {step.whole} is half-filled"
        step.before_rerun(work)
        run_to_end(step, work)
        assert contents(work, step.declared(work)) == reference, f"kill {i}: rerun differs"
        shutil.rmtree(work)
    assert interrupted > 0, f"no kill landed while {name} ran ({duration:.2f} s)"


# ---------------------------------------------------------------------------------
# Killing only the parent: the linker that started a distributor, the build action's
# process that started opt


def compiling_under(sid: int, parent_name: str) -> int | None:
    """The pid of a `parent_name` process in the session once a clang (or a compile
    server: process/cc1server.py) runs below it."""
    procs = session(sid)
    for pid, (_, name) in procs.items():
        if name.startswith(parent_name) and any(
            pp == pid and n.startswith(("clang", "cc1server-")) for pp, n in procs.values()
        ):
            return pid
    return None


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL],
                         ids=["TERM", "INT", "KILL"])  # fmt: skip
def test_killing_only_the_linker_stops_the_distributor_and_leaves_nothing(
    signum: int, lua_objects: workloads.Build, tmp_path: Path, llvm: Llvm
) -> None:
    """The distributor runs Lua's jobs one at a time (fork server and all); the signal
    goes to ld.lld alone, once two jobs are done and a compiler runs under the
    distributor."""
    work = tmp_path / "link"
    shutil.copytree(lua_objects.root / "obj", work / "obj")
    dist_lto = str(Path(sys.executable).parent / "dist-lto")
    proc = subprocess.Popen(
        [llvm.clang, "-flto=thin", *LINK, *lua_objects.objects, *lua_objects.link_flags, "-o",
         "lua", f"-fthinlto-distributor={dist_lto}", "-Xthinlto-distributor=distribute",
         "-Xthinlto-distributor=--jobs=1", "-Xthinlto-distributor=--no-cache"],
        cwd=work, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        distributor = wait_until(
            "two objects written and a compiler under the distributor",
            lambda: (
                len(list(work.glob("*.native.o"))) >= 2 and compiling_under(proc.pid, "dist-lto")
            ),
        )
        (lld,) = [p for p, (_, name) in session(proc.pid).items() if name == "ld.lld"]
        assert session(proc.pid)[distributor][0] == lld
        os.kill(lld, signum)
        proc.wait(timeout=120)
        wait_until("every process of the link gone", lambda: not session(proc.pid))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        stderr = proc.stderr.read().decode() if proc.stderr else ""
    assert sorted(p.name for p in work.iterdir()) == ["obj"], stderr
    assert f"dist-lto distribute: error: stopped: the process that started it (pid {lld})" \
        " has gone" in stderr  # fmt: skip


def test_opt_stops_its_compiler_when_the_process_that_started_it_dies(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    """A build action's process killed alone (SIGKILL): its `dist-lto opt` child stops
    clang and leaves nothing at or beside its outputs."""
    step = pipeline.steps["opt"]
    work = tmp_path / "action"
    work.mkdir()
    step.setup(work)
    starter = ("import subprocess, sys, time\n"
               "subprocess.Popen(sys.argv[1:])\n"
               "time.sleep(600)\n")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", starter, *DIST_LTO, *step.argv], cwd=work,
                            start_new_session=True)  # fmt: skip
    try:
        opt = wait_until("clang under opt", lambda: compiling_under(proc.pid, "python"))
        assert opt != proc.pid and session(proc.pid)[opt][0] == proc.pid
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        wait_until("opt and clang gone", lambda: not session(proc.pid))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert list((work / "opt").iterdir()) == []
