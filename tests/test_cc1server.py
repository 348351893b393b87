"""Backends run one after another in one compile server (`process/cc1server.py`,
`process/cc1server.cpp`), as the opt worker runs them.

Real clang 22 throughout: what must hold is that a job the server ran is the job clang
would have run (same object), that whatever a user sees of a job that fails or says
anything is clang's own (stderr and status of a forked clang), that a job it must not
run is left to a forked clang, and that a stopped or vanished server costs nothing but
its job.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from dist_lto.distribute.compilers import TALKATIVE, WorkerCompiler
from dist_lto.process import cc1server, forkserver
from support.tools import Llvm

SOURCES = {
    "main.c": "int twice(int);\nint leaf(int);\n"
    "int main(int argc, char **argv) { (void)argv; return twice(argc) + leaf(argc) - 5; }\n",
    "twice.c": "int leaf(int);\nint twice(int x) { return 2 * leaf(x) + 1; }\n",
    "leaf.c": "int leaf(int x) { int s = 0; for (int i = 0; i < x * 8; i++) s += i ^ x;"
    " return s; }\n",
    # A frame larger than its -Wframe-larger-than=64 allows: a warning from the backend.
    "big.c": "__attribute__((noinline)) void use(volatile char *p) { p[0] = 1; }\n"
    "__attribute__((used)) int big(int i) { volatile char b[512]; use(b); return b[i]; }\n",
}
FLAGS = {"big.c": ["-Wframe-larger-than=64"]}


@pytest.fixture(scope="module")
def tools_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("tools"))


@pytest.fixture(scope="module")
def program(llvm: Llvm, tools_dir: str) -> str:
    tools = cc1server.toolchain(llvm.clang)
    assert not isinstance(tools, str), tools
    return cc1server.server_program(tools, tools_dir)


@pytest.fixture(scope="module")
def preload(llvm: Llvm, tools_dir: str) -> str:
    return forkserver.library(llvm.clang, tools_dir)


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory, llvm: Llvm) -> Path:
    """Bitcode modules and the individual indexes of their ThinLTO link."""
    root = tmp_path_factory.mktemp("modules")
    for name, text in SOURCES.items():
        (root / name).write_text(text)
        subprocess.run([llvm.clang, "-O2", "-flto=thin", *FLAGS.get(name, []), "-c", name,
                        "-o", f"{name[:-2]}.o"], cwd=root, check=True)  # fmt: skip
    objects = [f"{name[:-2]}.o" for name in SOURCES]
    subprocess.run([llvm.clang, "-fuse-ld=lld", "-flto=thin", *objects, "-o", "prog",
                    "-Wl,--thinlto-index-only"], cwd=root, check=True)  # fmt: skip
    return root


def backend(llvm: Llvm, root: Path, name: str, out: str, *extra: str) -> list[str]:
    """The backend of module `name`, named as the index names it: relative to `root`."""
    assert Path.cwd() == root
    return [llvm.clang, "-O2", *extra, "-x", "ir", f"{name}.o",
            f"-fthinlto-index={name}.o.thinlto.bc", "-c", "-o", out]  # fmt: skip


def command(argv: list[str]) -> tuple[int, bytes]:
    done = subprocess.run(argv, capture_output=True)
    return done.returncode, done.stderr


class Started:
    """The pids a runner reports, as the worker's `Running` records them."""

    def __init__(self) -> None:
        self.pids: list[int] = []

    def __call__(self, pid: int) -> None:
        self.pids.append(pid)


@pytest.fixture(autouse=True)
def in_the_link_directory(modules: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Indexes name the modules they import from relative to the link's directory."""
    monkeypatch.chdir(modules)


class Troubles(list[str]):
    """What a compiler was told about its servers."""


@pytest.fixture
def troubles() -> Troubles:
    return Troubles()


@pytest.fixture
def served(llvm: Llvm, program: str, preload: str, troubles: Troubles) -> Iterator[WorkerCompiler]:
    """A compiler whose compile server has started (and is closed after the test)."""
    made = WorkerCompiler(llvm.clang, preload, troubles.append, None, program, troubles.append)
    try:
        made.start()
        assert made.cc1_server is not None and not troubles, troubles
        yield made
    finally:
        made.close()


def test_served_backends_write_the_objects_clang_writes_in_the_servers_own_process(
    llvm: Llvm, modules: Path, served: WorkerCompiler
) -> None:
    assert served.cc1_server is not None
    server = served.cc1_server.pid
    for name in ("main", "twice", "leaf", "main"):
        started = Started()
        assert served.run(backend(llvm, modules, name, f"{name}.served.o"), started) == (0, b"")
        assert started.pids == [server]  # no compiler started or forked
        assert command(backend(llvm, modules, name, f"{name}.command.o")) == (0, b"")
        made = (modules / f"{name}.served.o").read_bytes()
        assert made == (modules / f"{name}.command.o").read_bytes() and made
    assert served.cc1_server.pid == server


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        (("-mllvm", "-print-debug-counter"), "an LLVM option that reports at exit"),
        (("-Wl,--as-needed",), "the driver warns: linker input unused"),
        (("-no-canonical-prefixes",), "the program's path as given"),
    ],
)
def test_jobs_the_server_must_not_run_are_forked_and_say_what_clang_says(
    llvm: Llvm, modules: Path, served: WorkerCompiler, extra: tuple[str, ...], why: str
) -> None:
    assert served.cc1_server is not None
    server = served.cc1_server.pid
    started = Started()
    status, stderr = served.run(backend(llvm, modules, "twice", "declined.o", *extra), started)
    assert (status, stderr) == command(backend(llvm, modules, "twice", "command.o", *extra))
    assert status == 0, why
    assert len(started.pids) == 1 and started.pids != [server], why
    assert (modules / "declined.o").read_bytes() == (modules / "command.o").read_bytes()
    # The next job runs in a compile server again (one started for its options).
    assert served.run(backend(llvm, modules, "leaf", "next.o"), None) == (0, b"")
    assert served.served


def test_jobs_with_llvm_options_run_in_a_server_started_for_exactly_those_options(
    llvm: Llvm, modules: Path, served: WorkerCompiler
) -> None:
    narrow = ("-mllvm", "-force-vector-width=1")  # changes leaf.c's loop
    assert served.cc1_server is not None
    plain = served.cc1_server.pid
    both = (*narrow, "-mllvm=-unroll-threshold=0")
    runs = [("narrow", narrow), ("narrow", narrow), ("both", both), ("plain", ())]
    pids = []
    for n, (label, extra) in enumerate(runs):
        started = Started()
        out, reference = f"leaf.{label}.{n}.served.o", f"leaf.{label}.command.o"
        assert served.run(backend(llvm, modules, "leaf", out, *extra), started) == (0, b"")
        assert served.served and len(started.pids) == 1
        pids.append(started.pids[0])
        assert command(backend(llvm, modules, "leaf", reference, *extra)) == (0, b"")
        assert (modules / out).read_bytes() == (modules / reference).read_bytes()
    # One server per list of options, in order; the same list again, the same server.
    assert pids[0] == pids[1] and len({plain, pids[0], pids[2], pids[3]}) == 4
    assert (modules / "leaf.narrow.command.o").read_bytes() != (
        modules / "leaf.plain.command.o"
    ).read_bytes()


def test_llvm_options_are_read_from_a_command_in_order() -> None:
    argv = ["clang", "-O2", "-mllvm", "-a=1", "-c", "-mllvm=-b", "-mllvm"]
    assert cc1server.llvm_options(argv) == ("-a=1", "-b", "")


@pytest.mark.parametrize(
    ("extra", "status"),
    [((), 0), (("-march=no-such-cpu",), 1)],
    ids=["backend-warning", "failure"],
)
def test_a_job_that_says_anything_is_run_again_forked_for_clangs_own_words(
    llvm: Llvm, modules: Path, served: WorkerCompiler, extra: tuple[str, ...], status: int
) -> None:
    assert served.cc1_server is not None
    server = served.cc1_server.pid
    started = Started()
    got = served.run(backend(llvm, modules, "big", "said.o", *extra), started)
    expected = command(backend(llvm, modules, "big", "command.o", *extra))
    assert got == expected and expected[0] == status and expected[1]
    # Once in the server, then in a forked clang, whose run is the one reported.
    assert started.pids[0] == server and len(started.pids) == 2
    if status == 0:
        assert (modules / "said.o").read_bytes() == (modules / "command.o").read_bytes()
    # A server that ran a failing or talkative job is not used again.
    assert served.cc1_server is None
    assert served.run(backend(llvm, modules, "leaf", "after.o"), None) == (0, b"")
    assert served.cc1_server is not None and served.cc1_server.pid != server


def test_a_compiler_whose_backends_keep_warning_forks_them_instead_of_running_each_twice(
    llvm: Llvm, modules: Path, served: WorkerCompiler, troubles: Troubles
) -> None:
    assert served.run(backend(llvm, modules, "leaf", "quiet.o"), None) == (0, b"")
    runs = []
    for n in range(TALKATIVE + 1):
        started = Started()
        got = served.run(backend(llvm, modules, "big", f"warned{n}.o"), started)
        assert got == command(backend(llvm, modules, "big", "command.o")) and got[1]
        runs.append(len(started.pids))
    # Served then forked while the warnings were few; forked once from then on.
    assert runs == [2] * TALKATIVE + [1], runs
    assert served.cc1 is None and served.cc1_server is None
    assert troubles and "printed warnings" in troubles[-1]
    started = Started()
    assert served.run(backend(llvm, modules, "leaf", "forked.o"), started) == (0, b"")
    assert not served.served and len(started.pids) == 1


def test_a_server_killed_during_its_job_reports_the_job_killed_and_the_next_job_runs(
    llvm: Llvm, modules: Path, served: WorkerCompiler
) -> None:
    def stop(pid: int) -> None:
        os.kill(pid, signal.SIGKILL)  # what the worker does to a cancelled request

    assert served.run(backend(llvm, modules, "leaf", "stopped.o"), stop) == (
        -signal.SIGKILL,
        b"",
    )
    assert served.run(backend(llvm, modules, "leaf", "next.o"), None) == (0, b"")
    assert command(backend(llvm, modules, "leaf", "command.o")) == (0, b"")
    assert (modules / "next.o").read_bytes() == (modules / "command.o").read_bytes()


def test_a_server_gone_between_jobs_is_started_again(
    llvm: Llvm, modules: Path, served: WorkerCompiler
) -> None:
    assert served.cc1_server is not None
    gone = served.cc1_server.pid
    os.kill(gone, signal.SIGKILL)  # as when it leaves with 1 GiB resident
    started = Started()
    assert served.run(backend(llvm, modules, "main", "again.o"), started) == (0, b"")
    assert served.cc1_server is not None and started.pids == [served.cc1_server.pid]
    assert gone not in started.pids


def test_closing_ends_the_server(served: WorkerCompiler) -> None:
    assert served.cc1_server is not None
    pid = served.cc1_server.pid
    served.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_the_servers_name_follows_the_compilers_contents_not_its_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {name: tmp_path / name for name in ("clang", "libclang-cpp.so.22", "libLLVM.so.22")}
    for path in files.values():
        path.write_bytes(b"version 1")
    clang, clang_cpp, llvm = (str(path) for path in files.values())
    tools = cc1server.Toolchain(clang, str(tmp_path), clang_cpp, llvm)
    built: list[str] = []
    monkeypatch.setattr(cc1server, "built_once", lambda path, build: built.append(path))
    first = cc1server.server_program(tools, str(tmp_path / "tools"))
    os.link(files["clang"], tmp_path / "perf-build-id-cache-link")  # a new change time
    assert cc1server.server_program(tools, str(tmp_path / "tools")) == first
    replaced = tmp_path / "new-clang"
    replaced.write_bytes(b"version 2")
    os.replace(replaced, files["clang"])  # as a package upgrade installs it
    assert cc1server.server_program(tools, str(tmp_path / "tools")) != first
    assert built[0] == first


def test_a_compiler_without_its_headers_or_libraries_gets_no_server(
    tmp_path: Path, llvm: Llvm
) -> None:
    real = Path(llvm.clang).resolve().read_bytes()
    fake = tmp_path / "llvm" / "bin" / "clang"
    fake.parent.mkdir(parents=True)
    fake.write_bytes(real)
    fake.chmod(0o755)
    (tmp_path / "llvm" / "lib").mkdir()
    assert "libclang-cpp.so." in str(cc1server.toolchain(str(fake)))  # not beside it
    for library in Path(llvm.clang).resolve().parent.parent.glob("lib/lib*.so.*"):
        if library.name.startswith(("libclang-cpp.so.", "libLLVM.so.")):
            (tmp_path / "llvm" / "lib" / library.name).touch()
    assert str(cc1server.toolchain(str(fake))).startswith("no clang headers in ")
    script = tmp_path / "clang-wrapper"
    script.write_text('#!/bin/sh\nexec clang "$@"\n')
    script.chmod(0o755)
    assert str(cc1server.toolchain(str(script))).endswith("is not an ELF program")
