"""The backend contract (`backend.run_backend`) against compilers faked with
pytest-subprocess: what real clang cannot be made to do on demand.

A distributor gives `run_backend` its own runner (the contract every runner must keep:
start the compiler, report its `exit_status` and stderr); this runner starts it with
`subprocess`, which pytest-subprocess replaces, so a fake compiler can write exactly
the bytes a test chooses and then exit, or die by a signal, at a chosen moment.
`dist-lto opt` itself starts clang with `os.posix_spawn`, beyond pytest-subprocess:
tests/test_backend_run.py fakes executables for that path, and tests/test_opt_real.py
runs real clang.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from dist_lto.backend import BackendFailed, run_backend
from pytest_subprocess import FakeProcess
from pytest_subprocess.fake_popen import FakePopen

CLANG = "/opt/fake/bin/clang"
COMMAND = [CLANG, "-c", "-x", "ir", "obj/m.o", "-fthinlto-index=obj/m.o.thinlto.bc", "-O2"]


def subprocess_runner(argv: list[str], on_start: Callable[[int], None] | None) -> tuple[int, bytes]:
    """A distributor's runner: the compiler's `exit_status` (-N for signal N) and stderr."""
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE)
    if on_start is not None:
        on_start(proc.pid)
    _, stderr = proc.communicate()
    return proc.returncode, stderr


def _flag_value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def writes(data: bytes, dwo: bytes | None = None) -> Callable[[FakePopen], None]:
    """A compiler body that writes `data` at its `-o` (and `dwo` at its split-DWARF
    output) before it exits."""

    def body(process: FakePopen) -> None:
        args = [str(a) for a in process.args]
        Path(_flag_value(args, "-o")).write_bytes(data)
        if dwo is not None:
            Path(args[args.index("-split-dwarf-output") + 2]).write_bytes(dwo)

    return body


@pytest.fixture
def object_bytes(real_object: Path) -> bytes:
    return real_object.read_bytes()


def run(tmp_path: Path, dwo: bool = False) -> bytes:
    out = tmp_path / "out" / "m.opt.o"
    out.parent.mkdir(exist_ok=True)
    return run_backend(
        COMMAND, module="obj/m.o", output=str(out), runner=subprocess_runner,
        dwo=str(out.with_suffix(".dwo")) if dwo else None,
    )  # fmt: skip


def nothing_left(tmp_path: Path) -> bool:
    return list((tmp_path / "out").iterdir()) == []


EXIT_0_WRONG_OBJECT = {
    "empty": (lambda obj: b"", "exited 0 but its output is empty (0 bytes)"),
    "garbage": (lambda obj: b"not an object", "its output is not an ELF object (13 bytes)"),
    "cut-short": (lambda obj: obj[: len(obj) // 2], "its output is a truncated ELF object"),
    "an-executable": (lambda obj: obj[:16] + b"\x02\x00" + obj[18:],
                      "its output is an ELF file but not a relocatable object"),
}  # fmt: skip


@pytest.mark.parametrize(("damage", "message"), EXIT_0_WRONG_OBJECT.values(),
                         ids=EXIT_0_WRONG_OBJECT.keys())  # fmt: skip
def test_a_compiler_exiting_0_with_a_wrong_object_fails_and_leaves_nothing(
    fp: FakeProcess, tmp_path: Path, object_bytes: bytes,
    damage: Callable[[bytes], bytes], message: str,
) -> None:  # fmt: skip
    fp.register([CLANG, fp.any()], callback=writes(damage(object_bytes)), returncode=0)
    with pytest.raises(BackendFailed) as failed:
        run(tmp_path)
    assert failed.value.status == 1
    assert failed.value.message.startswith(f"obj/m.o: {CLANG} ")
    assert message in failed.value.message
    assert nothing_left(tmp_path)


def test_a_compiler_exiting_0_without_any_output_fails(fp: FakeProcess, tmp_path: Path) -> None:
    fp.register([CLANG, fp.any()], returncode=0, stderr=b"warning: nothing written\n")
    with pytest.raises(BackendFailed) as failed:
        run(tmp_path)
    assert "exited 0 but its output is missing" in failed.value.message
    assert failed.value.detail == "warning: nothing written\n"
    assert nothing_left(tmp_path)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV])
def test_a_compiler_killed_after_writing_a_whole_object_fails_with_128_plus_n(
    fp: FakeProcess, tmp_path: Path, object_bytes: bytes, sig: signal.Signals
) -> None:
    """The object at the temporary name is complete and valid: only the status says
    the compiler did not finish, and that decides."""
    fp.register([CLANG, fp.any()], callback=writes(object_bytes, dwo=b"split"), returncode=-sig)
    with pytest.raises(BackendFailed) as failed:
        run(tmp_path, dwo=True)
    assert failed.value.status == 128 + sig
    assert f"was killed by signal {int(sig)}" in failed.value.message
    assert nothing_left(tmp_path)


def test_a_compiler_that_succeeds_gets_its_object_and_dwo_renamed_into_place(
    fp: FakeProcess, tmp_path: Path, object_bytes: bytes
) -> None:
    fp.register([CLANG, fp.any()], callback=writes(object_bytes, dwo=b"split"), returncode=0,
                stderr=b"warning: odd\n")  # fmt: skip
    assert run(tmp_path, dwo=True) == b"warning: odd\n"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["m.opt.dwo", "m.opt.o"]
    assert (tmp_path / "out" / "m.opt.o").read_bytes() == object_bytes
    (call,) = fp.calls
    args = [str(a) for a in call]
    # The compiler writes private temporaries; the final names appear only on success.
    assert _flag_value(args, "-o") != str(tmp_path / "out" / "m.opt.o")
    assert args[args.index("-split-dwarf-file") + 2] == str(tmp_path / "out" / "m.opt.dwo")
