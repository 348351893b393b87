"""Writers never destroy what is not theirs: an output path that exists as a character
device, a FIFO or a symbolic link is written through (as clang and `cp` do), never
replaced by a rename; what cannot be written either way is refused in one line.

Device nodes are made with `os.mknod` (the suite runs as root, as CI does); a node
made like `/dev/null` (major 1, minor 3) stands for it so that a failure here cannot
break the machine.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from dist_lto.errors import BadInput
from dist_lto.fsutil import atomic_output, write_atomic, writes_through
from dist_lto.whole_files import WholeWriter
from support.links import DtltoLink, upstream_plan_link
from support.opt_command import opt_command
from support.tools import Llvm, run_cli

NULL = os.makedev(1, 3)
NO_SUCH_DISK = os.makedev(250, 250)
"""A block device number no driver answers: were it ever written, nothing happens."""


def null_node(path: Path) -> Path:
    os.mknod(path, 0o666 | stat.S_IFCHR, NULL)
    return path


def is_null_node(path: Path) -> bool:
    info = os.lstat(path)
    return stat.S_ISCHR(info.st_mode) and info.st_rdev == NULL


# ---------------------------------------------------------------------------------
# The shared writers


def test_a_device_output_stays_the_device(tmp_path: Path) -> None:
    out = null_node(tmp_path / "out")
    write_atomic(str(out), b"data")
    assert is_null_node(out)
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_a_fifo_output_is_written_through_to_its_reader(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        write_atomic(str(fifo), b"through the pipe")
        assert os.read(reader, 100) == b"through the pipe"
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_fifo_nobody_reads_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(BadInput, match="FIFO that nobody reads"):
        write_atomic(str(fifo), b"x")
    assert sorted(os.listdir(tmp_path)) == ["fifo"]


def test_a_symlink_output_is_written_through_and_stays_a_link(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"old content, longer than the new")
    link = tmp_path / "link"
    link.symlink_to("target")
    write_atomic(str(link), b"new")
    assert link.is_symlink() and os.readlink(link) == "target"
    assert target.read_bytes() == b"new"


def test_a_link_to_nothing_a_block_device_and_a_socket_are_refused(tmp_path: Path) -> None:
    (tmp_path / "dangling").symlink_to("nowhere")
    os.mknod(tmp_path / "disk", 0o600 | stat.S_IFBLK, NO_SUCH_DISK)
    import socket

    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    for name, problem in [("dangling", "symbolic link to nothing"), ("disk", "block device"),
                          ("sock", "socket")]:  # fmt: skip
        with pytest.raises(BadInput, match=problem):
            write_atomic(str(tmp_path / name), b"x")
    sock.close()
    assert not (tmp_path / "nowhere").exists()
    assert stat.S_ISBLK(os.lstat(tmp_path / "disk").st_mode)


def test_a_refused_output_is_refused_before_any_work(tmp_path: Path) -> None:
    (tmp_path / "dangling").symlink_to("nowhere")
    with pytest.raises(BadInput), atomic_output(str(tmp_path / "dangling")):
        pytest.fail("the body ran")


def test_only_existing_regular_files_and_absent_paths_are_renamed_onto(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    assert not writes_through(str(tmp_path / "file"))
    assert not writes_through(str(tmp_path / "absent"))
    assert writes_through(str(null_node(tmp_path / "null")))


def test_the_plan_writer_writes_through_a_device_and_replaces_a_file(tmp_path: Path) -> None:
    null_node(tmp_path / "0.json")
    (tmp_path / "1.json").write_bytes(b"old")
    writer = WholeWriter()
    try:
        writer.write(f"{tmp_path}/0.json", b"{}")
        writer.write(f"{tmp_path}/1.json", b"{}")
    finally:
        writer.close()
    assert is_null_node(tmp_path / "0.json")
    assert (tmp_path / "1.json").read_bytes() == b"{}"
    assert sorted(os.listdir(tmp_path)) == ["0.json", "1.json"]


# ---------------------------------------------------------------------------------
# The commands, with real tools


@pytest.fixture
def indexed_module(tmp_path: Path, llvm: Llvm) -> Path:
    """One bitcode module `m.o` (in the returned directory) with LLD 22's index beside it."""
    (tmp_path / "m.c").write_text("int main(void) { return 0; }\n")
    subprocess.run([llvm.clang, "-O2", "-flto=thin", "-c", "m.c"], cwd=tmp_path, check=True)
    subprocess.run([llvm.clang, "-flto=thin", "-fuse-ld=lld", "m.o", "-o", "m",
                    "-Wl,--thinlto-index-only"], cwd=tmp_path, check=True)  # fmt: skip
    return tmp_path


def test_opt_onto_a_device_node_leaves_the_device(indexed_module: Path, llvm: Llvm) -> None:
    out = null_node(indexed_module / "m.opt.o")
    done = subprocess.run(opt_command("m.o", out.name, llvm.clang), cwd=indexed_module,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert is_null_node(out)


def test_opt_through_a_link_to_its_stdout_writes_the_object_there(
    indexed_module: Path, llvm: Llvm
) -> None:
    link = indexed_module / "m.opt.o"
    link.symlink_to("/proc/self/fd/1")
    done = subprocess.run(opt_command("m.o", link.name, llvm.clang), cwd=indexed_module,
                          capture_output=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b"\x7fELF")
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"


def test_opt_onto_a_fifo_nobody_reads_fails_at_once_in_one_line(
    indexed_module: Path, llvm: Llvm
) -> None:
    os.mkfifo(indexed_module / "m.opt.o")
    done = subprocess.run(opt_command("m.o", "m.opt.o", llvm.clang), cwd=indexed_module,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "dist-lto opt: error: m.opt.o: is a FIFO that nobody reads: writing it would block"
    ]


def test_distribute_trace_onto_a_device_leaves_the_device(
    tmp_path: Path, small_dtlto: DtltoLink
) -> None:
    root = small_dtlto.clone(tmp_path / "link")
    trace = null_node(root / "full")
    done = run_cli(["distribute", "--no-cache", "--quiet", f"--trace={trace.name}",
                    small_dtlto.job_file], cwd=root)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert is_null_node(trace)


def test_inspect_outputs_onto_devices_leave_the_devices(captured: Path) -> None:
    outputs = [null_node(captured / name) for name in ("g.dot", "g.svg", "g.html")]
    done = run_cli(["inspect", "meta.json", "--dot", "g.dot", "--svg", "g.svg",
                    "--html", "g.html"], cwd=captured)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert all(is_null_node(path) for path in outputs)


def test_plan_onto_device_outputs_leaves_the_devices(captured: Path) -> None:
    outputs = [captured / "out" / "plans" / "0.json", captured / "out" / "link-plan.json",
               captured / "out" / "final-link.args"]  # fmt: skip
    for path in outputs:
        path.unlink()
        null_node(path)
    done = run_cli(["plan", "--replay", "meta.json"], cwd=captured)
    assert done.returncode == 0, done.stderr
    assert all(is_null_node(path) for path in outputs)


# ---------------------------------------------------------------------------------
# No output is an input, no two outputs one path: refused before any work


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_upstream_plan_of_the_sample_link_succeeds(tmp_path: Path, llvm: Llvm) -> None:
    done = run_cli(upstream_plan_link(tmp_path, llvm), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "main.plan").exists() and (tmp_path / "lp.json").exists()


@pytest.mark.parametrize(
    ("option", "value", "collides"),
    [("--link-plan", "up.meta", "--meta"),
     ("--final-link-index", "./main.o", "object 0 (line 1)"),
     ("--link-plan", "x.thinlto_index_argsfile", "the index argument file"),
     ("--final-link-index", "out/f.plan", "the plan of object 1 (line 8)"),
     ("--link-plan", "fli", "--final-link-index")],
)  # fmt: skip
def test_upstream_plan_refuses_an_output_at_an_input_or_another_output(
    tmp_path: Path, llvm: Llvm, option: str, value: str, collides: str
) -> None:
    args = upstream_plan_link(tmp_path, llvm)
    args[args.index(option) + 1] = value
    before = snapshot(tmp_path)
    done = run_cli(args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "names the same file as" in line and collides in line, line
    assert snapshot(tmp_path) == before


def test_distribute_refuses_a_trace_at_its_job_file_an_input_or_an_output(
    tmp_path: Path, small_dtlto: DtltoLink
) -> None:
    root = small_dtlto.clone(tmp_path / "link")
    job = json.loads((root / small_dtlto.job_file).read_text())["jobs"][0]
    for trace, collides in [(small_dtlto.job_file, "the job file"),
                            (job["inputs"][0], "an input of job"),
                            (job["outputs"][0], "an output of job")]:  # fmt: skip
        before = snapshot(root)
        done = run_cli(["distribute", "--no-cache", "--quiet", f"--trace=./{trace}",
                        small_dtlto.job_file], cwd=root)  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert f"names the same file as {collides}" in done.stderr
        assert snapshot(root) == before


def test_inspect_refuses_an_output_at_its_meta_or_another_output(captured: Path) -> None:
    before = snapshot(captured)
    for args in (["--dot", "meta.json"], ["--svg", "g", "--html", "./g"]):
        done = run_cli(["inspect", "meta.json", *args], cwd=captured)
        assert done.returncode == 2, done.stderr
        assert "names the same file as" in done.stderr
    assert snapshot(captured) == before
