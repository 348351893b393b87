"""Bugs the reliability campaign (fuzz/fuzz.py, the kill tests) found, one test each.

Each test is the smallest input that showed the bug, run the way users run the tool;
real clang and LLD where the behaviour depends on them, a fake compiler only where
real clang cannot be made to misbehave on demand.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from dist_lto.errors import DistLtoError
from dist_lto.formats.plans import PLAN_VERSION
from dist_lto.llvm.bitcode import parse_index
from dist_lto.llvm.toolchain import tool
from dist_lto.process import children
from support import workloads
from support.links import ThinIndex
from support.tools import REPO, Llvm, run_cli
from test_backend_index import BitWriter, write_index

OPT = [sys.executable, "-S", "-E", str(REPO / "tools" / "dist_lto" / "__main__.py"), "opt"]
MODULE = "obj/lzio.o"
"""A Lua module that imports nothing, so it can be compiled on its own."""


@pytest.fixture
def lzio(tmp_path: Path, lua_thin_index: ThinIndex) -> Path:
    """A private copy of one module and its index, spelled `obj/lzio.o` from the returned
    directory (a failing fix must not damage the shared fixture)."""
    work = tmp_path / "w"
    (work / "obj").mkdir(parents=True)
    for name in (MODULE, f"{MODULE}.thinlto.bc"):
        shutil.copy(lua_thin_index.root / name, work / name)
    (work / "out").mkdir()
    return work


def opt(work: Path, out: str, *extra: str, clang: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*OPT, "--input", MODULE, "--index", f"{MODULE}.thinlto.bc", "--out", out, *extra, "--",
         clang or tool("clang")],
        cwd=work, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


# ---------------------------------------------------------------------------------
# opt and the backend runner


@pytest.mark.parametrize("out", ["out", "out/", ".", "out/."])
def test_opt_output_naming_a_directory_is_bad_input(lzio: Path, out: str) -> None:
    result = opt(lzio, out)
    assert result.returncode == 2, result.stderr
    assert "is a directory" in result.stderr
    assert "internal error" not in result.stderr
    assert sorted(p.name for p in lzio.iterdir()) == ["obj", "out"]
    assert list((lzio / "out").iterdir()) == []


def test_index_whose_module_table_holds_a_nul_is_bad_input(lzio: Path) -> None:
    index = write_index([(b"obj/lz\0io.o", "fixed8"), (b"obj/other.o", "fixed8")], skip=False,
                        width=4, junk=False)  # fmt: skip
    (lzio / f"{MODULE}.thinlto.bc").write_bytes(index)
    result = opt(lzio, "out/m.o")
    assert result.returncode == 2, result.stderr
    assert f"module {MODULE!r} is not in this index" in result.stderr
    assert list((lzio / "out").iterdir()) == []


@pytest.mark.parametrize("count", [1 << 20, 1 << 40])
def test_array_of_zero_width_elements_is_rejected_not_allocated(count: int) -> None:
    """An array whose elements are Fixed(0) reads no bits per element, so its count is
    unbounded by the file's size: 2**40 raised MemoryError, 2**27 took 38 s. LLVM reads
    a zero-width operand as the literal 0, which an array may not hold."""
    w = BitWriter()
    w.enter(8, 3)
    w.enter(19, 4)
    w.emit(2, 4)  # DEFINE_ABBREV [literal 1, array of fixed(0)]
    w.vbr(3, 5)
    w.emit(1, 1)
    w.vbr(1, 8)
    w.emit(0, 1)
    w.emit(3, 3)
    w.emit(0, 1)
    w.emit(1, 3)
    w.vbr(0, 5)
    w.emit(4, 4)  # a record using it
    w.vbr(count, 6)
    w.end()
    w.end()
    with pytest.raises(ValueError, match="array of literals"):
        parse_index(w.data())


def stray_temporary_compiler(tmp_path: Path) -> str:
    """A compiler that does what clang does when a stop signal catches it while it writes:
    leaves its own temporary (`<-o>-XXXXXXXX.tmp`) beside its output, and fails."""
    script = tmp_path / "stray-clang"
    script.write_text(
        "#!/bin/sh\n"
        'out=""\n'
        'while [ $# -gt 0 ]; do [ "$1" = -o ] && out="$2"; shift; done\n'
        'printf partial > "$out-0123abcd.tmp"\n'
        "kill -TERM $$\n"
    )
    script.chmod(0o755)
    return str(script)


def test_opt_leaves_nothing_beside_its_output_when_clang_dies_writing(
    lzio: Path, tmp_path: Path
) -> None:
    result = opt(lzio, "out/m.o", clang=stray_temporary_compiler(tmp_path))
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    assert list((lzio / "out").iterdir()) == []


def test_distribute_leaves_nothing_beside_its_outputs_when_a_compiler_dies_writing(
    lzio: Path, tmp_path: Path, dist_lto_cmd: list[str]
) -> None:
    job = {
        "common": {"linker_output": "prog", "inputs": [],
                   "args": [stray_temporary_compiler(tmp_path), "-c", "-O2"]},
        "jobs": [{"args": [MODULE, f"-fthinlto-index={MODULE}.thinlto.bc", "-o", "out/m.o"],
                  "inputs": [MODULE, f"{MODULE}.thinlto.bc"], "outputs": ["out/m.o"]}],
    }  # fmt: skip
    (lzio / "job.json").write_text(json.dumps(job))
    result = subprocess.run([*dist_lto_cmd, "distribute", "--no-cache", "job.json"], cwd=lzio,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    assert list((lzio / "out").iterdir()) == []


def test_stop_signal_arriving_while_clang_is_spawned_stops_it_and_fails_cleanly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stop signal that reaches `opt` before `posix_spawn` has returned the pid used to
    escape as a traceback and leave clang running (seen as a flaky
    test_stopping_opt_stops_clang_and_leaves_nothing). The signal lands exactly there."""
    spawned: list[int] = []
    real_spawn = os.posix_spawn

    def spawn_then_signal(*args: object, **kwargs: object) -> int:
        pid = real_spawn(*args, **kwargs)  # type: ignore[arg-type]
        spawned.append(pid)
        os.kill(os.getpid(), signal.SIGTERM)
        return pid

    monkeypatch.setattr(os, "posix_spawn", spawn_then_signal)
    try:
        with pytest.raises(DistLtoError) as failure:
            children.run_tool(["/bin/sleep", "30"])
        assert failure.value.status == 128 + signal.SIGTERM
        with pytest.raises(ChildProcessError):
            os.waitpid(spawned[0], os.WNOHANG)  # stopped and reaped
    finally:
        for pid in spawned:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)


def test_link_flags_file_with_a_nul_byte_is_bad_input(lzio: Path) -> None:
    (lzio / "link.args").write_bytes(b"-O2\n-march=x86-64\0-v3\n")
    result = opt(lzio, "out/m.o", "--args", "link.args")
    assert result.returncode == 2, result.stderr
    assert "link.args: line 2: NUL character in an argument" in result.stderr
    assert list((lzio / "out").iterdir()) == []


@pytest.mark.parametrize(
    ("out", "extra", "named"),
    [(MODULE, [], "--input"), (f"{MODULE}.thinlto.bc", [], "--index"),
     ("./obj/../link.args", ["--args", "link.args"], "--args"),
     ("out/m.o", ["--dwo", "out/./m.o"], "--out")],
)  # fmt: skip
def test_opt_output_naming_one_of_its_inputs_is_refused_before_removing_it(
    lzio: Path, out: str, extra: list[str], named: str
) -> None:
    (lzio / "link.args").write_text("-O2\n")
    before = {p: p.read_bytes() for p in lzio.rglob("*") if p.is_file()}
    result = opt(lzio, out, *extra)
    assert result.returncode == 2, result.stderr
    assert f"names the same file as {named}" in result.stderr
    assert {p: p.read_bytes() for p in lzio.rglob("*") if p.is_file()} == before


# ---------------------------------------------------------------------------------
# prepare


@pytest.fixture
def archive_dir(tmp_path: Path, lua_objects: workloads.Build, llvm: Llvm) -> Path:
    """`in/lib.a`, a small real archive of Lua bitcode objects, under the returned directory."""
    work = tmp_path / "p"
    (work / "in").mkdir(parents=True)
    members = [str(lua_objects.root / o) for o in lua_objects.library[:3]]
    subprocess.run([llvm.ar, "rcs", str(work / "in" / "lib.a"), *members], check=True)
    return work


@pytest.mark.parametrize(
    ("objects", "manifest", "problem"),
    [("out/objects", "in/lib.a", "the manifest would overwrite the archive"),
     ("out/objects", "in/../in/lib.a", "the manifest would overwrite the archive"),
     ("out/objects", "out", "the objects directory would be inside the manifest"),
     ("out/m.json/objects", "out/m.json", "the objects directory would be inside the manifest")],
)  # fmt: skip
def test_prepare_outputs_that_name_the_archive_or_hold_each_other_are_bad_input(
    archive_dir: Path, objects: str, manifest: str, problem: str
) -> None:
    archive = (archive_dir / "in" / "lib.a").read_bytes()
    result = run_cli(["prepare", "--archive", "in/lib.a", "--objects-out", objects,
                      "--manifest-out", manifest], cwd=archive_dir)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert problem in result.stderr
    assert (archive_dir / "in" / "lib.a").read_bytes() == archive
    assert sorted(p.name for p in archive_dir.iterdir()) == ["in"]


# ---------------------------------------------------------------------------------
# plan

SMALL = {
    "main.c": "int twice(int);\nint main(int c, char **v) { (void)v; return twice(c) - 2; }\n",
    "twice.c": "int twice(int x) { return x + x; }\n",
}


@pytest.fixture(scope="module")
def small_objects(tmp_path_factory: pytest.TempPathFactory, llvm: Llvm) -> Path:
    """Two ThinLTO bitcode objects, `obj/main.o` and `obj/twice.o` (read-only)."""
    root = tmp_path_factory.mktemp("small")
    (root / "obj").mkdir()
    for name, text in SMALL.items():
        (root / name).write_text(text)
        subprocess.run([llvm.clang, "-O2", "-flto=thin", "-c", name, "-o", f"obj/{name[:-2]}.o"],
                       cwd=root, check=True)  # fmt: skip
    return root


def small_meta(**changes: str) -> dict[str, object]:
    objects = [
        {"kind": "object", "index": i, "path": f"obj/{name}.o",
         "index_output": f"out/index/obj/{name}.o.thinlto.bc", "plan_output": f"out/plans/{i}.json",
         "opt_output": f"out/opt/{i}.o"}
        for i, name in enumerate(("main", "twice"))
    ]  # fmt: skip
    meta: dict[str, object] = {
        "version": 1, "index_dir": "out/index", "link_plan_output": "out/link-plan.json",
        "final_link_args_output": "out/final-link.args", "groups": [{"linkables": objects}],
    }  # fmt: skip
    for key, value in changes.items():
        if key in meta:
            meta[key] = value
        else:
            objects[0][key] = value
    return meta


def plan_small(work: Path, small_objects: Path, meta: dict[str, object]
               ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    shutil.copytree(small_objects / "obj", work / "obj")
    (work / "meta.json").write_text(json.dumps(meta))
    return run_cli(["plan", "meta.json", "--", tool("clang"), "-fuse-ld=lld", "-O2", "-o", "app"],
                   cwd=work)  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "pointer"),
    [({"final_link_args_output": "out/final-link.args/"}, "/final_link_args_output"),
     ({"link_plan_output": "out/link-plan.json/.."}, "/link_plan_output"),
     ({"plan_output": "out/plans/."}, "/groups/0/linkables/0/plan_output")],
)  # fmt: skip
def test_plan_file_output_spelled_as_a_directory_is_bad_input(
    tmp_path: Path, small_objects: Path, changes: dict[str, str], pointer: str
) -> None:
    result = plan_small(tmp_path, small_objects, small_meta(**changes))
    assert result.returncode == 2, result.stderr
    assert f"meta.json: {pointer}: " in result.stderr and "names a directory" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("changes", "pointer"),
    [({"link_plan_output": "obj/twice.o"}, "/link_plan_output"),
     ({"index_output": "./obj/main.o"}, "/groups/0/linkables/0/index_output"),
     ({"plan_output": "meta.json"}, "/groups/0/linkables/0/plan_output")],
)  # fmt: skip
def test_plan_output_naming_an_input_is_bad_input_and_leaves_it_alone(
    tmp_path: Path, small_objects: Path, changes: dict[str, str], pointer: str
) -> None:
    result = plan_small(tmp_path, small_objects, small_meta(**changes))
    assert result.returncode == 2, result.stderr
    assert f"meta.json: {pointer}: " in result.stderr and "is an input" in result.stderr
    for name in ("main.o", "twice.o"):
        assert (tmp_path / "obj" / name).read_bytes() == (small_objects / "obj" / name).read_bytes()
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("changes", "status", "problem"),
    [({"plan_output": "obj/main.o/0.json"}, 2, "cannot write: "),
     ({"final_link_args_output": "/sys/dist-lto-fuzz.args"}, 1, "cannot write: Permission denied")],
)  # fmt: skip
def test_plan_output_that_cannot_be_written_fails_in_one_line_leaving_no_plans(
    tmp_path: Path, small_objects: Path, changes: dict[str, str], status: int, problem: str
) -> None:
    result = plan_small(tmp_path, small_objects, small_meta(**changes))
    assert result.returncode == status, result.stderr
    assert problem in result.stderr and "internal error" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "link-plan.json").exists()
    assert not list((tmp_path / "out").glob("plans/*"))


def test_plan_replay_with_an_imports_file_that_is_a_directory_is_bad_input(
    tmp_path: Path, small_objects: Path
) -> None:
    assert plan_small(tmp_path, small_objects, small_meta()).returncode == 0
    imports = tmp_path / "out" / "index" / "obj" / "twice.o.imports"
    imports.unlink()
    imports.mkdir()
    shutil.rmtree(tmp_path / "out" / "plans")
    (tmp_path / "out" / "link-plan.json").unlink()
    result = run_cli(["plan", "--replay", "meta.json"], cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "twice.o.imports: cannot read the imports file: Is a directory" in result.stderr
    assert not (tmp_path / "out" / "plans").exists()


# ---------------------------------------------------------------------------------
# distribute


@pytest.mark.parametrize("output", ["bin/clang", "./bin/clang", "job.json", "in/../main.o"])
def test_job_output_naming_the_compiler_the_job_file_or_an_input_is_refused(
    tmp_path: Path, output: str, dist_lto_cmd: list[str]
) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "clang").symlink_to(tool("clang"))
    (tmp_path / "main.o").write_bytes(b"BC\xc0\xde")
    job = {
        "common": {"linker_output": "prog", "inputs": [], "args": ["bin/clang", "-c", "-O2"]},
        "jobs": [{"args": ["main.o", "-fthinlto-index=main.bc", "-o", "main.native.o"],
                  "inputs": ["main.o", "main.bc"], "outputs": ["main.native.o", output]}],
    }  # fmt: skip
    (tmp_path / "job.json").write_text(json.dumps(job))
    before = sorted(p.name for p in tmp_path.rglob("*"))
    result = subprocess.run([*dist_lto_cmd, "distribute", "--no-cache", "job.json"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "job.json: /jobs/0/outputs/1: " in result.stderr and "is also" in result.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_prepare_killed_while_extracting_leaves_the_objects_directory_empty_and_reruns(
    archive_dir: Path,
) -> None:
    """Killed after two of three members, prepare left them in the objects directory,
    and every rerun failed: "objects directory is not empty"."""
    (archive_dir / "out" / "objects").mkdir(parents=True)
    argv = ["prepare", "--archive", "in/lib.a", "--objects-out", "out/objects",
            "--manifest-out", "out/lib.json"]  # fmt: skip
    killed_on_third_member = (
        "import os, signal, sys\n"
        "from dist_lto import cli\n"
        "from dist_lto.archive.reader import RegularArchive\n"
        "copy, done = RegularArchive.copy_to, []\n"
        "def copy_to(self, member, fd):\n"
        "    done.append(member)\n"
        "    if len(done) == 3:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    copy(self, member, fd)\n"
        "RegularArchive.copy_to = copy_to\n"
        f"sys.exit(cli.main({argv!r}))\n"
    )
    killed = subprocess.run([sys.executable, "-c", killed_on_third_member], cwd=archive_dir)
    assert killed.returncode == -signal.SIGKILL
    assert list((archive_dir / "out" / "objects").iterdir()) == []
    assert not (archive_dir / "out" / "lib.json").exists()
    rerun = run_cli(argv, cwd=archive_dir)
    assert rerun.returncode == 0, rerun.stderr
    assert len(list((archive_dir / "out" / "objects").iterdir())) == 3


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_plan_killed_while_writing_plans_leaves_none_empty_and_reruns(
    tmp_path: Path, jobs: str
) -> None:
    """Object plans were created at their paths and then written: a kill in between (at
    scale, every kill during the writing) left an empty plan at a declared path."""
    from support import synthetic_link as plan_bench

    plan_bench.generate(tmp_path, 400)
    argv = ["plan", "--replay", "--jobs", jobs, "meta.json"]
    killed_at_a_write = (
        "import os, signal, sys\n"
        "from dist_lto import cli\n"
        "write, count = os.write, [0]\n"
        "def killing_write(fd, data):\n"
        "    count[0] += 1\n"
        "    if count[0] == 60:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return write(fd, data)\n"
        "os.write = killing_write\n"
        f"sys.exit(cli.main({argv!r}))\n"
    )
    killed = subprocess.run([sys.executable, "-c", killed_at_a_write], cwd=tmp_path, timeout=120)
    assert killed.returncode == -signal.SIGKILL
    written = [p for p in (tmp_path / "out" / "plans").rglob("*") if p.is_file()
               and not p.name.startswith(".")]  # fmt: skip
    assert written, "the kill came before any plan was written"
    for path in written:
        assert json.loads(path.read_bytes())["version"] == PLAN_VERSION, path
    rerun = run_cli(argv, cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr


def test_truncated_index_is_bad_input_before_clang_runs(lzio: Path) -> None:
    """What a killed index step can leave: LLD writes index files in place. The module
    table is near the start, so the cut passed the check and clang, saying "can't skip to
    bit 1696", exited 0 with an empty object (exit 1)."""
    index = lzio / f"{MODULE}.thinlto.bc"
    index.write_bytes(index.read_bytes()[:-24])
    result = opt(lzio, "out/m.o")
    assert result.returncode == 2, result.stderr
    assert f"{MODULE}.thinlto.bc: ThinLTO index is truncated (" in result.stderr
    assert list((lzio / "out").iterdir()) == []


@pytest.mark.parametrize("cut", [1, 2, 3, 4, 8])
def test_an_index_cut_by_a_few_bytes_is_named_truncated(lzio: Path, cut: int) -> None:
    """Cut by a few bytes, an index used to pass the module-table check: clang then
    refused it ("Invalid bitcode signature") and exited 0 with an empty object, so the
    message blamed clang's output; cut by 8, clang even wrote an object."""
    index = lzio / f"{MODULE}.thinlto.bc"
    index.write_bytes(index.read_bytes()[:-cut])
    result = opt(lzio, "out/m.o")
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"dist-lto opt: error: {MODULE}.thinlto.bc: ThinLTO index is truncated")
    assert list((lzio / "out").iterdir()) == []


@pytest.mark.parametrize("key", ["index_output", "plan_output", "opt_output"])
def test_a_declared_output_at_an_archive_members_path_is_refused_before_a_replay_writes(
    tmp_path: Path, key: str
) -> None:
    """Members are listed in manifests, not in the meta, so the meta's own check missed
    them: a replay moved main.o's index file over the member (the fuzz campaign's
    "clobbered input")."""
    root = tmp_path / "captured"
    shutil.copytree(REPO / "examples" / "captured", root)
    meta = json.loads((root / "meta.json").read_text())
    meta["groups"][0]["linkables"][0][key] = "prep/util/objects/util.o"
    (root / "meta.json").write_text(json.dumps(meta))
    member = (root / "prep/util/objects/util.o").read_bytes()
    done = run_cli(["plan", "--replay", "meta.json"], cwd=root)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"dist-lto plan: error: meta.json: /groups/0/linkables/0/{key}: output"
        " 'prep/util/objects/util.o' is an input: prep/util/manifest.json: member 'util.o' at"
        " position 0; nothing was written\n"
    )
    assert (root / "prep/util/objects/util.o").read_bytes() == member


def test_an_index_output_linked_to_a_fifo_nobody_reads_is_bad_input(
    tmp_path: Path, llvm: Llvm
) -> None:
    """The fuzz campaign's plan input 1747: moving the index file into place through a
    relative link to a FIFO met ENXIO and said so as an internal failure (exit 1)."""
    root = tmp_path / "captured"
    shutil.copytree(REPO / "examples" / "captured", root)
    shutil.rmtree(root / "out")
    (root / "in").mkdir()
    os.mkfifo(root / "in" / "fifo")
    (root / "out").mkdir()
    (root / "out" / "link-to-node").symlink_to("../in/fifo")
    meta = json.loads((root / "meta.json").read_text())
    meta["groups"][0]["linkables"][1]["index_output"] = "out/link-to-node"
    (root / "meta.json").write_text(json.dumps(meta))
    done = run_cli(["plan", "meta.json", "--", llvm.clang, "-fuse-ld=lld", "-O2", "-o", "app"],
                   cwd=root)  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("dist-lto plan: error: out/link-to-node: ")
    assert stat.S_ISFIFO(os.stat(root / "in" / "fifo").st_mode)
