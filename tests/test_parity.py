"""Parity of distributed ThinLTO backends with LLD's in-process backend (docs/parity.md).

Every function `dist-lto opt` generates is identical to the in-process one, object
against object, except where it reaches a symbol of another module through the GOT:
the module's individual index has no summary for that symbol, so the backend cannot
know it is defined in the executable (in-process LTO marks it `dso_local`). The index
step `dist-lto plan` runs imports declarations, which brings that summary for the
variables and callees of other modules; what remains are addresses of functions.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest
from support import objcode, parity, workloads
from support.tools import Llvm, run_cli

JOBS = len(os.sched_getaffinity(0))

SMALL = {
    "main.c": "extern int *cursor;\nvoid advance(void);\n"
    "int main(void) { advance(); return cursor == 0; }\n",
    "other.c": "int storage[4];\nint *cursor = storage;\n"
    "__attribute__((noinline)) void advance(void) { cursor++; }\n",
}
"""`main` reads `cursor`, a variable of another module that ThinLTO does not import (it
is written, and its initialiser refers to another global)."""


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory, llvm: Llvm) -> workloads.Build:
    root = tmp_path_factory.mktemp("small")
    (root / "obj").mkdir()
    for name, text in SMALL.items():
        (root / name).write_text(text)
        obj = f"obj/{Path(name).stem}.o"
        subprocess.run(
            [llvm.clang, "-O2", "-flto=thin", "-c", name, "-o", obj], cwd=root, check=True
        )
    return workloads.Build("small", root, ["obj/main.o", "obj/other.o"], [], [], [])


def cursor_relocations(work: Path) -> tuple[set[int], set[int]]:
    """Relocation types of `main` against `cursor`: in-process, ours."""
    ref = objcode.read(work / "obj" / "inprocess.lto.main.o").functions["main"]
    ours = objcode.read(work / "opt" / "obj" / "main.o").functions["main"]
    return (
        {r.kind for r in ref.relocs if r.target == "cursor"},
        {r.kind for r in ours.relocs if r.target == "cursor"},
    )


def test_without_declaration_imports_a_variable_of_another_module_is_read_through_the_got(
    small: workloads.Build, tmp_path: Path
) -> None:
    p = parity.measure(small, tmp_path, JOBS, declaration_imports=False)
    # In-process: cmpq $0, cursor(%rip); ours: movq cursor@GOTPCREL(%rip) and a compare.
    assert cursor_relocations(tmp_path) == (
        {objcode.R_X86_64_PC32},
        {objcode.R_X86_64_REX_GOTPCRELX},
    )
    assert p.got == {"obj/main.o": {"main": ["cursor"]}}
    assert p.unexplained == [] and p.other == {} and p.relaxed == {}
    # main.o's index does not describe `cursor`; other.o's, which defines it, does.
    assert parity.guid("cursor") not in parity.index_guids(tmp_path / "obj/main.o.thinlto.bc")
    assert parity.guid("cursor") in parity.index_guids(tmp_path / "obj/other.o.thinlto.bc")


@pytest.mark.parametrize("flag", ["-fdirect-access-external-data", "-fpie"])
def test_no_backend_flag_makes_it_direct(small: workloads.Build, tmp_path: Path, flag: str) -> None:
    # Code generation for ELF follows the IR's dso_local alone; these flags act when
    # clang generates IR from source, not on bitcode input.
    p = parity.measure(small, tmp_path, JOBS, backend=[flag], declaration_imports=False)
    assert p.got == {"obj/main.o": {"main": ["cursor"]}}


def test_importing_declarations_at_the_index_step_makes_it_identical(
    small: workloads.Build, tmp_path: Path
) -> None:
    # The index step then writes a declaration summary of `cursor` (dso_local) into
    # main.o's index; the backend marks the declaration dso_local, as in-process LTO does.
    p = parity.measure(small, tmp_path, JOBS)
    assert p.identical == p.total == 2
    assert parity.guid("cursor") in parity.index_guids(tmp_path / "obj/main.o.thinlto.bc")
    assert (tmp_path / "obj/main.o.imports").read_text().split() == ["obj/other.o"]


def test_the_planners_index_step_imports_declarations(
    small: workloads.Build, tmp_path: Path, llvm: Llvm
) -> None:
    # `dist-lto plan` runs the index step the way the parity measurements assume: main.o
    # imports nothing but the declaration of `cursor`, so only that puts other.o in its
    # imports and `cursor` in its index.
    work = tmp_path / "w"
    shutil.copytree(small.root / "obj", work / "obj")
    objects = [
        {
            "kind": "object",
            "index": i,
            "path": path,
            "index_output": f"out/index/{path}.thinlto.bc",
            "plan_output": f"out/plans/{i}.json",
            "opt_output": f"out/opt/{i}.o",
        }
        for i, path in enumerate(small.objects)
    ]
    meta = {
        "version": 1,
        "index_dir": "out/index",
        "link_plan_output": "out/link-plan.json",
        "final_link_args_output": "out/final-link.args",
        "groups": [{"pre_flags": [], "post_flags": [], "linkables": objects}],
    }
    (work / "meta.json").write_bytes(orjson.dumps(meta))
    done = run_cli(["plan", "meta.json", "--", llvm.clang, "-fuse-ld=lld", "-o", "app"], cwd=work)
    assert done.returncode == 0, done.stderr
    assert (work / "out/index/obj/main.o.imports").read_text().split() == ["obj/other.o"]
    assert orjson.loads((work / "out/plans/0.json").read_bytes())["imports"] == [1]
    index = work / "out/index/obj/main.o.thinlto.bc"
    assert parity.guid("cursor") in parity.index_guids(index)


def test_a_non_pic_link_reads_it_through_the_got_too(
    small: workloads.Build, tmp_path: Path
) -> None:
    # x86-64 code generation loads a declaration that is not dso_local from the GOT
    # whatever the relocation model: the relocation model is not the cause.
    p = parity.measure(small, tmp_path, JOBS, link=["-no-pie"], declaration_imports=False)
    assert p.got == {"obj/main.o": {"main": ["cursor"]}}


def test_lua_is_identical_once_linked(lua_objects: workloads.Build, tmp_path: Path) -> None:
    p = parity.measure(lua_objects, tmp_path, JOBS)
    assert p.total > 600
    assert p.got == {} and p.other == {}
    # luaL_openlibs takes the addresses of luaopen_* of other modules: GOT loads that
    # LLD relaxes into the very `lea` in-process LTO generates.
    assert p.relaxed == {"obj/linit.o": ["luaL_openlibs"]}
    assert p.linked_identical == p.total


ZSTD_GOT = {
    "obj/lib/compress/zstd_compress.o": {
        "ZSTD_compressBegin_internal": ["ZSTD_trace_compress_begin"],
        "ZSTD_compressEnd": ["ZSTD_trace_compress_end"],
    },
    "obj/lib/decompress/zstd_decompress.o": {
        "ZSTD_DCtx_trace_end": ["ZSTD_trace_decompress_end"],
        "ZSTD_decompressBegin_usingDDict": ["ZSTD_trace_decompress_begin"],
        "ZSTD_decompressContinue": ["ZSTD_trace_decompress_end"],
        "ZSTD_decompressMultiFrame": ["ZSTD_trace_decompress_begin", "ZSTD_trace_decompress_end"],
    },
}
"""zstd's weak trace hooks, defined in programs/zstdcli_trace.c: in-process code takes
their address with `lea` to test it against null, ours compares the GOT entry."""


def test_zstd_differs_only_where_the_index_lacks_the_symbol(
    zstd_objects: workloads.Build, tmp_path: Path
) -> None:
    p = parity.measure(zstd_objects, tmp_path, JOBS)
    assert p.other == {}
    assert p.unexplained == []
    got = {
        module: {re.sub(r"\.llvm\.\d+$", "", name): symbols for name, symbols in fns.items()}
        for module, fns in p.got.items()
    }
    assert got == ZSTD_GOT
    assert p.relaxed == {"obj/programs/fileio.o": ["FIO_checkFilenameCollisions"]}
    assert p.linked_identical == p.total - 6
    assert p.total > 500
