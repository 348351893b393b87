"""Jobs forked from a clang that started once (`process/forkserver.py`, `process/forkserver.c`).

Everything here runs Debian's real clang 22: the fork server only serves clang, and what
it must pin is that a forked clang is indistinguishable from a started one (same
objects, same failures, same stderr) and that nothing it starts outlives a stopped link.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from dist_lto.distribute.compilers import WorkerCompiler
from dist_lto.formats.jobfile import read_job_file
from dist_lto.process import forkserver
from support.links import DtltoLink
from support.tools import Llvm
from test_distribute_failures import captured, distribute, leftovers


@pytest.fixture(scope="module")
def dist_lto(dist_lto_cmd: list[str]) -> str:
    (exe,) = dist_lto_cmd
    return exe


@pytest.fixture(scope="module")
def preload(tmp_path_factory: pytest.TempPathFactory, llvm: Llvm) -> str:
    return forkserver.library(llvm.clang, str(tmp_path_factory.mktemp("tools")))


def objects(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.glob("*.native.o"))}


def test_forked_jobs_write_the_objects_a_started_clang_writes(
    tmp_path: Path, small_dtlto: DtltoLink, dist_lto: str
) -> None:
    forked_root, job_file = captured(tmp_path / "forked", small_dtlto)
    forked = distribute(dist_lto, forked_root, job_file, "--no-cache", "--no-compile-server",
                        "--verbose")  # fmt: skip
    assert forked.returncode == 0, forked.stderr
    job_lines = [line for line in forked.stderr.splitlines() if "] compiled " in line]
    assert len(job_lines) == 4 and all(line.endswith(" s, forked)") for line in job_lines)

    started_root, job_file = captured(tmp_path / "started", small_dtlto)
    started = distribute(dist_lto, started_root, job_file, "--no-cache", "--no-fork-server",
                         "--verbose")  # fmt: skip
    assert started.returncode == 0, started.stderr
    assert "forked" not in started.stderr
    assert objects(forked_root) == objects(started_root)
    assert len(objects(forked_root)) == 4


def test_served_jobs_write_the_objects_a_started_clang_writes(
    tmp_path: Path, small_dtlto: DtltoLink, dist_lto: str
) -> None:
    served_root, job_file = captured(tmp_path / "served", small_dtlto)
    served = distribute(dist_lto, served_root, job_file, "--no-cache", "--verbose")
    assert served.returncode == 0, served.stderr
    job_lines = [line for line in served.stderr.splitlines() if "] compiled " in line]
    assert len(job_lines) == 4 and all(line.endswith(" s, served)") for line in job_lines)
    assert ", compile server " in served.stderr

    started_root, job_file = captured(tmp_path / "started", small_dtlto)
    started = distribute(dist_lto, started_root, job_file, "--no-cache", "--no-fork-server",
                         "--verbose")  # fmt: skip
    assert started.returncode == 0, started.stderr
    assert "served" not in started.stderr and "compile server" not in started.stderr
    assert objects(served_root) == objects(started_root)
    assert len(objects(served_root)) == 4


def captured_with(tmp_path: Path, link: DtltoLink, *extra: str) -> tuple[Path, Path]:
    """A private copy of the link whose job file adds `extra` to `common.args`."""
    root, job_file = captured(tmp_path, link)
    doc = json.loads(job_file.read_text())
    doc["common"]["args"] += list(extra)
    job_file.write_text(json.dumps(doc))
    return root, job_file


def test_a_forked_compiler_that_fails_fails_its_job_with_its_status_and_stderr(
    tmp_path: Path, small_dtlto: DtltoLink, dist_lto: str
) -> None:
    root, job_file = captured_with(tmp_path, small_dtlto, "-mllvm", "-no-such-option")
    done = distribute(dist_lto, root, job_file, "--no-cache", "--jobs=1")
    assert done.returncode == 1
    first, *rest = done.stderr.splitlines()
    assert first.startswith("dist-lto distribute: error: job ")
    assert first.endswith(" exited with status 1")
    assert any("Unknown command line argument '-no-such-option'" in line for line in rest)
    assert leftovers(root) == [] and objects(root) == {}


def test_a_forked_compilers_warnings_reach_the_user(
    tmp_path: Path, small_dtlto: DtltoLink, dist_lto: str
) -> None:
    root, job_file = captured_with(
        tmp_path, small_dtlto, "-Wunused-command-line-argument", "-Wl,--unused-here"
    )
    done = distribute(dist_lto, root, job_file, "--no-cache", "--verbose")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("warning: -Wl,--unused-here: 'linker' input unused") == 4
    assert done.stderr.count(" s, forked)") == 4


def processes_in(root: Path) -> dict[int, int]:
    """pid -> parent pid of every process whose working directory is `root`."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/cwd") != str(root):
                continue
            with open(f"/proc/{entry}/stat") as f:
                found[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue  # gone meanwhile, or not ours to look at
    return found


def guards(tool: int) -> list[int]:
    """The guard of `tool` (`process/guard.py`): its child that is a Python, not clang."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    text = f.read()
            except OSError:
                continue
            name = text[text.index("(") + 1 : text.rindex(")")]
            if int(text.rsplit(")", 1)[1].split()[1]) == tool and not name.startswith("clang"):
                found.append(int(entry))
    return found


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_stops_forked_compilers_and_their_servers(
    signum: int, tmp_path: Path, small_dtlto: DtltoLink, dist_lto: str
) -> None:
    root, job_file = captured(tmp_path, small_dtlto)
    # Every clang blocks reading a sample profile that is a FIFO nobody writes. It is
    # left out of common.inputs: the distributor refuses a FIFO among its inputs.
    os.mkfifo(root / "blocks.prof")
    doc = json.loads(job_file.read_text())
    doc["common"]["args"].append("-fprofile-sample-use=blocks.prof")
    job_file.write_text(json.dumps(doc))
    proc = subprocess.Popen([dist_lto, "distribute", "--no-cache", "--jobs=2", "--quiet",
                             job_file.name],
                            cwd=root, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        family = processes_in(root)
        servers = [pid for pid, parent in family.items()
                   if parent == proc.pid and pid not in guards(proc.pid)]  # fmt: skip
        jobs = [pid for pid, parent in family.items() if parent in servers]
        if len(jobs) == 2:
            break
        time.sleep(0.02)
    assert len(servers) == 2 and len(jobs) == 2, family
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum
    assert stderr == f"dist-lto distribute: error: stopped by signal {signum}\n"
    assert processes_in(root) == {}
    assert leftovers(root) == [] and objects(root) == {}


def test_a_worker_whose_server_dies_runs_its_next_jobs_directly(
    tmp_path: Path, small_dtlto: DtltoLink, llvm: Llvm, preload: str
) -> None:
    root, job_file = captured(tmp_path, small_dtlto)
    files = read_job_file(str(job_file))
    first, second = files.jobs[:2]
    troubles: list[str] = []
    compiler = WorkerCompiler(llvm.clang, preload, troubles.append)
    os.chdir(root)
    try:
        status, _ = compiler.run([*files.args, *first.args], None)
        assert (status, compiler.forked) == (0, True)
        assert compiler.server is not None
        os.kill(compiler.server.pid, signal.SIGKILL)
        status, _ = compiler.run([*files.args, *second.args], None)
        assert (status, compiler.forked) == (0, False)
        assert troubles == [f"{llvm.clang}: fork server ended before the job began"]
    finally:
        compiler.close()
        os.chdir(tmp_path)
    assert (root / first.output).stat().st_size > 0
    assert (root / second.output).stat().st_size > 0


def test_a_server_reports_a_job_it_could_not_begin_as_lost(
    tmp_path: Path, llvm: Llvm, preload: str
) -> None:
    server = forkserver.ForkServer(llvm.clang, preload)
    os.kill(server.pid, signal.SIGKILL)
    with pytest.raises(forkserver.ForkServerLost):
        server.run([llvm.clang, "--version"])
    server.close()


def test_a_forked_job_sees_the_environment_a_started_one_sees(
    tmp_path: Path, llvm: Llvm, preload: str
) -> None:
    """No LD_PRELOAD or server descriptor reaches a job, nor what the job starts."""
    seen = tmp_path / "seen.txt"
    linker = tmp_path / "linker.c"
    linker.write_text(
        "#include <stdio.h>\nextern char **environ;\n"
        f'int main(void) {{ FILE *f = fopen("{seen}", "w");\n'
        '  for (char **e = environ; *e; e++) fprintf(f, "%s\\n", *e); return 0; }\n'
    )
    subprocess.run([llvm.clang, "-o", tmp_path / "linker", linker], check=True)
    server = forkserver.ForkServer(llvm.clang, preload)
    try:
        # clang starts our "linker", which writes down the environment it was given.
        status, stderr = server.run([llvm.clang, f"--ld-path={tmp_path / 'linker'}",
                                     "-o", str(tmp_path / "a.out"), str(linker)])  # fmt: skip
    finally:
        server.close()
    assert status == 0, stderr
    names = {line.split("=", 1)[0] for line in seen.read_text().splitlines()}
    assert names == set(os.environ)


def test_a_server_out_of_step_with_its_client_serves_no_more_jobs(llvm: Llvm, preload: str) -> None:
    """A failure between the job's pid and its status leaves a record unread: the next
    job would read it as its own, so the server is closed instead."""
    server = forkserver.ForkServer(llvm.clang, preload)

    def fail(_pid: int) -> None:
        raise RuntimeError("the caller failed while the job ran")

    with pytest.raises(RuntimeError):
        server.run([llvm.clang, "-###", "-c", "-x", "c", os.devnull], fail)
    with pytest.raises(forkserver.ForkServerLost):
        server.run([llvm.clang, "-###", "-c", "-x", "c", os.devnull])
    assert server.pid == 0  # reaped
    server.close()


@pytest.mark.parametrize(
    ("args", "reason"),
    [(["/usr/bin/ccache", "clang", "-c"], "/usr/bin/ccache is not clang"),
     (["clang", "/opt/real/clang", "-c"], "clang is a wrapper around /opt/real/clang")],
)  # fmt: skip
def test_only_clang_run_directly_is_fork_served(args: list[str], reason: str) -> None:
    assert forkserver.unusable_reason(args) == reason


def test_a_script_named_clang_is_not_fork_served(tmp_path: Path) -> None:
    script = tmp_path / "clang"
    script.write_text('#!/bin/sh\nexec /usr/lib/llvm-22/bin/clang "$@"\n')
    script.chmod(0o755)
    assert forkserver.unusable_reason([str(script), "-c"]) == f"{script} is not an ELF program"


def test_a_users_ld_preload_turns_the_fork_server_off(
    monkeypatch: pytest.MonkeyPatch, llvm: Llvm
) -> None:
    assert forkserver.unusable_reason([llvm.clang, "-c"]) is None
    monkeypatch.setenv("LD_PRELOAD", "libfaketime.so.1")
    assert forkserver.unusable_reason([llvm.clang, "-c"]) == "LD_PRELOAD is set"
