"""Failures real clang cannot be made to produce on demand, with fake compilers.

The fakes are executables, not pytest-subprocess patches: `dist-lto opt` starts
clang with `os.posix_spawn` (importing `subprocess` alone would cost more than the
whole 10 ms budget), which pytest-subprocess cannot intercept. A fake executable
also exercises the real spawn, pipe, wait and signal paths.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from dist_lto.llvm.toolchain import tool
from support.links import ThinIndex
from support.opt_command import OPT, opt_command
from support.tools import Llvm

MODULE = "obj/lzio.o"


def fake_clang(tmp_path: Path, body: str) -> str:
    """A compiler that finds its `-o` and `-Xclang -split-dwarf-output -Xclang X`, then runs
    `body` (sh) with them in `$out` and `$dwo`."""
    script = tmp_path / "fake-clang"
    script.write_text(
        "#!/bin/sh\n"
        'out=""; dwo=""\n'
        "while [ $# -gt 0 ]; do\n"
        '  case "$1" in -o) out="$2";; -split-dwarf-output) dwo="$3";; esac\n'
        "  shift\n"
        "done\n" + body + "\n"
    )
    script.chmod(0o755)
    return str(script)


def run_opt(
    index: ThinIndex, out: Path, clang: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        opt_command(MODULE, out, clang, *extra), cwd=index.root, capture_output=True, text=True
    )


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


@pytest.fixture(scope="module")
def debug_object(tmp_path_factory: pytest.TempPathFactory, llvm: Llvm) -> Path:
    """A genuine native object with (unsplit) debug information."""
    src = tmp_path_factory.mktemp("dbg") / "g.c"
    src.write_text("int g(int x) { return x * 2; }\n")
    subprocess.run([llvm.clang, "-O2", "-g", "-c", str(src), "-o", str(src.with_suffix(".o"))],
                   check=True)  # fmt: skip
    return src.with_suffix(".o")


FAILURES = {
    "exit-0-empty-object": (': > "$out"; exit 0', 1, "exited 0 but its output is empty (0 bytes)"),
    "exit-0-missing-object": ("exit 0", 1, "exited 0 but its output is missing"),
    "exit-0-garbage": ('printf "not an object at all" > "$out"; exit 0', 1,
                       "its output is not an ELF object (20 bytes)"),
    "exit-0-executable-not-object": ('cp /bin/true "$out"; exit 0', 1,
                                     "is an ELF file but not a relocatable object"),
    "status-passes-through": ('echo "fatal: backend broke" >&2; exit 3', 3,
                              "exited with status 3"),
    "killed-by-segv": ("kill -SEGV $$", 128 + signal.SIGSEGV, "was killed by signal 11"),
    "killed-by-kill": ('echo partial > "$out"; kill -KILL $$', 128 + signal.SIGKILL,
                       "was killed by signal 9"),
}  # fmt: skip


@pytest.mark.parametrize(("body", "status", "message"), FAILURES.values(), ids=FAILURES.keys())
def test_backend_failure_never_exits_0_nor_leaves_an_output(
    lua_thin_index: ThinIndex, tmp_path: Path, body: str, status: int, message: str
) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "lzio.opt.o"
    result = run_opt(lua_thin_index, out, fake_clang(tmp_path, body))
    assert result.returncode == status, result.stderr
    first_line = result.stderr.splitlines()[0]
    assert first_line.startswith(f"dist-lto opt: error: {MODULE}: ")
    assert message in first_line
    assert not out.exists()
    assert leftovers(out_dir) == []


def test_clang_stderr_is_shown_after_the_one_line_message(
    lua_thin_index: ThinIndex, tmp_path: Path
) -> None:
    clang = fake_clang(tmp_path, 'echo "error: out of memory in ThinLTO backend" >&2; exit 1')
    result = run_opt(lua_thin_index, tmp_path / "m.o", clang)
    assert result.returncode == 1
    assert result.stderr.splitlines()[1] == "error: out of memory in ThinLTO backend"


def test_truncated_object_is_caught(
    lua_thin_index: ThinIndex, tmp_path: Path, real_object: Path
) -> None:
    half = tmp_path / "half.o"
    half.write_bytes(real_object.read_bytes()[: real_object.stat().st_size // 2])
    result = run_opt(lua_thin_index, tmp_path / "m.o", fake_clang(tmp_path, f'cp {half} "$out"'))
    assert result.returncode == 1
    assert "its output is a truncated ELF object" in result.stderr
    assert not (tmp_path / "m.o").exists()


def test_success_renames_the_object_and_copies_clang_warnings(
    lua_thin_index: ThinIndex, tmp_path: Path, real_object: Path
) -> None:
    clang = fake_clang(tmp_path, f'echo "warning: something odd" >&2; cp {real_object} "$out"')
    out = tmp_path / "out" / "m.o"
    out.parent.mkdir()
    result = run_opt(lua_thin_index, out, clang)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "warning: something odd\n"
    assert out.read_bytes() == real_object.read_bytes()
    assert leftovers(out.parent) == []


def test_stale_output_is_removed_before_a_failing_run(
    lua_thin_index: ThinIndex, tmp_path: Path
) -> None:
    out = tmp_path / "m.o"
    out.write_bytes(b"from an earlier, successful run")
    result = run_opt(lua_thin_index, out, fake_clang(tmp_path, "exit 1"))
    assert result.returncode == 1
    assert not out.exists()


def test_dwo_is_created_empty_when_there_is_nothing_to_split(
    lua_thin_index: ThinIndex, tmp_path: Path, real_object: Path
) -> None:
    out, dwo = tmp_path / "m.o", tmp_path / "m.dwo"
    clang = fake_clang(tmp_path, f'cp {real_object} "$out"')
    result = run_opt(lua_thin_index, out, clang, "--dwo", str(dwo))
    assert result.returncode == 0, result.stderr
    assert out.exists()
    assert dwo.read_bytes() == b""


def test_dwo_written_by_clang_is_kept(
    lua_thin_index: ThinIndex, tmp_path: Path, debug_object: Path
) -> None:
    out, dwo = tmp_path / "m.o", tmp_path / "m.dwo"
    clang = fake_clang(tmp_path, f'cp {debug_object} "$out"; printf split-dwarf > "$dwo"')
    result = run_opt(lua_thin_index, out, clang, "--dwo", str(dwo))
    assert result.returncode == 0, result.stderr
    assert dwo.read_bytes() == b"split-dwarf"
    assert leftovers(tmp_path) == []


def test_missing_dwo_for_an_object_with_debug_information_fails(
    lua_thin_index: ThinIndex, tmp_path: Path, debug_object: Path
) -> None:
    out, dwo = tmp_path / "m.o", tmp_path / "m.dwo"
    clang = fake_clang(tmp_path, f'cp {debug_object} "$out"')
    result = run_opt(lua_thin_index, out, clang, "--dwo", str(dwo))
    assert result.returncode == 1
    assert "wrote no .dwo file" in result.stderr
    assert not out.exists()
    assert not dwo.exists()


def test_missing_compiler_is_bad_input(lua_thin_index: ThinIndex, tmp_path: Path) -> None:
    result = run_opt(lua_thin_index, tmp_path / "m.o", str(tmp_path / "no-such-clang"))
    assert result.returncode == 2
    assert "no-such-clang: cannot run" in result.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stopping_opt_stops_clang_and_leaves_nothing(
    lua_thin_index: ThinIndex, tmp_path: Path, sig: signal.Signals
) -> None:
    pid_file = tmp_path / "clang.pid"
    clang = fake_clang(tmp_path, f'echo $$ > {pid_file}; : > "$out"; exec sleep 30')
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    opt = subprocess.Popen(
        [*OPT, "--input", MODULE, "--index", f"{MODULE}.thinlto.bc", "--out",
         str(out_dir / "m.o"), "--", clang],
        cwd=lua_thin_index.root, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while not (pid_file.exists() and pid_file.read_text().strip()):
        assert time.monotonic() < deadline, "the fake clang never started"
        time.sleep(0.01)
    clang_pid = int(pid_file.read_text())
    opt.send_signal(sig)
    _, stderr = opt.communicate(timeout=20)
    assert opt.returncode == 128 + sig, stderr
    assert f"stopped by signal {int(sig)}" in stderr
    with pytest.raises(ProcessLookupError):
        os.kill(clang_pid, 0)
    assert list(out_dir.iterdir()) == []


def test_exit_status_mapping_follows_the_128_plus_n_convention() -> None:
    from dist_lto.process.children import action_status, describe_status, exit_status

    assert exit_status(0) == 0
    assert exit_status(3 << 8) == 3
    assert exit_status(signal.SIGKILL) == -9
    assert action_status(exit_status(signal.SIGKILL)) == 137
    assert describe_status(-9) == "was killed by signal 9 (Killed)"
    assert describe_status(2) == "exited with status 2"


def test_an_exit_status_of_137_is_not_a_signal() -> None:
    from dist_lto.process.children import action_status, describe_status, exit_status

    assert exit_status(137 << 8) == 137 and action_status(137) == 137
    assert describe_status(137) == "exited with status 137"


def test_compiler_given_as_a_bare_name_is_looked_up_on_path(
    lua_thin_index: ThinIndex, tmp_path: Path, real_object: Path
) -> None:
    # CLANG given as a bare name is looked up on PATH, as a shell would.
    fake_clang(tmp_path, f'cp {real_object} "$out"')
    shutil.move(tmp_path / "fake-clang", tmp_path / "clang-on-path")
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    result = subprocess.run(
        [*OPT, "--input", MODULE, "--index", f"{MODULE}.thinlto.bc", "--out",
         str(tmp_path / "m.o"), "--", "clang-on-path"],
        cwd=lua_thin_index.root, capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_output_directory_that_does_not_exist_is_bad_input(
    lua_thin_index: ThinIndex, tmp_path: Path, real_object: Path
) -> None:
    clang = fake_clang(tmp_path, f'cp {real_object} "$out"')
    result = run_opt(lua_thin_index, tmp_path / "missing" / "m.o", clang)
    assert result.returncode == 2
    assert "missing/m.o: its directory does not exist" in result.stderr


def test_backends_run_from_worker_threads_as_a_distributor_would(
    lua_thin_index: ThinIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from dist_lto.backend import check_primary, run_backend

    monkeypatch.chdir(lua_thin_index.root)  # module paths as the index step spelled them
    modules = lua_thin_index.build.objects[:4]

    def one(module: str) -> bytes:
        check_primary(module, f"{module}.thinlto.bc")
        return run_backend(
            [tool("clang"), "-c", "-x", "ir", module, f"-fthinlto-index={module}.thinlto.bc",
             "-O2"],
            module=module, output=str(tmp_path / Path(module).name),
        )  # fmt: skip

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(one, modules))
    for module in modules:
        assert (tmp_path / Path(module).name).stat().st_size > 1000


@pytest.mark.parametrize("both", [False, True], ids=["stderr-only", "stdout-and-stderr"])
def test_a_captured_stream_keeps_its_limit_and_the_child_still_ends_with_its_status(
    both: bool,
) -> None:
    """A child that prints a lot is read to its end, each captured stream kept up to the
    limit: memory stays bounded and the child never blocks on a full pipe (one stream is
    read in a plain loop, two through `poll`)."""
    from dist_lto.process import children

    script = ("import sys; sys.stderr.write('x' * (5 << 20)); sys.stdout.write('y' * 100);"
              " sys.exit(3)")  # fmt: skip
    done = children.run(["python3", "-c", script], limit=1000, cpu=True,
                        stdout=children.CAPTURE if both else children.DEVNULL)  # fmt: skip
    assert (done.status, done.stderr) == (3, b"x" * 1000)
    assert done.stdout == (b"y" * 100 if both else b"") and done.cpu > 0


@pytest.fixture
def scratch_and_out(
    lua_thin_index: ThinIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, Path]:
    """A caller's scratch directory and an empty output directory, in the index's root."""
    monkeypatch.chdir(lua_thin_index.root)
    scratch, out_dir = tmp_path / "scratch", tmp_path / "out"
    scratch.mkdir()
    out_dir.mkdir()
    return scratch, out_dir


@pytest.mark.parametrize("split", [False, True], ids=["object", "object-and-dwo"])
def test_a_scratch_directory_takes_the_temporaries_and_nothing_is_made_beside_the_outputs(
    scratch_and_out: tuple[Path, Path], tmp_path: Path, debug_object: Path, split: bool
) -> None:
    from dist_lto.backend import run_backend

    scratch, out_dir = scratch_and_out
    seen = tmp_path / "seen"
    body = f'cp {debug_object} "$out"; [ -z "$dwo" ] || printf split > "$dwo"; dirname "$out" $dwo'
    clang = fake_clang(tmp_path, f"{body} > {seen}; ls -A {out_dir} >> {seen}")
    out, dwo = out_dir / "m.o", out_dir / "m.dwo"
    run_backend([clang, "-c"], module=MODULE, output=str(out), dwo=str(dwo) if split else None,
                scratch=str(scratch))  # fmt: skip
    # clang wrote there, and the outputs' directory was empty meanwhile
    assert seen.read_text() == f"{scratch}\n" * (2 if split else 1)
    assert out.read_bytes() == debug_object.read_bytes()
    assert sorted(os.listdir(out_dir)) == (["m.dwo", "m.o"] if split else ["m.o"])
    assert not split or dwo.read_bytes() == b"split"
    assert os.listdir(scratch) == []


def test_a_failed_backend_leaves_nothing_in_the_scratch_directory_but_what_was_there(
    scratch_and_out: tuple[Path, Path], tmp_path: Path
) -> None:
    from dist_lto.backend import BackendFailed, run_backend

    scratch, out_dir = scratch_and_out
    (scratch / "another-backend.o").write_bytes(b"not ours")
    # As a clang killed mid-write leaves them: its own temporary, and a partial object.
    clang = fake_clang(
        tmp_path, 'echo partial > "${out%.o}-1a2b3c4d.o.tmp"; echo partial > "$out"; exit 1'
    )
    with pytest.raises(BackendFailed):
        run_backend([clang, "-c"], module=MODULE, output=str(out_dir / "m.o"), scratch=str(scratch))
    assert os.listdir(out_dir) == []
    assert os.listdir(scratch) == ["another-backend.o"]
