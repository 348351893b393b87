"""`dist-lto distribute --remote` against a real BuildBarn engine on loopback.

The engine (tests/support/buildbarn.py, built by .ci/setup) is started here, once per
session, with two workers; a test that cannot start it fails. What ran where is read
from the engine's side: each bb_worker logs the actions it starts and the
ExecuteResponse it sends back (with the worker id in the execution metadata).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from dist_lto.distribute.remote.cas import CorruptBlob, digest_of
from dist_lto.distribute.remote.connection import RemoteFailed
from dist_lto.distribute.remote.executor import RemoteExecutor
from dist_lto.distribute.remote.protos import re_pb2
from dist_lto.distribute.remote.settings import settings_from_options
from dist_lto.formats.jobfile import read_job_file
from support import buildbarn, workloads
from support.links import DtltoLink
from support.tools import Llvm

DIST_LTO = str(Path(sys.executable).parent / "dist-lto")


@dataclass(frozen=True)
class WorkerRecord:
    """What the workers' logs say about one instance: started action digests per worker,
    and per output path the worker whose ExecuteResponse returned it."""

    started: dict[str, list[str]]
    outputs: dict[str, str]


_ACTION = re.compile(
    r" Action: (?P<instance>\S*?)/?blobs/sha256/action/(?P<digest>[0-9a-f]{64}-\d+)/"
)
_RESPONSE = re.compile(r" ExecuteResponse: (?P<json>\{.*\})$")


def worker_record(engine: buildbarn.Engine, instance: str) -> WorkerRecord:
    started: dict[str, list[str]] = {}
    outputs: dict[str, str] = {}
    for name in engine.workers:
        current = None
        for line in engine.log(f"worker-{name}").read_text().splitlines():
            if m := _ACTION.search(line):
                current = m["instance"] == instance
                if current:
                    started.setdefault(name, []).append(m["digest"])
            elif (m := _RESPONSE.search(line)) and current:
                response = json.loads(m["json"])
                worker = json.loads(response["result"]["executionMetadata"]["worker"])
                for entry in response["result"].get("outputFiles", []):
                    outputs[entry["path"]] = worker["worker"]
    return WorkerRecord(started, outputs)


@dataclass
class RemoteLink:
    build: workloads.Build
    proc: subprocess.CompletedProcess[str]
    outputs: list[str]
    """The native objects the jobs wrote, as LLD's job file names them."""

    def lines(self, phrase: str) -> list[str]:
        return [line for line in self.proc.stderr.splitlines() if phrase in line]


def link_remote(
    engine: buildbarn.Engine,
    build: workloads.Build,
    cache: Path,
    instance: str,
    extra: list[str] = (),
    *,
    flag: str = "--remote",
    address: str = "",
    env: dict[str, str] | None = None,
) -> RemoteLink:
    """Link `build` through LLD's DTLTO with `dist-lto distribute --remote --verbose`
    (or `flag`, `--remote-cache` say, and another service's `address`; no `flag`: the
    service and instance come from `env`, as DIST_LTO_* variables)."""
    out = build.name
    (build.root / out).unlink(missing_ok=True)
    service = [f"{flag}={address or engine.address}", f"--instance={instance}"] if flag else []
    args = ["distribute", *service, f"--cache-dir={cache}", "--verbose", *extra]
    proc = subprocess.run(
        [workloads.CLANG, "-flto=thin", "-fuse-ld=lld", "-O2", *build.objects, *build.native,
         "-o", out, *build.link_flags, f"-fthinlto-distributor={DIST_LTO}",
         *(f"-Xthinlto-distributor={a}" for a in args), "-Wl,--save-temps"],
        cwd=build.root, capture_output=True, text=True, env=env,
    )  # fmt: skip
    outputs = []
    for job_file in sorted(build.root.glob(f"{out}.*.dist-file.json")):
        jobs = json.loads(job_file.read_text())["jobs"]
        outputs = [job["outputs"][0] for job in jobs]
    return RemoteLink(build, proc, outputs)


def fresh_instance() -> str:
    """An instance name of its own: its own action cache namespace on the engine."""
    return f"t-{uuid.uuid4().hex[:12]}"


def leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob(".*.tmp-*"))


@pytest.mark.slow
@pytest.mark.parametrize("program", ["lua", "zstd"])
def test_every_backend_runs_on_the_engines_workers_and_the_binary_works(
    engine: buildbarn.Engine, tmp_path: Path, program: str, llvm: Llvm
) -> None:
    build = workloads.build(program, tmp_path / "b")
    instance = fresh_instance()
    link = link_remote(engine, build, tmp_path / "cache", instance)
    assert link.proc.returncode == 0, link.proc.stderr
    workloads.check_binary(program, build.root / program)
    record = worker_record(engine, instance)
    # The engine's side: every job's object came back from a worker's ExecuteResponse.
    assert link.outputs and set(link.outputs) <= set(record.outputs)
    assert set(record.outputs[o] for o in link.outputs) == {"w1", "w2"}
    assert sum(len(d) for d in record.started.values()) == len(link.outputs)
    # Our side agrees, job by job, and nothing ran here.
    executed = link.lines("executed remotely on")
    assert len(executed) == len(link.outputs)
    for output in link.outputs:
        (line,) = [x for x in executed if x.split(" -> ")[1].startswith(output + " (")]
        assert f'"worker":"{record.outputs[output]}"' in line
    assert leftovers(build.root) == []


@pytest.mark.slow
def test_a_second_link_with_a_fresh_cache_gets_every_backend_from_the_remote_action_cache(
    engine: buildbarn.Engine, tmp_path: Path
) -> None:
    instance = fresh_instance()
    first = link_remote(engine, workloads.build("lua", tmp_path / "one"), tmp_path / "c1", instance)
    assert first.proc.returncode == 0, first.proc.stderr
    started = worker_record(engine, instance).started
    # Another directory, another cache, another LLD process (so other file names): as
    # a second machine would link the same program.
    second = link_remote(
        engine, workloads.build("lua", tmp_path / "two"), tmp_path / "c2", instance
    )
    assert second.proc.returncode == 0, second.proc.stderr
    workloads.check_binary("lua", second.build.root / "lua")
    assert len(second.lines("from the remote action cache")) == len(second.outputs) == 33
    assert second.lines("executed remotely") == []
    assert worker_record(engine, instance).started == started  # no worker ran anything
    first_objects = sorted(first.build.root.glob("*.native.o"))
    second_objects = sorted(second.build.root.glob("*.native.o"))
    assert [p.read_bytes() for p in first_objects] == [p.read_bytes() for p in second_objects]


@pytest.mark.slow
def test_a_worker_killed_mid_link_is_retried_to_success_and_nothing_partial_is_left(
    engine: buildbarn.Engine, tmp_path: Path
) -> None:
    """A supervisor restarts the killed worker at once (without one, BuildBarn's
    scheduler gives the action to another worker after its one-minute timeout)."""
    build = workloads.build("lua", tmp_path / "b")
    instance = fresh_instance()
    log = engine.log("worker-w1")
    seen = log.read_text().count(f"Action: {instance}/")
    killed: list[str] = []

    def kill_when_w1_runs() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            text = log.read_text()
            found = _ACTION.findall(text)
            mine = [d for i, d in found if i == instance]
            if len(mine) > seen:
                engine.kill_worker("w1")
                killed.append(mine[-1])
                engine.start_worker("w1")
                return
            time.sleep(0.01)

    killer = threading.Thread(target=kill_when_w1_runs)
    killer.start()
    link = link_remote(engine, build, tmp_path / "cache", instance)
    killer.join()
    assert killed, "w1 never started an action"
    assert link.proc.returncode == 0, link.proc.stderr
    workloads.check_binary("lua", build.root / "lua")
    record = worker_record(engine, instance)
    # The killed action was started again (on w1 after its restart, or on w2).
    assert sum(d.count(killed[0]) for d in record.started.values()) >= 2
    assert set(link.outputs) <= set(record.outputs)
    assert leftovers(build.root) == []


def test_an_unreachable_engine_fails_in_one_line_and_writes_nothing(
    small_dtlto, tmp_path: Path
) -> None:
    root = tmp_path / "link"
    shutil.copytree(small_dtlto.root, root)
    job_file = root / small_dtlto.job_file
    outputs = [job["outputs"][0] for job in json.loads(job_file.read_text())["jobs"]]
    for output in outputs:
        (root / output).unlink(missing_ok=True)
    (port,) = buildbarn.free_ports(1)
    proc = subprocess.run(
        [DIST_LTO, "distribute", f"--remote=grpc://127.0.0.1:{port}", "--no-cache", "--quiet",
         small_dtlto.job_file],
        cwd=root, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"dist-lto distribute: error: grpc://127.0.0.1:{port}: ")
    assert "cannot reach the remote service" in line and "after 4 attempts" in line
    assert [o for o in outputs if (root / o).exists()] == []
    assert leftovers(root) == []


def test_a_compiler_failing_on_a_worker_passes_its_status_and_names_the_worker(
    engine: buildbarn.Engine, small_dtlto, tmp_path: Path
) -> None:
    root = tmp_path / "link"
    shutil.copytree(small_dtlto.root, root)
    jobs = json.loads((root / small_dtlto.job_file).read_text())["jobs"]
    victim = jobs[0]["inputs"][0]
    data = (root / victim).read_bytes()
    (root / victim).write_bytes(data[: len(data) // 2])  # the index still names it
    for job in jobs:
        (root / job["outputs"][0]).unlink(missing_ok=True)
    proc = subprocess.run(
        [DIST_LTO, "distribute", f"--remote={engine.address}",
         f"--instance={fresh_instance()}", "--no-cache", small_dtlto.job_file],
        cwd=root, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith("dist-lto distribute: error: job ")
    assert f"({victim} -> " in first and "clang exited with status 1 on {" in first
    assert '"worker":"w' in first
    assert "command: " in proc.stderr
    assert not (root / jobs[0]["outputs"][0]).exists()
    assert leftovers(root) == []


def test_a_platform_no_worker_offers_is_a_clear_error(
    engine: buildbarn.Engine, small_dtlto, tmp_path: Path
) -> None:
    root = tmp_path / "link"
    shutil.copytree(small_dtlto.root, root)
    proc = subprocess.run(
        [DIST_LTO, "distribute", f"--remote={engine.address}", "--no-cache",
         f"--instance={fresh_instance()}", "--platform=OSFamily=windows",
         small_dtlto.job_file],
        cwd=root, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 1
    first = proc.stderr.splitlines()[0]
    assert first.startswith("dist-lto distribute: error: job ")
    assert "No workers exist" in first, first
    # bb_scheduler answers UNAVAILABLE while it is young (workers may still register:
    # retried, then reported with the attempts) and FAILED_PRECONDITION once no worker
    # can appear any more (reported at once); which one depends on the engine's age.
    assert ("UNAVAILABLE" in first and "after 4 attempts" in first) or (
        "FAILED_PRECONDITION" in first and "attempts" not in first
    ), first
    assert "cannot reach" not in first


def test_inputs_the_engine_lacks_at_execute_time_are_uploaded_again(
    engine: buildbarn.Engine, small_dtlto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CAS can lose blobs between our upload and Execute (eviction, a restarted
    storage): BuildBarn then answers FAILED_PRECONDITION listing them."""
    from dist_lto.distribute.remote.cas import FileDigests, build_tree, key
    from dist_lto.distribute.remote.executor import EXECUTED, RemoteExecutor
    from dist_lto.distribute.remote.settings import settings_from_options
    from dist_lto.formats.jobfile import JobFile, read_job_file

    root = tmp_path / "link"
    shutil.copytree(small_dtlto.root, root)
    monkeypatch.chdir(root)
    (root / "unique.txt").write_text(uuid.uuid4().hex)  # a blob the engine cannot have
    files = read_job_file(small_dtlto.job_file)
    files = JobFile(files.path, files.linker_output, files.args, ["unique.txt"], files.jobs)
    job = files.jobs[0]
    Path(job.output).unlink(missing_ok=True)
    executor = RemoteExecutor(files, settings_from_options(engine.address, None, [], None))
    tree = build_tree(["unique.txt", *job.inputs], FileDigests())
    executor.store.present.update([*tree.files, *tree.blobs])  # believed present: not sent
    forced = []
    upload = executor.store.upload
    monkeypatch.setattr(
        executor.store, "upload",
        lambda *a, **kw: (forced.append(kw.get("force", False)), upload(*a, **kw))[1],
    )  # fmt: skip
    try:
        outcome = executor.run(job)
    finally:
        executor.close()
    assert outcome.how == EXECUTED
    assert forced == [False, True]  # the first upload sent nothing; Execute asked again
    assert key(tree.root) and Path(job.output).stat().st_size > 0
    assert leftovers(root) == []


class CorruptingCas:
    """The engine's CAS, with one byte of every blob read back flipped for the first
    `times` BatchReadBlobs calls: a storage or transport fault no engine makes on demand."""

    def __init__(self, cas: object, times: int) -> None:
        self.cas = cas
        self.times = times
        self.corrupted = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.cas, name)

    def BatchReadBlobs(self, *args: object, **kwargs: object) -> object:
        response = self.cas.BatchReadBlobs(*args, **kwargs)
        if self.corrupted < self.times:
            self.corrupted += 1
            for item in response.responses:
                if item.data:
                    item.data = bytes([item.data[0] ^ 0xFF]) + item.data[1:]
        return response


@pytest.mark.slow
@pytest.mark.parametrize("faults", ["once", "always"])
def test_a_downloaded_object_that_fails_its_digest_is_never_written(
    engine: buildbarn.Engine, tmp_path: Path, small_dtlto: DtltoLink,
    monkeypatch: pytest.MonkeyPatch, faults: str,
) -> None:  # fmt: skip
    """A cached remote result whose object comes back damaged is run again (once); an
    engine that damages every download fails the job, and nothing is written."""
    root = small_dtlto.clone(tmp_path / "link")
    monkeypatch.chdir(root)
    files = read_job_file(small_dtlto.job_file)
    settings = settings_from_options(engine.address, fresh_instance(), [], None)
    (job,) = [j for j in files.jobs if j.module == "main.o"]
    first = RemoteExecutor(files, settings)
    assert first.run(job).how == "executed remotely"
    first.close()
    good = Path(job.output).read_bytes()
    Path(job.output).unlink()
    executor = RemoteExecutor(files, settings)
    cas = CorruptingCas(executor.connection.cas, 1 if faults == "once" else 1000)
    executor.connection.cas = cas  # type: ignore[assignment]
    try:
        if faults == "once":
            outcome = executor.run(job)
            assert cas.corrupted == 1
            ((what, why),) = outcome.damage
            assert what == f"remote result of {job.output}"
            assert why.endswith(f"came back corrupted ({len(good)} bytes with another digest)")
            assert Path(job.output).read_bytes() == good
        else:
            with pytest.raises(RemoteFailed, match="came back corrupted"):
                executor.run(job)
            assert cas.corrupted == 3  # two cached results, then a fresh execution's
            assert not Path(job.output).exists()
    finally:
        executor.close()
    assert leftovers(root) == []


def test_inlined_output_contents_are_checked_against_their_digest(
    tmp_path: Path, small_dtlto: DtltoLink, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "link"
    shutil.copytree(small_dtlto.root, root)
    monkeypatch.chdir(root)
    files = read_job_file(small_dtlto.job_file)
    job = files.jobs[0]
    good = Path(job.output).read_bytes()
    Path(job.output).unlink()
    executor = RemoteExecutor.__new__(RemoteExecutor)  # no engine: only `finish` runs
    executor.files = files
    executor.settings = settings_from_options("grpc://127.0.0.1:1", None, [], None)
    result = re_pb2.ActionResult(exit_code=0)
    damaged = bytes([good[0] ^ 0xFF]) + good[1:]
    result.output_files.add(path=job.output, digest=digest_of(good), contents=damaged)
    with pytest.raises(CorruptBlob, match="came back corrupted"):
        executor.finish(job, result, {job.output: job.output}, "a")
    assert not Path(job.output).exists() and leftovers(root) == []
    result.output_files[0].contents = good
    executor.finish(job, result, {job.output: job.output}, "a")
    assert Path(job.output).read_bytes() == good


@pytest.mark.slow
def test_an_action_over_its_timeout_fails_at_once_naming_the_timeout(
    engine: buildbarn.Engine, tmp_path: Path
) -> None:
    build = workloads.build("lua", tmp_path / "b")
    link = link_remote(engine, build, tmp_path / "cache", fresh_instance(),
                       ["--remote-action-timeout=50ms"])  # fmt: skip
    assert link.proc.returncode != 0
    (line,) = link.lines("error: job ")
    assert (
        "ran longer than its timeout (0.05 s, --remote-action-timeout): DEADLINE_EXCEEDED" in line
    )
    assert "attempts" not in line  # the worker ran it that long: no other try
    assert leftovers(build.root) == []
