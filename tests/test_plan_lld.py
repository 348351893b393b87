"""`dist-lto plan` on real clang/LLD 22 output: a small program that has everything at once.

The program has bitcode objects, a native (assembly) object, a prepared regular
archive with a loaded member, a never-loaded member and a native member, a thin
archive whose members live elsewhere (paths with `..`), a whole archive whose only
reason to be linked is a static constructor, a shared library and a linker script.
It is compiled once per session; each test plans it in its own copy, runs the
backends the plans ask for and links with the argument file, like a build system.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from dist_lto.formats.plans import (
    read_archive_plan,
    read_link_plan,
    read_object_plan,
)
from dist_lto.formats.response_file import parse_response_file
from dist_lto.llvm import driver_line
from dist_lto.llvm.bitcode import read_index_modules
from dist_lto.llvm.toolchain import tool
from dist_lto.planning import planner
from support import workloads
from support.tools import Llvm, run_cli

EXPECTED_OUTPUT = "result 129 ctor 7\n"

SOURCES = {
    "src/main.c": """
#include <stdio.h>
int helper(int);
int util_a(int);
int thin1(int);
int native_add(int, int);
int native_obj_mul(int, int);
int greet(int);
int whole_ctor_ran = 0;
__attribute__((section(".dist_lto_note"), used)) static const char note[] = "dist-lto";
int main(int argc, char **argv) {
  (void)argv;
  int v = helper(argc) + util_a(argc) + thin1(argc) + native_add(argc, 2)
        + native_obj_mul(argc, 3) + greet(argc);
  printf("result %d ctor %d\\n", v, whole_ctor_ran);
  return 0;
}
""",
    "src/helper.c": "int util_a(int);\nint helper(int x) { return util_a(x) + 1; }\n",
    "src/util_a.c": "int util_a(int x) { return x * 5; }\n",
    "src/util_b.c": "int util_b(int x) { return x - 9; }\n",
    "src/thin1.c": "int thin1(int x) { return x + 11; }\n",
    "src/thin2.c": "int thin2(int x) { return x * 13; }\n",
    "src/ctor.c": (
        "extern int whole_ctor_ran;\n"
        "__attribute__((constructor)) static void init(void) { whole_ctor_ran = 7; }\n"
    ),
    "src/greet.c": "int greet(int x) { return x * 100; }\n",
    "src/native_member.S": (
        ".text\n.globl native_add\n.type native_add,@function\n"
        "native_add:\n  leal (%rdi,%rsi), %eax\n  ret\n"
        '.section .note.GNU-stack,"",@progbits\n'
    ),
    "src/native_obj.S": (
        ".text\n.globl native_obj_mul\n.type native_obj_mul,@function\n"
        "native_obj_mul:\n  movl %edi, %eax\n  imull %esi, %eax\n  ret\n"
        '.section .note.GNU-stack,"",@progbits\n'
    ),
    "script.ld": (
        "SECTIONS { .dist_lto_script : { KEEP(*(.dist_lto_note)) } }\nINSERT AFTER .rodata;\n"
    ),
}

BITCODE = {
    "obj/main.o": "src/main.c",
    "obj/helper.o": "src/helper.c",
    "lib/util_a.o": "src/util_a.c",
    "lib/util_b.o": "src/util_b.c",
    "thin/thin1.o": "src/thin1.c",
    "thin/thin2.o": "src/thin2.c",
    "whole/ctor.o": "src/ctor.c",
}
NATIVE = {"obj/native_obj.o": "src/native_obj.S", "lib/native_member.o": "src/native_member.S"}
LINK = ["-fuse-ld=lld", "-O2"]


@dataclass(frozen=True)
class Tiny:
    root: Path


@pytest.fixture(scope="session")
def tiny(llvm: Llvm, tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    """The program's sources, objects, original archives and shared library (read-only)."""
    root = tmp_path_factory.mktemp("tiny")
    for name, text in SOURCES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    for obj, src in [*BITCODE.items(), *NATIVE.items()]:
        (root / obj).parent.mkdir(parents=True, exist_ok=True)
        lto = ["-flto=thin"] if obj in BITCODE else []
        subprocess.run([llvm.clang, "-O2", *lto, "-c", src, "-o", obj], cwd=root, check=True)
    subprocess.run(
        [llvm.clang, "-O2", "-fPIC", "-shared", "src/greet.c", "-o", "libgreet.so"],
        cwd=root,
        check=True,
    )
    ar = llvm.ar
    subprocess.run(
        [ar, "rcs", "libutil.a", "lib/util_a.o", "lib/util_b.o", "lib/native_member.o"],
        cwd=root,
        check=True,
    )
    subprocess.run(
        [ar, "rcs", "--thin", "libthin.a", "thin/thin1.o", "thin/thin2.o"], cwd=root, check=True
    )
    subprocess.run([ar, "rcs", "libwhole.a", "whole/ctor.o"], cwd=root, check=True)
    return Tiny(root)


def prepare(root: Path, name: str, members: list[str], *, thin: bool = False) -> str:
    """Archive `members` with llvm-ar and prepare it with the real `dist-lto prepare`."""
    lib = f"lib{name}.a"
    (root / lib).unlink(missing_ok=True)
    shutil.rmtree(root / "prep" / name, ignore_errors=True)
    subprocess.run(
        [tool("llvm-ar"), "rcs", *(["--thin"] if thin else []), lib, *members], cwd=root, check=True
    )
    manifest = f"prep/{name}/manifest.json"
    result = run_cli(
        [
            "prepare",
            "--archive",
            lib,
            "--objects-out",
            f"prep/{name}/objects",
            "--manifest-out",
            manifest,
        ],
        cwd=root,
    )
    assert result.returncode == 0, result.stderr
    return manifest


def obj(index: int, path: str, index_output: str | None = None) -> dict[str, Any]:
    return {
        "kind": "object",
        "index": index,
        "path": path,
        "index_output": index_output or f"out/index/{path}.thinlto.bc",
        "plan_output": f"out/plans/{index}.json",
        "opt_output": f"out/opt/{index}.o",
    }


def archive(index: int, manifest: str | None, **extra: Any) -> dict[str, Any]:
    """An archive linkable: prepared (its manifest), or given by its `objects=[...]`."""
    return {
        "kind": "archive",
        "index": index,
        **({} if manifest is None else {"manifest": manifest}),
        "plan_output": f"out/archive-plans/{index}.json",
        "index_dir": f"out/archive-index/{index}",
        "opt_objects_dir": f"out/archive-opt/{index}",
        **extra,
    }


def group(
    *linkables: dict[str, Any], pre: list[str] | None = None, post: list[str] | None = None
) -> dict[str, Any]:
    return {"pre_flags": pre or [], "post_flags": post or [], "linkables": list(linkables)}


def meta_doc(*groups: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": 1,
        "index_dir": "out/index",
        "link_plan_output": "out/link-plan.json",
        "final_link_args_output": "out/final-link.args",
        "groups": list(groups),
    }


def full_meta(root: Path) -> dict[str, Any]:
    """The whole program: every kind of input at once."""
    util = prepare(root, "util", ["lib/util_a.o", "lib/util_b.o", "lib/native_member.o"])
    thin = prepare(root, "thin", ["thin/thin1.o", "thin/thin2.o"], thin=True)
    whole = prepare(root, "whole", ["whole/ctor.o"])
    return meta_doc(
        group(obj(0, "obj/main.o"), obj(1, "obj/helper.o"), obj(2, "obj/native_obj.o")),
        group(archive(0, util)),
        group(archive(1, thin)),
        group(archive(2, whole), pre=["-Wl,--whole-archive"], post=["-Wl,--no-whole-archive"]),
        group(
            {"kind": "args", "args": ["-Wl,-T,script.ld", "-L.", "-lgreet", "-Wl,-rpath,$ORIGIN"]}
        ),
    )


@pytest.fixture
def work(tiny: Tiny, tmp_path: Path) -> Path:
    """A private copy of the program to plan in (plans write next to the inputs)."""
    dest = tmp_path / "w"
    shutil.copytree(tiny.root, dest, symlinks=True)
    return dest


def write_meta(root: Path, doc: dict[str, Any], name: str = "meta.json") -> str:
    (root / name).write_bytes(orjson.dumps(doc))
    return name


def plan(root: Path, llvm: Llvm, meta: str = "meta.json", *extra: str) -> None:
    result = run_cli(["plan", *extra, meta, "--", llvm.clang, *LINK, "-o", "app"], cwd=root)
    assert result.returncode == 0, result.stderr


def run_backends(root: Path, llvm: Llvm, doc: dict[str, Any], workers: int = 1) -> int:
    """Run every backend the plans ask for, as a build system would; return how many ran."""
    jobs: list[tuple[str, str, str]] = []
    for g in doc["groups"]:
        for item in g["linkables"]:
            if item["kind"] == "object":
                p = read_object_plan(str(root / item["plan_output"]))
                if p["is_bitcode"]:
                    jobs.append((p["path"], p["index_file"] or "", p["opt_output"]))
            elif item["kind"] == "archive":
                a = read_archive_plan(str(root / item["plan_output"]))
                for m in a["members"]:
                    if m["opt"]:
                        jobs.append(
                            (
                                m["input"],
                                f"{a['index_dir']}/{m['index_file']}",
                                f"{a['opt_objects_dir']}/{m['opt_object']}",
                            )
                        )

    def backend(job: tuple[str, str, str]) -> None:
        src, index, out = job
        (root / out).parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [llvm.clang, "-O2", "-x", "ir", src, f"-fthinlto-index={index}", "-c", "-o", out],
            cwd=root,
            check=True,
            capture_output=True,
        )

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        list(pool.map(backend, jobs))
    return len(jobs)


def final_link(root: Path, llvm: Llvm) -> str:
    subprocess.run(
        [llvm.clang, *LINK, "-o", "app", "@out/final-link.args"],
        cwd=root,
        check=True,
        capture_output=True,
    )
    return subprocess.run(["./app"], cwd=root, check=True, capture_output=True, text=True).stdout


def final_args(root: Path) -> list[str]:
    return parse_response_file((root / "out/final-link.args").read_text())


def test_planned_link_of_every_input_kind_runs_like_in_process_thinlto(
    work: Path, llvm: Llvm
) -> None:
    doc = full_meta(work)
    write_meta(work, doc)
    plan(work, llvm)
    assert run_backends(work, llvm, doc) == 5  # main, helper, util_a, thin1, ctor
    assert final_link(work, llvm) == EXPECTED_OUTPUT
    subprocess.run(
        [
            llvm.clang,
            "-flto=thin",
            *LINK,
            "-o",
            "ref",
            "obj/main.o",
            "obj/helper.o",
            "obj/native_obj.o",
            "libutil.a",
            "libthin.a",
            "-Wl,--whole-archive",
            "libwhole.a",
            "-Wl,--no-whole-archive",
            "-Wl,-T,script.ld",
            "-L.",
            "-lgreet",
            "-Wl,-rpath,$ORIGIN",
        ],
        cwd=work,
        check=True,
    )
    ref = subprocess.run(["./ref"], cwd=work, check=True, capture_output=True, text=True)
    assert ref.stdout == EXPECTED_OUTPUT
    sections = subprocess.run(
        [llvm.readelf, "-S", "app"], cwd=work, check=True, capture_output=True, text=True
    ).stdout
    assert ".dist_lto_script" in sections  # the linker script reached the final link


def test_final_link_args_keep_order_flags_and_native_inputs(work: Path, llvm: Llvm) -> None:
    write_meta(work, full_meta(work))
    plan(work, llvm)
    assert final_args(work) == [
        "out/opt/0.o",
        "out/opt/1.o",
        "obj/native_obj.o",
        "out/archive-opt/0/objects/util_a.o",
        "-Wl,--start-lib",
        "prep/util/objects/native_member.o",
        "-Wl,--end-lib",
        "out/archive-opt/1/0/thin1.o",
        "-Wl,--whole-archive",
        "out/archive-opt/2/objects/ctor.o",
        "-Wl,--no-whole-archive",
        "-Wl,-T,script.ld",
        "-L.",
        "-lgreet",
        "-Wl,-rpath,$ORIGIN",
    ]


def test_object_plans_name_what_lld_imports(work: Path, llvm: Llvm) -> None:
    write_meta(work, full_meta(work))
    plan(work, llvm)
    main = read_object_plan(str(work / "out/plans/0.json"))
    imports_file = (work / "out/index/obj/main.o.imports").read_text().split()
    assert sorted(imports_file) == sorted(
        ["obj/helper.o", "prep/util/objects/util_a.o", "thin/thin1.o"]
    )
    assert main["imports"] == [1]
    assert main["archive_imports"] == [0, 1]
    assert main["member_imports"] == [[0, 0], [1, 0]]
    assert main["is_bitcode"] is True
    assert main["index_file"] == "out/index/obj/main.o.thinlto.bc"
    helper = read_object_plan(str(work / "out/plans/1.json"))
    assert helper["member_imports"] == [[0, 0]]


def test_native_object_passes_through_with_an_empty_index_output(work: Path, llvm: Llvm) -> None:
    write_meta(work, full_meta(work))
    plan(work, llvm)
    native = read_object_plan(str(work / "out/plans/2.json"))
    assert native["is_bitcode"] is False
    assert native["index_file"] is None
    assert native["imports"] == [] and native["member_imports"] == []
    assert (work / "out/index/obj/native_obj.o.thinlto.bc").read_bytes() == b""
    link = read_link_plan(str(work / "out/link-plan.json"))
    assert link["bitcode_objects"] == [0, 1]
    assert link["native_objects"] == [2]


def test_lazy_member_never_loaded_gets_no_backend_and_stays_out_of_the_final_link(
    work: Path, llvm: Llvm
) -> None:
    write_meta(work, full_meta(work))
    plan(work, llvm)
    util = read_archive_plan(str(work / "out/archive-plans/0.json"))
    by_name = {m["name"]: m for m in util["members"]}
    assert by_name["util_a.o"]["opt"] is True
    unused = by_name["util_b.o"]
    assert unused["opt"] is False and unused["is_bitcode"] is True
    assert unused["opt_object"] is None
    # LLD 22 still writes a (136-byte) index for it, and leaves it out of its list.
    assert (work / util["index_dir"] / unused["index_file"]).stat().st_size == 136
    assert "prep/util/objects/util_b.o" not in (work / "out/index/index.list").read_text()
    native = by_name["native_member.o"]
    assert (native["is_bitcode"], native["opt"], native["index_file"]) == (False, False, None)
    assert not any("util_b" in a for a in final_args(work))
    assert read_link_plan(str(work / "out/link-plan.json"))["archives"][0] == {
        "index": 0,
        "native_members": 1,
        "opt_members": 1,
        "unused_members": 1,
    }


def objects_meta() -> dict[str, Any]:
    """`full_meta` with each archive given by its objects instead of a prepared manifest."""
    util = ["lib/util_a.o", "lib/util_b.o", "lib/native_member.o"]
    return meta_doc(
        group(obj(0, "obj/main.o"), obj(1, "obj/helper.o"), obj(2, "obj/native_obj.o")),
        group(archive(0, None, objects=util)),
        group(archive(1, None, objects=["thin/thin1.o", "thin/thin2.o"])),
        group(
            archive(2, None, objects=["whole/ctor.o"]),
            pre=["-Wl,--whole-archive"],
            post=["-Wl,--no-whole-archive"],
        ),
        group(
            {"kind": "args", "args": ["-Wl,-T,script.ld", "-L.", "-lgreet", "-Wl,-rpath,$ORIGIN"]}
        ),
    )


def test_archives_given_by_their_objects_link_as_their_prepared_twins_do(
    work: Path, llvm: Llvm
) -> None:
    doc = objects_meta()
    write_meta(work, doc)
    plan(work, llvm)
    assert not (work / "prep").exists()  # nothing prepared
    assert run_backends(work, llvm, doc) == 5  # main, helper, util_a, thin1, ctor
    assert final_link(work, llvm) == EXPECTED_OUTPUT
    util = read_archive_plan(str(work / "out/archive-plans/0.json"))
    assert util["manifest"] is None
    by_name = {m["name"]: m for m in util["members"]}
    assert by_name["util_a.o"]["input"] == "lib/util_a.o"  # spelled as the meta spells it
    assert by_name["util_a.o"]["opt_object"] == "0/util_a.o"
    assert by_name["util_b.o"]["opt"] is False  # lazy, never loaded
    assert final_args(work) == [
        "out/opt/0.o",
        "out/opt/1.o",
        "obj/native_obj.o",
        "out/archive-opt/0/0/util_a.o",
        "-Wl,--start-lib",
        "lib/native_member.o",
        "-Wl,--end-lib",
        "out/archive-opt/1/0/thin1.o",
        "-Wl,--whole-archive",
        "out/archive-opt/2/0/ctor.o",
        "-Wl,--no-whole-archive",
        "-Wl,-T,script.ld",
        "-L.",
        "-lgreet",
        "-Wl,-rpath,$ORIGIN",
    ]
    assert read_link_plan(str(work / "out/link-plan.json"))["archives"][0] == {
        "index": 0,
        "native_members": 1,
        "opt_members": 1,
        "unused_members": 1,
    }
    inspected = run_cli(["inspect", "meta.json", "--focus", "lib/util_a.o", "--dot", "g.dot"],
                        cwd=work)  # fmt: skip
    assert inspected.returncode == 0, inspected.stderr
    assert "archive 0(util_a.o)" in (work / "g.dot").read_text()


def test_thin_archive_members_climbing_out_keep_index_files_inside_the_index_dirs(
    work: Path, llvm: Llvm
) -> None:
    write_meta(work, full_meta(work))
    plan(work, llvm)
    thin = read_archive_plan(str(work / "out/archive-plans/1.json"))
    assert [m["input"] for m in thin["members"]] == ["thin/thin1.o", "thin/thin2.o"]
    assert [m["path"] for m in thin["members"]] == ["../../thin/thin1.o", "../../thin/thin2.o"]
    # Paths with `..` are renamed by position inside the archive's index dir.
    assert [m["index_file"] for m in thin["members"]] == [
        "0/thin1.o.thinlto.bc",
        "1/thin2.o.thinlto.bc",
    ]
    assert (work / "out/archive-index/1/0/thin1.o.thinlto.bc").is_file()
    # Nothing was written next to the real members.
    assert sorted(p.name for p in (work / "thin").iterdir()) == ["thin1.o", "thin2.o"]


def test_inputs_above_the_working_directory_get_guard_levels_in_the_index_dir(
    work: Path, llvm: Llvm
) -> None:
    (work / "sub").mkdir()
    doc = meta_doc(
        group(
            obj(0, "../w/obj/main.o", "out/idx/main.thinlto.bc"),
            obj(1, "obj/helper.o"),
            obj(2, "obj/native_obj.o"),
        ),
        group(
            archive(
                0, prepare(work, "util", ["lib/util_a.o", "lib/util_b.o", "lib/native_member.o"])
            )
        ),
        group(archive(1, prepare(work, "thin", ["thin/thin1.o", "thin/thin2.o"], thin=True))),
        group({"kind": "args", "args": ["-L.", "-lgreet", "-Wl,-rpath,$ORIGIN"]}),
        group(archive(2, prepare(work, "whole", ["whole/ctor.o"]), whole=True)),
    )
    write_meta(work, doc)
    plan(work, llvm)
    # `../w/obj/main.o` climbs one level: LLD writes under out/index/_/ and stays inside.
    assert (work / "out/index/_/obj/helper.o.imports").is_file()
    assert (work / "out/index/w/obj/main.o.imports").is_file()
    assert not (work.parent / "w" / "obj" / "main.o.thinlto.bc").exists()
    assert not (work.parent / "out").exists()
    assert (work / "out/idx/main.thinlto.bc").is_file()
    assert run_backends(work, llvm, doc) == 5
    assert final_link(work, llvm) == EXPECTED_OUTPUT


def test_index_files_declared_in_lld_layout_are_not_moved(work: Path, llvm: Llvm) -> None:
    write_meta(work, full_meta(work))
    plan(work, llvm)
    # main.o's index is where LLD wrote it; its `.imports` sits beside it.
    assert (work / "out/index/obj/main.o.thinlto.bc").is_file()
    assert (work / "out/index/obj/main.o.imports").is_file()
    # Members of a regular archive, declared elsewhere, were renamed into the archive dir.
    assert (work / "out/archive-index/0/objects/util_a.o.thinlto.bc").is_file()
    assert not (work / "out/index/prep/util/objects/util_a.o.thinlto.bc").exists()


def test_archive_index_dir_inside_lld_layout_keeps_member_files_in_place(
    work: Path, llvm: Llvm
) -> None:
    util = prepare(work, "util", ["lib/util_a.o", "lib/util_b.o", "lib/native_member.o"])
    doc = meta_doc(
        group(obj(0, "obj/main.o"), obj(1, "obj/helper.o")),
        group(archive(0, util, index_dir="out/index/prep/util")),
    )
    write_meta(work, doc)
    result = run_cli(
        [
            "plan",
            "meta.json",
            "--",
            llvm.clang,
            *LINK,
            "-o",
            "app",
            "thin/thin1.o",
            "obj/native_obj.o",
            "-L.",
            "-lgreet",
            "-Wl,--unresolved-symbols=ignore-all",
        ],
        cwd=work,
    )
    assert result.returncode == 2, result.stderr
    assert "bitcode module 'thin/thin1.o' is on the link line but not declared" in result.stderr
    doc["groups"].append(group(archive(1, prepare(work, "thin", ["thin/thin1.o"], thin=True))))
    write_meta(work, doc)
    result = run_cli(
        [
            "plan",
            "meta.json",
            "--",
            llvm.clang,
            *LINK,
            "-o",
            "app",
            "obj/native_obj.o",
            "-L.",
            "-lgreet",
            "-Wl,--unresolved-symbols=ignore-all",
        ],
        cwd=work,
    )
    assert result.returncode == 0, result.stderr
    plan_doc = read_archive_plan(str(work / "out/archive-plans/0.json"))
    assert plan_doc["members"][0]["index_file"] == "objects/util_a.o.thinlto.bc"
    assert (work / "out/index/prep/util/objects/util_a.o.thinlto.bc").is_file()


def test_archive_between_whole_archive_flags_is_linked_whole(work: Path, llvm: Llvm) -> None:
    write_meta(work, full_meta(work))
    plan(work, llvm)
    whole = read_archive_plan(str(work / "out/archive-plans/2.json"))
    assert whole["whole"] is True
    assert whole["members"][0]["opt"] is True  # loaded only because of --whole-archive
    index_args = parse_response_file((work / "out/index/index.args").read_text())
    at = index_args.index("-Wl,--whole-archive")
    assert index_args[at : at + 3] == [
        "-Wl,--whole-archive",
        "prep/whole/objects/ctor.o",
        "-Wl,--no-whole-archive",
    ]


def test_prebuilt_archive_in_args_is_rejected_naming_its_members(work: Path, llvm: Llvm) -> None:
    doc = meta_doc(
        group(obj(0, "obj/main.o"), obj(1, "obj/helper.o")),
        group({"kind": "args", "args": ["libutil.a"]}),
    )
    write_meta(work, doc)
    result = run_cli(["plan", "meta.json", "--", llvm.clang, *LINK, "-o", "app"], cwd=work)
    assert result.returncode == 2
    assert "bitcode member 'libutil.a(util_a.o at " in result.stderr
    assert "dist-lto prepare" in result.stderr
    assert not (work / "out/plans").exists()
    assert not (work / "out/link-plan.json").exists()


def test_replay_reproduces_the_plans_byte_for_byte(work: Path, llvm: Llvm) -> None:
    write_meta(work, full_meta(work))
    plan(work, llvm)
    before = {p: p.read_bytes() for p in (work / "out").rglob("*") if p.is_file()}
    for p in [
        work / "out/plans/0.json",
        work / "out/link-plan.json",
        work / "out/final-link.args",
        work / "out/archive-plans/1.json",
    ]:
        p.unlink()
    command = [llvm.clang, *LINK, "-o", "app"]  # what the link plan records
    result = run_cli(["plan", "--replay", "meta.json", "--", *command], cwd=work)
    assert result.returncode == 0, result.stderr
    after = {p: p.read_bytes() for p in (work / "out").rglob("*") if p.is_file()}
    assert after == before


def test_replay_with_other_spellings_reports_a_module_path_mismatch(work: Path, llvm: Llvm) -> None:
    write_meta(work, full_meta(work))
    plan(work, llvm)
    doc = full_meta(work)
    doc["groups"][0]["linkables"][1]["path"] = "obj/../obj/helper.o"
    write_meta(work, doc, "respelled.json")
    result = run_cli(["plan", "--replay", "respelled.json"], cwd=work)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "module path mismatch" in result.stderr
    assert "'obj/helper.o'" in result.stderr and "'obj/../obj/helper.o'" in result.stderr


def test_two_spellings_of_one_file_in_the_meta_are_reported_with_both_names(
    work: Path, llvm: Llvm
) -> None:
    thin = prepare(work, "thin", ["thin/thin1.o", "thin/thin2.o"], thin=True)
    doc = meta_doc(
        group(obj(0, "obj/main.o"), obj(1, "prep/x/../../thin/thin1.o")), group(archive(0, thin))
    )
    write_meta(work, doc)
    result = run_cli(["plan", "meta.json", "--", llvm.clang, *LINK, "-o", "app"], cwd=work)
    assert result.returncode == 2
    assert "module path mismatch" in result.stderr
    assert "'thin/thin1.o'" in result.stderr and "'prep/x/../../thin/thin1.o'" in result.stderr


def test_replay_without_an_index_file_is_bad_input(work: Path, llvm: Llvm) -> None:
    write_meta(work, full_meta(work))
    plan(work, llvm)
    (work / "out/link-plan.json").unlink()
    (work / "out/index/obj/helper.o.thinlto.bc").unlink()
    result = run_cli(["plan", "--replay", "meta.json"], cwd=work)
    assert result.returncode == 2
    assert "index file missing for bitcode module 'obj/helper.o'" in result.stderr
    assert "/groups/0/linkables/1 (object 1)" in result.stderr
    assert not (work / "out/link-plan.json").exists()


def test_failing_index_command_passes_its_status_and_writes_no_plans(
    work: Path, llvm: Llvm
) -> None:
    doc = meta_doc(
        group(obj(0, "obj/main.o"), obj(1, "obj/helper.o")),
        group({"kind": "args", "args": ["-lno-such-library-anywhere"]}),
    )
    write_meta(work, doc)
    result = run_cli(["plan", "meta.json", "--", llvm.clang, *LINK, "-o", "app"], cwd=work)
    assert result.returncode == 1  # clang's own status
    assert result.stderr.startswith("dist-lto plan: error: index step failed:")
    assert "no-such-library-anywhere" in result.stderr  # the linker's message follows
    assert "Traceback" not in result.stderr
    assert not (work / "out/plans").exists()
    assert not (work / "out/index/obj/main.o.thinlto.bc").exists()


HALF_WRITTEN_THEN_KILLED = """\
import os, signal, subprocess, sys
subprocess.run(sys.argv[1:], check=True)
(prefix,) = (a.split(";", 1)[1] for a in sys.argv if a.startswith("-Wl,--thinlto-prefix-replace="))
with open(prefix + "obj/main.o.thinlto.bc", "r+b") as f:
    f.truncate(8)
os.kill(os.getppid(), signal.SIGKILL)
"""
"""An index command that leaves one index file half-written as its planner is killed."""


def test_planner_killed_while_lld_writes_leaves_no_partial_index_file(
    work: Path, llvm: Llvm
) -> None:
    write_meta(work, meta_doc(group(obj(0, "obj/main.o"), obj(1, "obj/helper.o"))))
    (work / "half.py").write_text(HALF_WRITTEN_THEN_KILLED)
    command = [sys.executable, "half.py", llvm.clang, *LINK, "-o", "app"]
    killed = run_cli(["plan", "meta.json", "--", *command], cwd=work)
    assert killed.returncode == -signal.SIGKILL
    left = [p.relative_to(work) for p in (work / "out").rglob("*") if p.is_file()]
    assert [p for p in left if not any(part.startswith(".") for part in p.parts)] == [
        Path("out/index/index.args")  # complete: written atomically before the step
    ]
    plan(work, llvm)  # a rerun clears what the killed step left and completes
    assert (work / "out/index/obj/main.o.thinlto.bc").stat().st_size > 8
    assert not any(p.name.startswith(".") for p in (work / "out").rglob("*"))


def test_raw_ld_lld_command_gets_linker_flags_without_wl(work: Path, llvm: Llvm) -> None:
    doc = meta_doc(
        group(obj(0, "obj/main.o"), obj(1, "obj/helper.o")),
        group(archive(0, prepare(work, "util", ["lib/util_a.o", "lib/util_b.o"]))),
        group(archive(1, prepare(work, "thin", ["thin/thin1.o"], thin=True))),
    )
    write_meta(work, doc)
    result = run_cli(
        ["plan", "meta.json", "--", llvm.lld, "-o", "app", "--unresolved-symbols=ignore-all"],
        cwd=work,
    )
    assert result.returncode == 0, result.stderr
    assert final_args(work) == [
        "out/opt/0.o",
        "out/opt/1.o",
        "out/archive-opt/0/objects/util_a.o",
        "out/archive-opt/1/0/thin1.o",
    ]
    index_args = parse_response_file((work / "out/index/index.args").read_text())
    assert "--start-lib" in index_args and "-Wl,--start-lib" not in index_args


def test_paths_with_spaces_and_quotes_survive_both_link_lines(work: Path, llvm: Llvm) -> None:
    odd = 'odd dir/it\'s "x".o'
    (work / "odd dir").mkdir()
    shutil.copyfile(work / "obj/helper.o", work / odd)
    doc = full_meta(work)
    doc["groups"][0]["linkables"][1] = obj(1, odd)
    write_meta(work, doc)
    plan(work, llvm)
    assert read_object_plan(str(work / "out/plans/1.json"))["path"] == odd
    assert run_backends(work, llvm, doc) == 5
    assert final_link(work, llvm) == EXPECTED_OUTPUT


def test_lua_planned_with_its_library_as_a_prepared_archive_runs(
    lua_objects: workloads.Build, llvm: Llvm, tmp_path: Path
) -> None:
    root = tmp_path / "lua"  # the session's build is read-only: other tests copy it too
    shutil.copytree(lua_objects.root, root, symlinks=True)
    subprocess.run([llvm.ar, "rcs", "liblua.a", *lua_objects.library], cwd=root, check=True)
    manifest = "prep/lua/manifest.json"
    result = run_cli(
        [
            "prepare",
            "--archive",
            "liblua.a",
            "--objects-out",
            "prep/lua/objects",
            "--manifest-out",
            manifest,
        ],
        cwd=root,
    )
    assert result.returncode == 0, result.stderr
    doc = meta_doc(
        group(*(obj(i, path) for i, path in enumerate(lua_objects.main))),
        group(archive(0, manifest)),
        group({"kind": "args", "args": lua_objects.link_flags}),
    )
    write_meta(root, doc)
    plan(root, llvm)
    ran = run_backends(root, llvm, doc, workers=2)
    members = read_archive_plan(str(root / "out/archive-plans/0.json"))["members"]
    assert ran == len(lua_objects.main) + sum(m["opt"] for m in members)
    assert any(m["opt"] for m in members)
    subprocess.run([llvm.clang, *LINK, "-o", "lua", "@out/final-link.args"], cwd=root, check=True)
    workloads.check_binary("lua", root / "lua")


def test_worker_processes_write_the_same_outputs_as_one_process(work: Path, llvm: Llvm) -> None:
    write_meta(work, full_meta(work))
    plan(work, llvm, "meta.json", "--jobs", "1")
    one = {p: p.read_bytes() for p in (work / "out").rglob("*") if p.is_file()}
    shutil.rmtree(work / "out")
    plan(work, llvm, "meta.json", "--jobs", "3")
    assert {p: p.read_bytes() for p in (work / "out").rglob("*") if p.is_file()} == one


def test_a_workers_bad_share_stops_every_share_before_writing(work: Path, llvm: Llvm) -> None:
    write_meta(work, full_meta(work))
    plan(work, llvm)
    shutil.rmtree(work / "out/plans")
    (work / "out/link-plan.json").unlink()
    # The third object's share belongs to the third process.
    (work / "out/index/obj/native_obj.o.thinlto.bc").unlink()
    (work / "out/index/obj/helper.o.imports").write_text("obj/nowhere.o\n")
    result = run_cli(["plan", "--replay", "--jobs", "3", "meta.json"], cwd=work)
    assert result.returncode == 2
    assert result.stderr == (
        "dist-lto plan: error: out/index/obj/helper.o.imports: bitcode module"
        " 'obj/nowhere.o' is on the link line but not declared in the meta"
        " (declare it as an object)\n"
    )
    assert not (work / "out/plans").exists()
    assert not (work / "out/index/obj/native_obj.o.thinlto.bc").exists()
    assert not (work / "out/link-plan.json").exists()


def test_loaded_member_whose_only_reference_was_inlined_keeps_its_constructor(
    tmp_path: Path, llvm: Llvm
) -> None:
    # main imports and inlines reg_value(), so its optimised object no longer refers to
    # reg.o; listed lazily, reg.o would not be linked and its constructor would not run.
    (tmp_path / "main.c").write_text(
        "#include <stdio.h>\nint reg_value(void);\nint ctor_seen;\n"
        'int main(void) { printf("%d %d\\n", reg_value(), ctor_seen); return 0; }\n'
    )
    (tmp_path / "reg.c").write_text(
        "extern int ctor_seen;\nint reg_value(void) { return 5; }\n"
        "__attribute__((constructor)) static void reg_init(void) { ctor_seen = 1; }\n"
    )
    for name in ("main", "reg"):
        subprocess.run(
            [llvm.clang, "-O2", "-flto=thin", "-c", f"{name}.c", "-o", f"{name}.o"],
            cwd=tmp_path,
            check=True,
        )
    manifest = prepare(tmp_path, "reg", ["reg.o"])
    doc = meta_doc(group(obj(0, "main.o")), group(archive(0, manifest)))
    write_meta(tmp_path, doc)
    plan(tmp_path, llvm)
    assert run_backends(tmp_path, llvm, doc) == 2
    nm = subprocess.run(
        [llvm.nm, "-u", "out/opt/0.o"], cwd=tmp_path, check=True, capture_output=True, text=True
    ).stdout
    assert "reg_value" not in nm  # inlined: nothing in main pulls reg.o in any more
    assert final_link(tmp_path, llvm) == "5 1\n"
    subprocess.run(
        [llvm.clang, "-flto=thin", *LINK, "-o", "ref", "main.o", "libreg.a"],
        cwd=tmp_path,
        check=True,
    )
    assert (
        subprocess.run(["./ref"], cwd=tmp_path, check=True, capture_output=True, text=True).stdout
        == "5 1\n"
    )


@pytest.mark.parametrize(
    ("where", "expected"),
    [("object", "'out/index/index.args' is where the index step writes its argument file"),
     ("meta", "'out/index/index.list' is where the index step writes its list"),
     ("imports", "'out/index/obj/main.o.imports' is where the index step writes the imports"
                 " list of 'obj/main.o'")],
)  # fmt: skip
def test_an_input_at_one_of_the_index_steps_own_files_is_refused_before_writing(
    work: Path, llvm: Llvm, where: str, expected: str
) -> None:
    """The meta declares neither `index.args` nor `index.list` nor the `.imports` files,
    so its own outputs-are-not-inputs check cannot see them."""
    (work / "out/index/obj").mkdir(parents=True)
    target = {"object": "out/index/index.args", "meta": "out/index/index.list",
              "imports": "out/index/obj/main.o.imports"}[where]  # fmt: skip
    meta = "meta.json"
    if where == "meta":
        meta = target
        helper = "obj/helper.o"
    else:
        shutil.copy(work / "obj/helper.o", work / target)
        helper = target
    doc = meta_doc(group(obj(0, "obj/main.o"), obj(1, helper)))
    write_meta(work, doc, meta)
    before = (work / target).read_bytes()
    result = run_cli(["plan", meta, "--", llvm.clang, *LINK, "-o", "app"], cwd=work)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1
    assert expected in result.stderr
    assert (work / target).read_bytes() == before
    left = sorted(p.name for p in (work / "out/index").rglob("*"))
    assert left == sorted(Path(p).name for p in ["obj", target])
    assert not (work / "out/plans").exists()


def test_an_archive_repeated_on_the_link_line_is_named_once_with_both_places(
    work: Path, llvm: Llvm
) -> None:
    util = prepare(work, "util", ["lib/util_a.o", "lib/util_b.o", "lib/native_member.o"])
    doc = meta_doc(group(obj(0, "obj/main.o"), obj(1, "obj/helper.o")),
                   group(archive(0, util)), group(archive(1, util)))  # fmt: skip
    write_meta(work, doc)
    result = run_cli(["plan", "meta.json", "--", llvm.clang, *LINK, "-o", "app"], cwd=work)
    assert (result.returncode, result.stderr) == (2, (
        "dist-lto plan: error: meta.json: /groups/2/linkables/0: archive 1 repeats archive 0"
        " (/groups/1/linkables/0), manifest 'prep/util/manifest.json': declare each archive"
        " once (LLD loads an archive's members once however often the link line names it, so"
        " dropping the repeat changes nothing)\n"))  # fmt: skip
    assert not (work / "out").exists()


def test_lld_links_a_repeated_archive_as_if_it_were_named_once(work: Path, llvm: Llvm) -> None:
    """What the message above says, pinned: the same binary either way."""
    for archives, out in ((["libutil.a"], "once"), (["libutil.a", "libutil.a"], "twice")):
        line = ["obj/main.o", "obj/helper.o", "obj/native_obj.o", *archives, "libthin.a",
                "-Wl,--whole-archive", "libwhole.a", "-Wl,--no-whole-archive",
                "-Wl,-T,script.ld", "-L.", "-lgreet", "-Wl,-rpath,$ORIGIN"]  # fmt: skip
        subprocess.run([llvm.clang, *LINK, "-flto=thin", *line, "-o", out], cwd=work, check=True)
    assert (work / "once").read_bytes() == (work / "twice").read_bytes()


def test_a_non_ascii_module_path_is_refused_before_the_index_step(work: Path, llvm: Llvm) -> None:
    """LLVM 22 writes `obj/hé.o` into the index files as garbage (llvm-project issue
    194318): the plan would succeed and every backend naming the module fail."""
    shutil.copy(work / "obj/helper.o", work / "obj/hé.o")
    write_meta(work, meta_doc(group(obj(0, "obj/main.o"), obj(1, "obj/hé.o"))))
    result = run_cli(["plan", "meta.json", "--", llvm.clang, *LINK, "-o", "app"], cwd=work)
    assert (result.returncode, result.stderr) == (2, (
        "dist-lto plan: error: meta.json: /groups/0/linkables/1 (object 1): module path"
        " 'obj/hé.o' is not ASCII; LLVM 22 corrupts such paths in ThinLTO index files"
        " (llvm-project issue 194318): give the object an ASCII path\n"))  # fmt: skip
    assert not (work / "out").exists()
    line = ["obj/main.o", "obj/hé.o", "obj/native_obj.o", "libutil.a", "libthin.a",
            "-Wl,--whole-archive", "libwhole.a", "-Wl,--no-whole-archive",
            "-Wl,-T,script.ld", "-L.", "-lgreet", "-Wl,-rpath,$ORIGIN"]  # fmt: skip
    subprocess.run([llvm.clang, *LINK, "-flto=thin", *line, "-o", "app"], cwd=work, check=True)
    assert subprocess.run(["./app"], cwd=work, capture_output=True).returncode == 0  # in-process
    subprocess.run([llvm.clang, *LINK, "-flto=thin", *line, "-o", "app",
                    "-Wl,--thinlto-index-only"], cwd=work, check=True)  # fmt: skip
    table = read_index_modules(str(work / "obj/hé.o.thinlto.bc")).paths
    assert "obj/hé.o".encode() not in table  # the LLVM bug this guards against


IMPORTS_SPOILT_AFTER_THE_STEP = """\
import subprocess, sys
subprocess.run(sys.argv[1:], check=True)
(prefix,) = (a.split(";", 1)[1] for a in sys.argv if a.startswith("-Wl,--thinlto-prefix-replace="))
with open(prefix + "obj/main.o.imports", "w") as f:
    f.write("no/such/module.o\\n")
"""
"""An index command that succeeds but leaves an imports list naming a module not linked."""


def test_a_plan_failing_after_the_index_step_leaves_no_index_file_at_an_undeclared_path(
    work: Path, llvm: Llvm
) -> None:
    doc = full_meta(work)
    write_meta(work, doc)
    (work / "spoil.py").write_text(IMPORTS_SPOILT_AFTER_THE_STEP)
    command = [sys.executable, "spoil.py", llvm.clang, *LINK, "-o", "app"]
    failed = run_cli(["plan", "meta.json", "--", *command], cwd=work)
    assert failed.returncode == 2, failed.stderr
    assert "no/such/module.o" in failed.stderr
    declared = {o["index_output"] for g in doc["groups"] for o in g["linkables"]
                if o["kind"] == "object"}  # fmt: skip
    left = {str(p.relative_to(work)) for p in (work / "out").rglob("*.thinlto.bc")}
    assert left and left <= declared  # the archives' members' index files were not moved
    plan(work, llvm)
    assert (work / "out/archive-index/1").is_dir()


def test_a_known_linker_line_runs_the_index_step_on_the_linker_with_the_same_outputs(
    work: Path, llvm: Llvm, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the opt worker's planner does (docs/plan.md#the-index-step): told the line
    behind the driver, the planner runs the index step on the linker itself, its inputs
    as the linker takes them; every file it writes is the driver's run's."""
    monkeypatch.setattr(driver_line, "_known", {})
    monkeypatch.chdir(work)
    doc = full_meta(work)
    doc["groups"][-1]["linkables"][0]["args"] = ["-Wl,-T,script.ld", "libgreet.so",
                                                 "-Wl,-rpath,$ORIGIN"]  # fmt: skip
    write_meta(work, doc)
    driver = [llvm.clang, *LINK]
    planner.plan("meta.json", driver, replay=False)
    by_driver = {p: p.read_bytes() for p in (work / "out").rglob("*") if p.is_file()}
    shutil.rmtree(work / "out")
    line = driver_line.resolve(driver)
    assert isinstance(line, driver_line.LinkerLine), line
    logging = work / "ld-logging"
    logging.write_text(
        f'#!/bin/sh\necho "$@" >> {work}/ld.log\n'
        f'for a in "$@"; do case "$a" in @*) cat "${{a#@}}" >> {work}/ld.inputs;; esac; done\n'
        f'exec {line.before[0]} "$@"\n'
    )
    logging.chmod(0o755)
    driver_line.remember(driver, dataclasses.replace(line, before=(str(logging), *line.before[1:])))
    planner.plan("meta.json", driver, replay=False)
    assert {p: p.read_bytes() for p in (work / "out").rglob("*") if p.is_file()} == by_driver
    (ran,) = (work / "ld.log").read_text().splitlines()
    words = ran.split()
    assert next(w for w in words if w.startswith("@")).startswith("@out/index/.index-step-")
    assert "--thinlto-emit-imports-files" in words and "-Wl," not in ran
    inputs = parse_response_file((work / "ld.inputs").read_text())
    assert inputs[inputs.index("-T") + 1] == "script.ld" and "libgreet.so" in inputs
    assert "--start-lib" in inputs and not [w for w in inputs if w.startswith("-Wl,")]
    assert "-Wl,--start-lib" in parse_response_file((work / "out/index/index.args").read_text())
