"""Backends the opt worker compiles ahead of their requests (worker/ahead.py), with real
clang 22 and LLD 22: the objects the requests then get are the command's, byte for
byte; nothing runs ahead on a link's later builds; a module changed since its backend
ran ahead is compiled again."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from dist_lto.worker import slots as slots_module
from dist_lto.worker.client import WorkerClient
from dist_lto.worker.slots import Slots
from support.links import SMALL_PROGRAM
from support.opt_command import OPT
from support.tools import Llvm

MODULES = [name.replace(".c", ".o") for name in SMALL_PROGRAM]
AHEAD = "compiled ahead of its request"


@pytest.fixture
def root(tmp_path: Path, llvm: Llvm) -> Path:
    """The small program's bitcode, a link-flags file and a meta file (docs/plan.md)."""
    for name, text in SMALL_PROGRAM.items():
        (tmp_path / name).write_text(text)
        subprocess.run([llvm.clang, "-O2", "-flto=thin", "-c", name], cwd=tmp_path, check=True)
    (tmp_path / "link.args").write_text("-flto=thin\n-fuse-ld=lld\n-O2\n")
    linkables = [
        {"kind": "object", "index": i, "path": o, "index_output": f"out/index/{o}.thinlto.bc",
         "plan_output": f"out/plans/{i}.json", "opt_output": f"out/opt/{i}.o"}
        for i, o in enumerate(MODULES)
    ]  # fmt: skip
    meta = {"version": 1, "index_dir": "out/index", "link_plan_output": "out/link-plan.json",
            "final_link_args_output": "out/final-link.args",
            "groups": [{"linkables": linkables}]}  # fmt: skip
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    return tmp_path


def backend(module: str, out: str, clang: str) -> list[str]:
    return ["--input", module, "--index", f"out/index/{module}.thinlto.bc", "--out", out,
            "--args", "link.args", "--", clang]  # fmt: skip


def wait_for(condition: Callable[[], object], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def ran_ahead(reuse: Path) -> list[Path]:
    """The objects of backends run ahead and not yet taken."""
    return sorted(reuse.glob("v1/ahead-*/*.o"))


def build(root: Path, reuse: Path, clang: str, tag: str, *, wait: int) -> str:
    """Plan the link through a new worker (one job), send its first backend, wait until
    `wait` objects have run ahead, then send the others; every object checked against
    the command's; the worker's log."""
    client = WorkerClient(str(root / f"{tag}.sock"), str(root), "--reuse-dir", str(reuse),
                          "--jobs", "1")  # fmt: skip
    try:
        plan = client.execute(["plan", "meta.json", "--", clang, "-fuse-ld=lld", "-O2"])
        assert (plan.exit_code, plan.stderr) == (0, "")
        first, *rest = MODULES
        for module in [first]:
            reply = client.execute(backend(module, f"{module}.{tag}.o", clang))
            assert (reply.exit_code, reply.stderr) == (0, "")
        wait_for(lambda: len(ran_ahead(reuse)) >= wait)
        for module in rest:
            reply = client.execute(backend(module, f"{module}.{tag}.o", clang))
            assert (reply.exit_code, reply.stderr) == (0, "")
    finally:
        client.close()
    for module in MODULES:
        proc = subprocess.run([*OPT, *backend(module, f"{module}.command.o", clang)], cwd=root,
                              capture_output=True, text=True)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        ours = (root / f"{module}.{tag}.o").read_bytes()
        assert ours[:4] == b"\x7fELF"
        assert ours == (root / f"{module}.command.o").read_bytes(), module
    return client.log()


def test_backends_run_ahead_of_their_requests_give_the_objects_the_command_writes(
    root: Path, llvm: Llvm
) -> None:
    reuse = root / "reuse"
    log = build(root, reuse, llvm.clang, "first", wait=len(MODULES) - 1)
    assert log.count(AHEAD) == len(MODULES) - 1, log
    assert ran_ahead(reuse) == [] and list(reuse.glob("v1/ahead-*")) == []


def test_a_links_later_builds_run_nothing_ahead(root: Path, llvm: Llvm) -> None:
    reuse = root / "reuse"
    build(root, reuse, llvm.clang, "first", wait=len(MODULES) - 1)
    log = build(root, reuse, llvm.clang, "again", wait=0)
    assert AHEAD not in log, log


def test_a_module_replaced_after_its_backend_ran_ahead_is_compiled_again(
    root: Path, llvm: Llvm
) -> None:
    reuse = root / "reuse"
    client = WorkerClient(str(root / "w.sock"), str(root), "--reuse-dir", str(reuse),
                          "--jobs", "1")  # fmt: skip
    first, *rest = MODULES
    try:
        plan = client.execute(["plan", "meta.json", "--", llvm.clang, "-fuse-ld=lld", "-O2"])
        assert plan.exit_code == 0, plan.stderr
        reply = client.execute(backend(first, f"{first}.w.o", llvm.clang))
        assert reply.exit_code == 0, reply.stderr
        wait_for(lambda: len(ran_ahead(reuse)) == len(rest))
        for module in rest:  # the same bytes in a new file: as a rebuilt input would be
            data = (root / module).read_bytes()
            (root / f"{module}.new").write_bytes(data)
            os.replace(root / f"{module}.new", root / module)
        for module in rest:
            reply = client.execute(backend(module, f"{module}.w.o", llvm.clang))
            assert (reply.exit_code, reply.stderr) == (0, "")
    finally:
        client.close()
    assert AHEAD not in client.log()
    for module in rest:
        assert (root / f"{module}.w.o").read_bytes()[:4] == b"\x7fELF"


def test_backends_run_ahead_read_each_module_once_with_the_workers_requests(
    root: Path, llvm: Llvm, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backend run ahead checks its module and those it imports against its index as
    a request does, remembering them in the worker's verified modules: a module is read
    once for all the backends that import it, ahead or requested."""
    from dist_lto import backend as backend_module
    from dist_lto import opt_request
    from dist_lto.worker.ahead import RunAhead

    client = WorkerClient(str(root / "p.sock"), str(root))
    try:
        plan = client.execute(["plan", "meta.json", "--", llvm.clang, "-fuse-ld=lld", "-O2"])
        assert (plan.exit_code, plan.stderr) == (0, "")
    finally:
        client.close()
    monkeypatch.chdir(root)
    reads: list[str] = []  # the modules whose hashes were read
    check = backend_module._check_module_hash

    def checking(module: str, *args: Any, **kwargs: Any) -> None:
        reads.append(module)
        check(module, *args, **kwargs)

    monkeypatch.setattr(backend_module, "_check_module_hash", checking)
    verified = backend_module.VerifiedModules(files=True)
    ahead = RunAhead(str(root / "store"), lambda clang: None, print, verified)
    ended = threading.Semaphore(0)
    ahead.ended = ended.release
    try:
        ahead.learn(["meta.json", "--", llvm.clang])
        first, *rest = MODULES
        request = opt_request.parse_fast(backend(first, f"{first}.w.o", llvm.clang))
        assert request is not None and ahead.claim(request) is None
        started = 0
        while ahead.start_next():  # one at a time, largest first
            started += 1
            assert ended.acquire(timeout=60)
        assert started == len(rest)
        assert reads and len(reads) == len(set(reads)), reads
        opt_request.execute(request, verified=verified)  # the first request, after them
        assert len(reads) == len(set(reads)), reads
        for module in rest:
            request = opt_request.parse_fast(backend(module, f"{module}.w.o", llvm.clang))
            assert request is not None and ahead.claim(request) is not None
    finally:
        ahead.close()


def test_a_finished_compiles_turn_is_lent_only_while_its_slot_is_on_its_way_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [0.0]
    monkeypatch.setattr(slots_module, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    slots = Slots(jobs=2)
    started: list[int] = []
    slots.ahead = lambda: started.append(slots.compiling) is None
    release = threading.Event()

    def hold(entered: threading.Event) -> None:
        with slots.request(False), slots.compiling_turn(False, lambda: False):
            entered.set()
            release.wait(5)

    # Two requests compiling: Buck2 gave two slots; nothing runs ahead beside them.
    entered = [threading.Event(), threading.Event()]
    threads = [threading.Thread(target=hold, args=(e,)) for e in entered]
    for t in threads:
        t.start()
    for e in entered:
        assert e.wait(5)
    assert started == [] and slots.widest == 2
    release.set()
    for t in threads:
        t.join()
    # Each compile's end lent its turn to a backend run ahead (the other still
    # compiling): never more than the two slots.
    assert started == [1, 1] and slots.compiling == 2
    slots.ahead_ended()  # the slots still on their way back: the turn is lent again
    assert started == [1, 1, 1] and slots.compiling == 2
    clock[0] += slots_module.RETURN_SECONDS  # they went to other actions
    slots.ahead_ended()
    slots.ahead_ended()
    assert started == [1, 1, 1] and slots.compiling == 0


def test_pruning_removes_run_ahead_directories_that_killed_workers_left(tmp_path: Path) -> None:
    from dist_lto.worker.reuse import Store

    store = Store(str(tmp_path / "store"), print)
    left = Path(store.root) / "ahead-killed"
    left.mkdir(parents=True)
    (left / "1.o").write_bytes(b"\x7fELF")
    os.utime(left, (time.time() - 60, time.time() - 60))
    started = time.time()
    running = Path(store.root) / "ahead-running"  # a worker's that started after this one
    running.mkdir()
    os.utime(running, (started + 1, started + 1))
    links = Path(store.root) / "ran-ahead"
    links.mkdir()
    assert store.prune(started) == 1
    assert not left.exists() and running.is_dir() and links.is_dir()


def test_a_workers_start_prunes_the_store_when_no_worker_has_for_an_hour(tmp_path: Path) -> None:
    from dist_lto.worker import reuse
    from dist_lto.worker.reuse import Store

    store = Store(str(tmp_path / "store"), print)
    objects = Path(store.root) / "objects"
    objects.mkdir(parents=True)

    def orphan(name: str) -> Path:  # an object no slot names, from before this start
        path = objects / name
        path.write_bytes(b"\x7fELF")
        return path

    first = orphan("a" * 64)
    assert store.prune_when_due(time.time() + 1) == 1 and not first.exists()
    second = orphan("b" * 64)
    killed = Path(store.root) / "ahead-killed"  # left by a killed worker's backends run ahead
    killed.mkdir()
    os.utime(killed, (time.time() - 60, time.time() - 60))
    # Pruned a moment ago: only what killed workers left goes.
    assert store.prune_when_due(time.time() + 1) == 1
    assert second.exists() and not killed.exists()
    stamp = Path(store.root) / "pruned"
    hour_ago = time.time() - reuse.PRUNE_SECONDS - 1
    os.utime(stamp, (hour_ago, hour_ago))
    assert store.prune_when_due(time.time() + 1) == 1 and not second.exists()


def test_a_store_on_another_file_system_than_the_outputs_stops_running_ahead(
    root: Path, llvm: Llvm
) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == root.stat().st_dev:
        pytest.skip("no second file system (/dev/shm) to keep the store on")
    reuse = shm / f"dist-lto-test-{os.getpid()}-{root.name}"
    try:
        log = build(root, reuse, llvm.clang, "elsewhere", wait=1)
    finally:
        import shutil

        shutil.rmtree(reuse, ignore_errors=True)
    assert "not on the outputs' file system: no backend runs ahead" in log, log
    assert AHEAD not in log
    assert re.search(r"[1-9]\d* backends ran ahead of their requests, 0 taken", log), log
