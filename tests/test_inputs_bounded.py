"""Readers are bounded: a FIFO or a character device where a file is read (an index, an
argument file, a meta file, a job file, a job's input) fails at once with one line;
nothing waits on a FIFO or reads a device without end.

The FIFOs have no writer (a read would block for ever) and the devices are made like
`/dev/zero` (major 1, minor 5: a read never ends); every run has a timeout, so a
reader that is not bounded fails the test instead of hanging it.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from dist_lto.errors import BadInput
from dist_lto.upstream.formats import read_argsfile, read_upstream_meta
from support.links import DtltoLink
from support.opt_command import opt_command
from support.tools import Llvm

ZERO = os.makedev(1, 5)
TIMEOUT = 60


def zero_node(path: Path) -> Path:
    os.mknod(path, 0o666 | stat.S_IFCHR, ZERO)
    return path


def replace_with(path: Path, kind: str) -> None:
    """Put a FIFO (no writer) or a `/dev/zero`-like device where the file `path` was."""
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        zero_node(path)


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)


def one_error_line(done: subprocess.CompletedProcess[str], path: str) -> str:
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"{path}: is a " in line and "only regular files are read" in line, line
    return line


@pytest.fixture
def indexed_module(tmp_path: Path, llvm: Llvm) -> Path:
    """One bitcode module `m.o` (in the returned directory) with LLD 22's index beside
    it and a link flags file `flags`."""
    (tmp_path / "m.c").write_text("int main(void) { return 0; }\n")
    subprocess.run([llvm.clang, "-O2", "-flto=thin", "-c", "m.c"], cwd=tmp_path, check=True)
    subprocess.run([llvm.clang, "-flto=thin", "-fuse-ld=lld", "m.o", "-o", "m",
                    "-Wl,--thinlto-index-only"], cwd=tmp_path, check=True)  # fmt: skip
    (tmp_path / "flags").write_text("-O2\n")
    return tmp_path


@pytest.mark.parametrize("kind", ["fifo", "device"])
@pytest.mark.parametrize("which", ["m.o", "m.o.thinlto.bc", "flags"])
def test_opt_refuses_a_fifo_or_device_input_at_once(
    indexed_module: Path, llvm: Llvm, which: str, kind: str
) -> None:
    replace_with(indexed_module / which, kind)
    done = run(opt_command("m.o", "m.opt.o", llvm.clang, "--args", "flags"), indexed_module)
    one_error_line(done, which)
    assert not (indexed_module / "m.opt.o").exists()


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_plan_refuses_a_fifo_or_device_meta_file_at_once(captured: Path, kind: str) -> None:
    replace_with(captured / "meta.json", kind)
    done = run([sys.executable, "-m", "dist_lto", "plan", "--replay", "meta.json"], captured)
    one_error_line(done, "meta.json")


@pytest.mark.parametrize("kind", ["fifo", "device"])
@pytest.mark.parametrize("which", ["job file", "module", "index", "imported module"])
def test_distribute_refuses_a_fifo_or_device_job_file_or_input_at_once(
    tmp_path: Path, small_dtlto: DtltoLink, which: str, kind: str
) -> None:
    root = small_dtlto.clone(tmp_path / "link")
    job = json.loads((root / small_dtlto.job_file).read_text())["jobs"][0]
    path = {"job file": small_dtlto.job_file, "module": job["inputs"][0],
            "index": job["inputs"][1], "imported module": job["inputs"][-1]}[which]  # fmt: skip
    replace_with(root / path, kind)
    done = run([sys.executable, "-m", "dist_lto", "distribute", "--quiet", "--no-cache",
                small_dtlto.job_file], root)  # fmt: skip
    one_error_line(done, path)
    assert not list(root.glob("*.native.o"))


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_upstream_meta_and_argument_file_readers_refuse_a_fifo_or_device(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "file"
    path.write_text("")
    replace_with(path, kind)
    for read in (read_upstream_meta, read_argsfile):
        with pytest.raises(BadInput, match="only regular files are read"):
            read(str(path))
