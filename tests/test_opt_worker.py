"""The opt worker without Buck2: its wire format against the protobuf library's, and
its requests against `dist-lto opt` on a small real program (objects, error lines,
exit statuses). tests/test_buck2_worker.py runs it under real Buck2."""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from dist_lto.worker import protocol
from dist_lto.worker.client import WorkerClient
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from hypothesis import given
from hypothesis import strategies as st
from support.links import SMALL_PROGRAM
from support.opt_command import OPT
from support.tools import Llvm

# ---------------------------------------------------------------------------------
# The wire format, held to protobuf's own encoding of Buck2's messages


def _buck2_messages() -> dict[str, type]:
    """Message classes for Buck2's worker.proto, built from a descriptor written here."""
    proto = descriptor_pb2.FileDescriptorProto(name="worker_test.proto", package="worker",
                                               syntax="proto3")  # fmt: skip
    f = descriptor_pb2.FieldDescriptorProto
    command = proto.message_type.add(name="ExecuteCommand")
    entry = command.nested_type.add(name="EnvironmentEntry")
    entry.field.add(name="key", number=1, type=f.TYPE_BYTES, label=f.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=f.TYPE_BYTES, label=f.LABEL_OPTIONAL)
    command.field.add(name="argv", number=1, type=f.TYPE_BYTES, label=f.LABEL_REPEATED)
    command.field.add(name="env", number=2, type=f.TYPE_MESSAGE, label=f.LABEL_REPEATED,
                      type_name=".worker.ExecuteCommand.EnvironmentEntry")  # fmt: skip
    command.field.add(name="timeout_s", number=3, type=f.TYPE_UINT64, label=f.LABEL_OPTIONAL,
                      proto3_optional=True, oneof_index=0)  # fmt: skip
    command.oneof_decl.add(name="_timeout_s")
    response = proto.message_type.add(name="ExecuteResponse")
    response.field.add(name="exit_code", number=1, type=f.TYPE_INT32, label=f.LABEL_OPTIONAL)
    response.field.add(name="stderr", number=2, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    response.field.add(name="timed_out_after_s", number=3, type=f.TYPE_UINT64,
                       label=f.LABEL_OPTIONAL, proto3_optional=True, oneof_index=0)  # fmt: skip
    response.oneof_decl.add(name="_timed_out_after_s")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"worker.{name}"))
        for name in ("ExecuteCommand", "ExecuteResponse")
    }


MESSAGES = _buck2_messages()
u64 = st.integers(min_value=0, max_value=2**64 - 1)


@given(
    argv=st.lists(st.binary(max_size=40), max_size=6),
    env=st.lists(st.tuples(st.binary(max_size=10), st.binary(max_size=10)), max_size=4),
    timeout=st.none() | u64,
)
def test_commands_decode_as_protobuf_encodes_them(argv, env, timeout) -> None:  # type: ignore[no-untyped-def]
    message = MESSAGES["ExecuteCommand"](argv=argv)
    for key, value in env:
        message.env.add(key=key, value=value)
    if timeout is not None:
        message.timeout_s = timeout
    data = message.SerializeToString()
    assert protocol.decode_command(data) == protocol.Command(argv, env, timeout)
    assert protocol.encode_command(protocol.Command(argv, env, timeout)) == data


@given(
    code=st.integers(min_value=-(2**31), max_value=2**31 - 1),
    stderr=st.text(max_size=60),
    timed_out=st.none() | u64,
)
def test_responses_encode_as_protobuf_does(code: int, stderr: str, timed_out: int | None) -> None:
    ours = protocol.encode_response(protocol.Response(code, stderr, timed_out))
    message = MESSAGES["ExecuteResponse"](exit_code=code, stderr=stderr)
    if timed_out is not None:
        message.timed_out_after_s = timed_out
    assert ours == message.SerializeToString()
    assert protocol.decode_response(ours) == protocol.Response(code, stderr, timed_out)


@given(st.binary(max_size=64))
def test_garbage_is_malformed_or_a_command_never_a_crash(data: bytes) -> None:
    with contextlib.suppress(protocol.MalformedMessage):
        protocol.decode_command(data)


# ---------------------------------------------------------------------------------
# Requests against the command


@dataclass(frozen=True)
class Indexed:
    root: Path
    clang: str


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory, llvm: Llvm) -> Indexed:
    """The small program after the index step, with a link-flags file."""
    root = tmp_path_factory.mktemp("worker-small")
    for name, text in SMALL_PROGRAM.items():
        (root / name).write_text(text)
        subprocess.run([llvm.clang, "-O2", "-flto=thin", "-c", name], cwd=root, check=True)
    objects = [name.replace(".c", ".o") for name in SMALL_PROGRAM]
    subprocess.run([llvm.clang, "-flto=thin", "-fuse-ld=lld", "-O2", *objects, "-o", "prog",
                    "-Wl,--thinlto-index-only", "-Wl,--thinlto-emit-imports-files"],
                   cwd=root, check=True)  # fmt: skip
    (root / "link.args").write_text("-flto=thin\n-fuse-ld=lld\n-O2\n")
    return Indexed(root, llvm.clang)


@pytest.fixture(scope="module")
def worker(indexed: Indexed) -> Iterator[WorkerClient]:
    client = WorkerClient(str(indexed.root / "worker.sock"), str(indexed.root))
    yield client
    client.close()


def args(module: str, out: str, *extra: str, index: str = "", clang: str = "") -> list[str]:
    return ["--input", module, "--index", index or f"{module}.thinlto.bc", "--out", out,
            "--args", "link.args", "--", clang, *extra]  # fmt: skip


def command(indexed: Indexed, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*OPT, *argv], cwd=indexed.root, capture_output=True, text=True)


@pytest.mark.parametrize("module", [name.replace(".c", ".o") for name in SMALL_PROGRAM])
def test_worker_objects_equal_the_commands_byte_for_byte(
    indexed: Indexed, worker: WorkerClient, module: str
) -> None:
    reply = worker.execute(args(module, f"{module}.w.opt.o", clang=indexed.clang))
    assert (reply.exit_code, reply.stderr) == (0, "")
    proc = command(indexed, args(module, f"{module}.c.opt.o", clang=indexed.clang))
    assert proc.returncode == 0, proc.stderr
    ours = (indexed.root / f"{module}.w.opt.o").read_bytes()
    assert ours[:4] == b"\x7fELF"
    assert ours == (indexed.root / f"{module}.c.opt.o").read_bytes()


@pytest.mark.parametrize(
    ("case", "extra", "index"),
    [
        ("clang fails", ["-fno-such-flag"], ""),
        ("not the index's module", [], "add.o.thinlto.bc"),
        ("missing index", [], "nowhere.thinlto.bc"),
    ],
)
def test_worker_failures_print_the_commands_lines_and_exit_with_its_status(
    indexed: Indexed, worker: WorkerClient, case: str, extra: list[str], index: str
) -> None:
    argv = args("main.o", "failed.opt.o", *extra, index=index, clang=indexed.clang)
    reply = worker.execute(argv)
    proc = command(indexed, argv)
    assert proc.returncode != 0, case
    assert (reply.exit_code, reply.stderr) == (proc.returncode, proc.stderr), case
    assert not (indexed.root / "failed.opt.o").exists()


def batch_args(outs: dict[str, str], clang: str, *extra: str) -> list[str]:
    files = [
        arg
        for module, out in outs.items()
        for arg in ("--input", module, "--index", f"{module}.thinlto.bc", "--out", out)
    ]
    return [*files, "--args", "link.args", "--", clang, *extra]  # fmt: skip


def test_a_batch_request_writes_what_the_batch_command_writes_and_fails_as_it_does(
    indexed: Indexed, worker: WorkerClient
) -> None:
    modules = [name.replace(".c", ".o") for name in SMALL_PROGRAM]
    reply = worker.execute(batch_args({m: f"{m}.wb.opt.o" for m in modules}, indexed.clang))
    assert (reply.exit_code, reply.stderr) == (0, "")
    proc = command(indexed, batch_args({m: f"{m}.cb.opt.o" for m in modules}, indexed.clang))
    assert proc.returncode == 0, proc.stderr
    for module in modules:
        ours = (indexed.root / f"{module}.wb.opt.o").read_bytes()
        assert ours[:4] == b"\x7fELF"
        assert ours == (indexed.root / f"{module}.cb.opt.o").read_bytes(), module
    failing = batch_args({"add.o": "add.fb.opt.o", "main.o": "main.fb.opt.o"}, indexed.clang,
                         "-fno-such-flag")  # fmt: skip
    reply = worker.execute(failing)
    proc = command(indexed, failing)
    assert proc.returncode != 0
    assert (reply.exit_code, reply.stderr) == (proc.returncode, proc.stderr)
    assert "add.o" in proc.stderr.splitlines()[0]
    assert not (indexed.root / "main.fb.opt.o").exists()


def test_arguments_only_argparse_judges_get_argparses_answer(
    indexed: Indexed, worker: WorkerClient
) -> None:
    argv = ["--input", "main.o", "--index", "main.o.thinlto.bc", "--", indexed.clang]
    reply = worker.execute(argv)
    proc = command(indexed, argv)
    assert proc.returncode == 2
    assert (reply.exit_code, reply.stderr) == (proc.returncode, proc.stderr)


def waiting_compilers(worker: int, clang: str) -> list[str]:
    """The worker's children that serve `clang`'s backends: compile servers
    (process/cc1server.py), the compiler's headers being installed."""
    children = subprocess.run(["ps", "-ww", "-o", "args=", "--ppid", str(worker)],
                              capture_output=True, text=True).stdout  # fmt: skip
    return [c for c in children.splitlines() if "/cc1server-" in c and c.endswith(f" {clang}")]


def test_worker_runs_its_backends_in_a_compile_server(
    indexed: Indexed, worker: WorkerClient
) -> None:
    reply = worker.execute(args("add.o", "add.fork.opt.o", clang=indexed.clang))
    assert reply.exit_code == 0
    assert len(waiting_compilers(worker.proc.pid, indexed.clang)) == 1  # started once


def test_a_link_with_llvm_options_runs_its_backends_in_a_server_for_those_options(
    indexed: Indexed, worker: WorkerClient, tmp_path: Path
) -> None:
    flags = tmp_path / "mllvm.args"
    flags.write_text("-flto=thin\n-fuse-ld=lld\n-O2\n-Wl,-mllvm,-force-vector-width=1\n")
    argv = args("add.o", str(tmp_path / "w.o"), clang=indexed.clang)
    argv[argv.index("link.args")] = str(flags)
    reply = worker.execute(argv)
    assert (reply.exit_code, reply.stderr) == (0, "")
    children = subprocess.run(["ps", "-ww", "-o", "args=", "--ppid", str(worker.proc.pid)],
                              capture_output=True, text=True).stdout  # fmt: skip
    for_options = f" {indexed.clang} -force-vector-width=1"
    assert [c for c in children.splitlines() if "/cc1server-" in c and c.endswith(for_options)]
    argv[argv.index(str(tmp_path / "w.o"))] = str(tmp_path / "c.o")
    proc = command(indexed, argv)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "w.o").read_bytes() == (tmp_path / "c.o").read_bytes()


def test_without_compile_servers_the_worker_forks_its_backends_with_the_same_objects(
    indexed: Indexed, worker: WorkerClient, tmp_path: Path
) -> None:
    served = worker.execute(args("add.o", str(tmp_path / "served.o"), clang=indexed.clang))
    client = WorkerClient(str(tmp_path / "forking.sock"), str(indexed.root), "--no-compile-server")
    try:
        forked = client.execute(args("add.o", str(tmp_path / "forked.o"), clang=indexed.clang))
        assert (forked.exit_code, forked.stderr) == (served.exit_code, served.stderr) == (0, "")
        assert not waiting_compilers(client.proc.pid, indexed.clang)
        children = subprocess.run(["ps", "-ww", "-o", "args=", "--ppid", str(client.proc.pid)],
                                  capture_output=True, text=True).stdout  # fmt: skip
        assert indexed.clang in children.splitlines()  # the fork server: a clang waiting
    finally:
        client.close()
    assert (tmp_path / "forked.o").read_bytes() == (tmp_path / "served.o").read_bytes()


def test_a_ready_request_starts_a_compile_server_before_any_backend(
    indexed: Indexed, tmp_path: Path
) -> None:
    client = WorkerClient(str(tmp_path / "worker.sock"), str(indexed.root))
    try:
        # Every link of a build sends one, at once: one waiting compiler serves them all.
        stamps = [tmp_path / f"ready{i}" for i in range(4)]
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            replies = list(pool.map(
                lambda stamp: client.execute(["--ready", str(stamp), "--", indexed.clang]), stamps
            ))  # fmt: skip
        assert [(r.exit_code, r.stderr) for r in replies] == [(0, "")] * 4
        assert [stamp.read_bytes() for stamp in stamps] == [b""] * 4
        # Waiting for the first backend.
        assert len(waiting_compilers(client.proc.pid, indexed.clang)) == 1
        backend = client.execute(args("add.o", str(tmp_path / "add.o"), clang=indexed.clang))
        assert backend.exit_code == 0, backend.stderr
    finally:
        client.close()


def test_a_request_without_a_slot_compiles_in_the_slot_of_one_sent_beside_it(
    indexed: Indexed, tmp_path: Path
) -> None:
    client = WorkerClient(str(tmp_path / "worker.sock"), str(indexed.root))
    try:
        # As Buck2 at -j 1 sends a link's largest module and one more: one slot between
        # them, so one compiles after the other, in the one compile server.
        sent = [["--unweighted", *args("main.o", str(tmp_path / "main.o"), clang=indexed.clang)],
                args("add.o", str(tmp_path / "add.o"), clang=indexed.clang)]  # fmt: skip
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            replies = list(pool.map(client.execute, sent))
        assert [(r.exit_code, r.stderr) for r in replies] == [(0, "")] * 2
        assert len(waiting_compilers(client.proc.pid, indexed.clang)) == 1
        for argv in sent:
            out = argv[argv.index("--out") + 1]
            argv[argv.index("--out") + 1] = out + ".command.o"
            proc = command(indexed, argv)
            assert proc.returncode == 0, proc.stderr
            assert Path(out).read_bytes() == Path(out + ".command.o").read_bytes()
    finally:
        client.close()


def test_an_unweighted_batch_compiles_side_by_side_and_answers_as_the_batch_command(
    indexed: Indexed, tmp_path: Path
) -> None:
    client = WorkerClient(str(tmp_path / "worker.sock"), str(indexed.root), "--jobs", "2")
    try:
        modules = [name.replace(".c", ".o") for name in SMALL_PROGRAM]
        outs = {m: str(tmp_path / f"{m}.side.o") for m in modules}
        reply = client.execute(["--unweighted", *batch_args(outs, indexed.clang)])
        assert (reply.exit_code, reply.stderr) == (0, "")
        # Two backends at once, each in a compile server of its own.
        assert len(waiting_compilers(client.proc.pid, indexed.clang)) == 2
        proc = command(indexed, batch_args({m: f"{m}.cs.opt.o" for m in modules}, indexed.clang))
        assert proc.returncode == 0, proc.stderr
        for module in modules:
            assert (
                Path(outs[module]).read_bytes()
                == (indexed.root / f"{module}.cs.opt.o").read_bytes()
            )
        # One backend fails: its line and status, as the command gives them.
        failing = batch_args({m: str(tmp_path / f"{m}.fail.o") for m in modules}, indexed.clang)
        failing[failing.index("twice.o.thinlto.bc")] = "nowhere.thinlto.bc"
        reply = client.execute(["--unweighted", *failing])
        proc = command(indexed, failing)
        assert proc.returncode != 0
        assert (reply.exit_code, reply.stderr) == (proc.returncode, proc.stderr)
        assert "nowhere.thinlto.bc" in reply.stderr
    finally:
        client.close()


def test_a_socket_path_naming_a_file_fails_with_one_line_and_leaves_the_file(
    indexed: Indexed, tmp_path: Path
) -> None:
    taken = tmp_path / "not-a-socket"
    taken.write_text("keep")
    worker = [sys.executable, OPT[3], "opt-worker", "--socket", str(taken)]  # with site: grpc
    proc = subprocess.run(worker, cwd=indexed.root, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"dist-lto opt-worker: error: {taken}: cannot listen there: Address already in use"
    ]
    assert taken.read_text() == "keep"


@pytest.mark.parametrize("jobs", ["0", "two", "-1"])
def test_a_bad_jobs_count_fails_with_one_line(indexed: Indexed, tmp_path: Path, jobs: str) -> None:
    socket = str(tmp_path / "s")
    worker = [sys.executable, OPT[3], "opt-worker", "--socket", socket, f"--jobs={jobs}"]
    proc = subprocess.run(worker, cwd=indexed.root, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"dist-lto opt-worker: error: --jobs: expected a count of 1 or more, got {jobs!r}"
    ]
    assert not (tmp_path / "s").exists()


def test_worker_without_a_socket_fails_with_one_line(indexed: Indexed) -> None:
    proc = subprocess.run([*OPT[:-1], "opt-worker"], cwd=indexed.root, capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "dist-lto opt-worker: error: no socket: Buck2 names it in WORKER_SOCKET (or pass --socket)"
    ]


# ---------------------------------------------------------------------------------
# Plan requests (`plan ARGS`): `dist-lto plan`, run by the worker's warm planner


def small_meta(indexed: Indexed, out: str) -> str:
    """A meta file (docs/plan.md) for the small program's objects, its outputs in `out`."""
    objects = [name.replace(".c", ".o") for name in SMALL_PROGRAM]
    linkables = [
        {"kind": "object", "index": i, "path": o, "index_output": f"{out}/index/{o}.thinlto.bc",
         "plan_output": f"{out}/plans/{i}.json", "opt_output": f"{out}/opt/{i}.o"}
        for i, o in enumerate(objects)
    ]  # fmt: skip
    meta = {"version": 1, "index_dir": f"{out}/index", "link_plan_output": f"{out}/link-plan.json",
            "final_link_args_output": f"{out}/final-link.args",
            "groups": [{"linkables": linkables}]}  # fmt: skip
    path = indexed.root / f"{out}.meta.json"
    path.write_text(json.dumps(meta))
    return path.name


def written(root: Path) -> dict[str, bytes]:
    """Every file below `root`, by its path there, and its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def plan_command(indexed: Indexed, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """`dist-lto plan ARGV` as the plan action's command runs it (with site-packages)."""
    return subprocess.run([sys.executable, OPT[3], "plan", *argv], cwd=indexed.root,
                          capture_output=True, text=True)  # fmt: skip


def assert_the_command_writes(
    indexed: Indexed, argv: list[str], through_worker: dict[str, bytes]
) -> None:
    """The plan request `argv` wrote into `planned/` what `dist-lto plan` writes there."""
    shutil.rmtree(indexed.root / "planned")
    proc = plan_command(indexed, argv[1:])
    assert proc.returncode == 0, proc.stderr
    assert written(indexed.root / "planned") == through_worker


def planners(worker: int) -> list[int]:
    """The worker's planner processes (worker/plans.py)."""
    children = subprocess.run(["ps", "-ww", "-o", "pid=,args=", "--ppid", str(worker)],
                              capture_output=True, text=True).stdout  # fmt: skip
    return [int(c.split()[0]) for c in children.splitlines() if "dist_lto.worker.plans" in c]


def test_a_plan_request_writes_what_the_plan_command_writes_byte_for_byte(
    indexed: Indexed, worker: WorkerClient
) -> None:
    argv = ["plan", small_meta(indexed, "planned"), "--", indexed.clang, "-fuse-ld=lld", "-O2"]
    reply = worker.execute(argv)
    assert (reply.exit_code, reply.stderr) == (0, "")
    through_worker = written(indexed.root / "planned")
    assert "final-link.args" in through_worker and "index/main.o.thinlto.bc" in through_worker
    assert_the_command_writes(indexed, argv, through_worker)


def test_a_worker_on_a_standard_library_interpreter_plans_with_the_planner_python(
    indexed: Indexed, tmp_path: Path
) -> None:
    bare = [sys.executable, "-S", "-E"]  # without the virtualenv's site-packages
    assert subprocess.run([*bare, "-c", "import orjson"], capture_output=True).returncode != 0
    client = WorkerClient(str(tmp_path / "bare.sock"), str(indexed.root),
                          "--planner-python", sys.executable, python=bare)  # fmt: skip
    try:
        argv = ["plan", small_meta(indexed, "planned"), "--", indexed.clang, "-fuse-ld=lld"]
        reply = client.execute(argv)
        assert (reply.exit_code, reply.stderr) == (0, "")
    finally:
        client.close()
    assert_the_command_writes(indexed, argv, written(indexed.root / "planned"))


def test_a_planner_python_that_cannot_start_fails_the_plan_with_one_line_naming_it(
    indexed: Indexed, tmp_path: Path
) -> None:
    missing = str(tmp_path / "no-such-python")
    client = WorkerClient(str(tmp_path / "w.sock"), str(indexed.root), "--planner-python", missing)
    try:
        reply = client.execute(["plan", small_meta(indexed, "planned"), "--", indexed.clang])
    finally:
        client.close()
    assert reply.exit_code == 1
    assert reply.stderr == (
        f"dist-lto plan: error: cannot start the planner ({missing}): No such file or directory\n"
    )


@pytest.mark.parametrize(
    ("case", "argv"),
    [
        ("no meta file", ["nowhere.json", "--", "clang"]),
        ("no index command", ["nowhere.json"]),
        ("an unknown option", ["--no-such-option", "m.json", "--", "clang"]),
    ],
)
def test_a_failing_plan_request_prints_the_commands_lines_and_exits_with_its_status(
    indexed: Indexed, worker: WorkerClient, case: str, argv: list[str]
) -> None:
    reply = worker.execute(["plan", *argv])
    proc = plan_command(indexed, argv)
    assert proc.returncode == 2, case
    assert (reply.exit_code, reply.stderr) == (proc.returncode, proc.stderr), case


def sleeping_driver(tmp_path: Path) -> str:
    """An index command that never ends on its own: a shell script in `tmp_path`."""
    driver = tmp_path / "driver.sh"
    driver.write_text("#!/bin/sh\nwhile :; do sleep 1; done\n")
    driver.chmod(0o755)
    return str(driver)


def running(program: str) -> list[str]:
    """The pids of processes whose command line names `program`."""
    return subprocess.run(["pgrep", "-f", program], capture_output=True, text=True).stdout.split()


def wait_for(condition: Callable[[], object], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_plan_request_that_times_out_stops_its_index_step(
    indexed: Indexed, worker: WorkerClient, tmp_path: Path
) -> None:
    driver = sleeping_driver(tmp_path)
    reply = worker.execute(["plan", small_meta(indexed, "slow"), "--", driver], timeout_s=2)
    assert reply.timed_out_after_s == 2
    assert reply.exit_code == 128 + signal.SIGKILL
    wait_for(lambda: not running(driver))


def endless_plan(indexed: Indexed, tmp_path: Path, name: str) -> tuple[str, protocol.Command]:
    """A plan request whose index step never ends, and its driver."""
    driver = sleeping_driver(tmp_path)
    argv = ["plan", small_meta(indexed, name), "--", driver]
    return driver, protocol.Command([os.fsencode(arg) for arg in argv])


def test_a_request_buck2_cancels_stops_its_index_step(
    indexed: Indexed, worker: WorkerClient, tmp_path: Path
) -> None:
    """Buck2 cancels an action's call (RST_STREAM): the request stops what it runs."""
    driver, command = endless_plan(indexed, tmp_path, "cancelled")
    future = worker.call.future(command)
    wait_for(lambda: running(driver))
    future.cancel()
    wait_for(lambda: not running(driver))


def test_an_exec_stream_runs_its_command_and_its_cancel_event_stops_it(
    indexed: Indexed, worker: WorkerClient, tmp_path: Path
) -> None:
    """`Exec`: a command, then (while it runs) a cancellation on the same stream."""
    driver, command = endless_plan(indexed, tmp_path, "exec")

    def events() -> Iterator[protocol.Event]:
        yield protocol.Event(command=command)
        wait_for(lambda: running(driver))
        yield protocol.Event(cancel=True)

    call = worker.channel.stream_unary(
        f"/{protocol.SERVICE}/Exec",
        request_serializer=protocol.encode_event,
        response_deserializer=protocol.decode_response,
    )
    reply = call(events(), timeout=60)
    assert reply.exit_code == 128 + signal.SIGKILL
    wait_for(lambda: not running(driver))


def test_a_side_by_side_batch_compiles_its_largest_module_first(
    indexed: Indexed, tmp_path: Path
) -> None:
    modules = sorted((name.replace(".c", ".o") for name in SMALL_PROGRAM),
                     key=lambda m: (indexed.root / m).stat().st_size)  # fmt: skip
    assert (indexed.root / modules[0]).stat().st_size < (indexed.root / modules[-1]).stat().st_size
    client = WorkerClient(str(tmp_path / "worker.sock"), str(indexed.root), "--jobs", "1")
    try:
        outs = {m: tmp_path / f"{m}.order.o" for m in modules}  # the smallest first
        reply = client.execute(["--unweighted", *batch_args({m: str(o) for m, o in outs.items()},
                                                             indexed.clang)])  # fmt: skip
        assert (reply.exit_code, reply.stderr) == (0, "")
        # One at a time: the objects were written in the order they compiled.
        written = sorted(modules, key=lambda m: outs[m].stat().st_mtime_ns)
        assert written[0] == modules[-1]
    finally:
        client.close()


def test_a_side_by_side_batch_that_times_out_stops_every_backend(
    indexed: Indexed, worker: WorkerClient, tmp_path: Path
) -> None:
    compiler = sleeping_driver(tmp_path)
    modules = [name.replace(".c", ".o") for name in SMALL_PROGRAM]
    argv = batch_args({m: str(tmp_path / f"{m}.slow.o") for m in modules}, compiler)
    wait_for(lambda: not running(compiler))
    reply = worker.execute(["--unweighted", *argv], timeout_s=2)
    assert reply.timed_out_after_s == 2
    assert reply.exit_code != 0
    wait_for(lambda: not running(compiler))


def test_a_ready_request_starts_the_planner_and_a_planner_that_dies_fails_only_its_plans(
    indexed: Indexed, tmp_path: Path
) -> None:
    client = WorkerClient(str(tmp_path / "worker.sock"), str(indexed.root))
    try:
        assert not planners(client.proc.pid)
        ready = client.execute(["--ready", str(tmp_path / "ready"), "--", indexed.clang])
        assert (ready.exit_code, ready.stderr) == (0, "")
        (planner,) = planners(client.proc.pid)
        driver = sleeping_driver(tmp_path)
        slow = ["plan", small_meta(indexed, "orphan"), "--", driver]
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(client.execute, slow)
            wait_for(lambda: running(driver))
            os.kill(planner, signal.SIGKILL)
            reply = pending.result(timeout=60)
        assert reply.exit_code == 1
        assert reply.stderr == (
            "dist-lto plan: error: the worker's planner process ended before the plan did\n"
        )
        wait_for(lambda: not running(driver))  # its plan and index step went with it
        argv = ["plan", small_meta(indexed, "after"), "--", indexed.clang, "-fuse-ld=lld", "-O2"]
        again = client.execute(argv)
        assert (again.exit_code, again.stderr) == (0, "")
        assert planners(client.proc.pid) != [planner]
    finally:
        client.close()


def test_a_worker_logs_its_start_and_its_planners_cpu_apart_from_its_compilers(
    indexed: Indexed, tmp_path: Path
) -> None:
    """bench/buck2.py sets the compilers' figure against in-process LLD's backends: the
    planner, its plans and their index steps are not backends; and it reports what the
    worker took to start."""
    client = WorkerClient(str(tmp_path / "worker.sock"), str(indexed.root))
    try:
        argv = ["plan", small_meta(indexed, "cpu"), "--", indexed.clang, "-fuse-ld=lld", "-O2"]
        assert client.execute(argv).exit_code == 0
    finally:
        client.close()
    log = client.log()
    assert re.search(r"serving opt requests on .* \(pid \d+, \d+\.\d\d s of CPU to start\)\n", log)
    (line,) = [line for line in log.splitlines() if " cpu: " in line]
    words = line.split()
    assert float(words[words.index("compilers") + 1]) == 0.0, line  # no backend ran
    assert float(words[words.index("links") + 1]) > 0.0, line  # the driver's line, found
    assert float(words[words.index("planner") + 1]) > 0.0, line


# ---------------------------------------------------------------------------------
# Final link requests (`DRIVER... -o OUT @ARGS`): the linker itself on the driver's line


@pytest.fixture(scope="module")
def natives(indexed: Indexed) -> list[str]:
    """The small program's native objects, in `native/` below the worker's directory."""
    native = indexed.root / "native"
    native.mkdir()
    for name in SMALL_PROGRAM:
        subprocess.run([indexed.clang, "-O2", "-c", f"../{name}"], cwd=native, check=True)
    return [f"native/{name.replace('.c', '.o')}" for name in SMALL_PROGRAM]


def test_a_final_link_request_runs_the_linker_on_the_drivers_line_for_the_same_program(
    indexed: Indexed, natives: list[str]
) -> None:
    root = indexed.root
    driver = [indexed.clang, "-fuse-ld=lld", "-O2"]
    (root / "native" / "driver.args").write_text("\n".join(driver) + "\n")
    (root / "native" / "link.args").write_text("\n".join([*natives, "-lm"]) + "\n")
    client = WorkerClient(str(root / "links.sock"), str(root))
    try:
        ready = client.execute(["--ready", "native/ready", "--link-driver", "native/driver.args",
                                "--", indexed.clang])  # fmt: skip
        assert (ready.exit_code, ready.stderr) == (0, "")
        reply = client.execute([*driver, "-o", "native/by-worker", "@native/link.args"])
        assert (reply.exit_code, reply.stderr) == (0, "")
    finally:
        client.close()
    # Found once, for the ready request (the link request does not find it again).
    log = client.log()
    assert log.count(f"{indexed.clang}: links run ") == 1
    assert f"{indexed.clang}: links run /usr/lib/llvm-22/bin/ld.lld directly" in log
    subprocess.run([*driver, "-o", "native/by-command", "@native/link.args"], cwd=root, check=True)
    program = (root / "native" / "by-worker").read_bytes()
    assert program == (root / "native" / "by-command").read_bytes()
    ran = subprocess.run([root / "native" / "by-worker"], capture_output=True, text=True)
    assert (ran.returncode, ran.stdout) == (0, "2\n")  # twice(argc == 1)


@pytest.mark.parametrize("pthread", [False, True], ids=["in-place", "driver-option"])
def test_a_failing_final_link_fails_with_the_linkers_lines_and_status(
    indexed: Indexed, worker: WorkerClient, natives: list[str], pthread: bool
) -> None:
    """Where every argument goes in place the linker runs alone, so the driver's closing
    line is missing; a driver option among them (`-pthread`) runs the driver itself."""
    root = indexed.root
    args = f"native/undefined-{pthread}.args"
    (root / args).write_text("\n".join([natives[0], *(["-pthread"] if pthread else [])]) + "\n")
    argv = [indexed.clang, "-fuse-ld=lld", "-O2", "-o", f"native/undefined-{pthread}", f"@{args}"]
    reply = worker.execute(argv)
    proc = subprocess.run(argv, cwd=root, capture_output=True, text=True)
    assert reply.exit_code == proc.returncode == 1
    assert "undefined symbol: twice" in reply.stderr
    driver_said = "linker command failed with exit code 1"
    assert driver_said in proc.stderr
    if pthread:
        assert reply.stderr == proc.stderr
    else:
        assert reply.stderr == proc.stderr.replace(proc.stderr.splitlines()[-1] + "\n", "")
        assert driver_said not in reply.stderr


def slow_fake_clang(tmp_path: Path) -> Path:
    """A `clang` whose `-###` takes 0.3 s and prints a linker line with the markers it
    was given, logging when each run starts and ends."""
    clang = tmp_path / "clang"
    clang.write_text(
        "#!/bin/sh\n"
        f'echo "start $(date +%s.%N)" >> {tmp_path}/runs\n'
        "sleep 0.3\n"
        'while [ $# -gt 0 ]; do case "$1" in -o) out="$2"; shift;; -Wl,*) in="${1#-Wl,}";; esac;'
        " shift; done\n"
        "echo 'clang version 22' >&2\n"
        'echo " \\"/usr/bin/ld.lld\\" \\"-o\\" \\"$out\\" \\"$in\\" \\"-lc\\"" >&2\n'
        f'echo "end $(date +%s.%N)" >> {tmp_path}/runs\n'
    )
    clang.chmod(0o755)
    return clang


def test_lines_are_found_beside_the_ready_request_a_few_at_a_time_and_never_waited_for(
    tmp_path: Path,
) -> None:
    """A `--ready` request only starts finding its driver's line; a plan or final link
    request that comes meanwhile runs the driver rather than wait; and no more drivers
    run at once than asked, however many links a build has."""
    from dist_lto.llvm.driver_line import LinkerLine
    from dist_lto.worker.links import LinkerLines

    clang = slow_fake_clang(tmp_path)
    notes: list[str] = []
    lines = LinkerLines(notes.append, None, None, at_once=1)
    for k in range(3):
        (tmp_path / f"driver{k}").write_text(f"{clang}\n-O{k}\n")
        started = time.monotonic()
        lines.find(str(tmp_path / f"driver{k}"))
        assert time.monotonic() - started < 0.2  # not waited for
    assert lines.get([str(clang), "-O0"], wait=False) is None  # still being found
    line = lines.get([str(clang), "-O0"])
    assert line == LinkerLine(("/usr/bin/ld.lld",), ("-lc",), 1)
    for k in (1, 2):
        assert lines.get([str(clang), f"-O{k}"]) == line
    runs = [line.split() for line in (tmp_path / "runs").read_text().splitlines()]
    spans = sorted(zip([float(t) for e, t in runs if e == "start"],
                       [float(t) for e, t in runs if e == "end"], strict=True))  # fmt: skip
    assert len(spans) == 3 and all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    assert notes == [f"{clang}: links run /usr/bin/ld.lld directly"] * 3


def test_backends_write_in_the_workers_directory_only_on_their_outputs_file_system(
    tmp_path: Path,
) -> None:
    from dist_lto.worker.requests import CompilerPool

    scratch, out_dir = tmp_path / "worker-tmp", tmp_path / "out"
    scratch.mkdir()
    out_dir.mkdir()
    pool = CompilerPool(str(tmp_path / "tools"), print, None, scratch=str(scratch))
    assert pool.scratch_for(str(out_dir / "m.o")) == str(scratch)
    assert pool.scratch_for(str(tmp_path / "missing" / "m.o")) is None
    assert pool.scratch_for(str(out_dir / "m.o"), str(out_dir / "m.dwo")) == str(scratch)
    assert pool.scratch_for(str(out_dir / "m.o"), str(tmp_path / "missing" / "m.dwo")) is None
    assert pool.scratch_device is not None
    pool.scratch_device += 1  # as if the worker's directory were on another file system
    assert pool.scratch_for(str(out_dir / "m.o")) is None
    without = CompilerPool(str(tmp_path / "tools"), print, None)
    assert without.scratch_for(str(out_dir / "m.o")) is None
