"""`dist-lto link --out-dir DIR -- LINK LINE`: a plain link line prepared, planned and linked
in one command, by real clang, llvm-ar and LLD 22; and how a link line is split."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import orjson
import pytest
from dist_lto.errors import BadInput
from dist_lto.llvm.link_command import InPlace, Operand, difference, split, with_output
from dist_lto.llvm.linkline import without_groups
from hypothesis import given
from hypothesis import strategies as st
from support import objcode
from support.tools import Llvm

SOURCES = {
    "main.c": """
#include <stdio.h>
int foo(int); int bar(int); int registered(void);
extern int plugged __attribute__((weak));
int main(int argc, char **argv) {
  (void)argv;
  printf("foo=%d bar=%d registered=%d plugged=%d\\n", foo(argc), bar(argc), registered(),
         &plugged ? plugged : -1);
  return 0;
}
""",
    "foo.c": "int bar(int);\nint foo(int x) { return x > 5 ? x : bar(x) + 1; }\n",
    "bar.c": "int foo(int);\nint bar(int x) { return x > 3 ? 7 : foo(x + 10) * 2; }\n",
    "reg.c": """
static int count;
int registered(void) { return count; }
__attribute__((constructor)) static void init(void) { count = 42; }
""",
    "plugin.c": "int plugged = 5;\n",
}
"""A program whose archives need what a real link line does: libfoo.a (regular) and
libbar.a (thin) call each other, so they stand in a group; libfoo.a is named again after
it; libplug.a is linked whole, which the program sees through a weak reference."""


def line(llvm: Llvm, out: str) -> list[str]:
    return [
        llvm.clang, "-fuse-ld=lld", "-O2", "main.o",
        "-Wl,--start-group", "libfoo.a", "libbar.a", "-Wl,--end-group", "libfoo.a",
        "-Wl,--whole-archive", "libplug.a", "-Wl,--no-whole-archive", "-o", out,
    ]  # fmt: skip


@pytest.fixture
def program(tmp_path: Path, llvm: Llvm) -> Path:
    root = tmp_path / "program"
    root.mkdir()
    for name, text in SOURCES.items():
        (root / name).write_text(text)
        obj = name.replace(".c", ".o")
        subprocess.run([llvm.clang, "-O2", "-flto=thin", "-c", name, "-o", obj], cwd=root,
                       check=True)  # fmt: skip
    for args in (["rcs", "libfoo.a", "foo.o", "reg.o"], ["rcs", "--thin", "libbar.a", "bar.o"],
                 ["rcs", "libplug.a", "plugin.o"]):  # fmt: skip
        subprocess.run([llvm.ar, *args], cwd=root, check=True)
    return root


def one_command(
    dist_lto: list[str], root: Path, *options: str, command: list[str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*dist_lto, "link", *options, "--", *command], cwd=root,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir()}


@pytest.mark.slow
def test_a_link_line_with_archives_a_group_a_repeat_and_whole_archive_links_in_one_command(
    program: Path, llvm: Llvm, dist_lto_cmd: list[str], tmp_path: Path
) -> None:
    subprocess.run(line(llvm, "inprocess"), cwd=program, check=True)
    expected = subprocess.run(["./inprocess"], cwd=program, capture_output=True, text=True)
    assert expected.stdout == "foo=23 bar=22 registered=42 plugged=5\n"
    before = files(program)
    cache = f"--cache-dir={tmp_path / 'cache'}"
    done = one_command(dist_lto_cmd, program, "--out-dir", "app.lto", cache,
                       command=line(llvm, "app"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("dist-lto link: app: 5 jobs, 0 cached, 0 failed, ")
    run = subprocess.run(["./app"], cwd=program, capture_output=True, text=True)
    assert (run.returncode, run.stdout) == (0, expected.stdout)
    written = files(program) - before
    assert {p for p in written if not p.startswith("app.lto/")} == {"app"}
    meta = orjson.loads((program / "app.lto/meta.json").read_bytes())
    (group,) = meta["groups"]
    archives = [x for x in group["linkables"] if x["kind"] == "archive"]
    assert len(archives) == 3  # libfoo.a once, libbar.a, libplug.a
    assert not os.listdir(program / "app.lto/archives/1/objects")  # thin: members in place
    index_line = (program / "app.lto/index/index.args").read_text().split("\n")
    assert "-Wl,--start-group" not in index_line and "-Wl,--end-group" not in index_line
    assert "-Wl,--start-lib" in index_line and "-Wl,--whole-archive" in index_line
    plan = orjson.loads((program / "app.lto/link-plan.json").read_bytes())
    assert plan["command"] == [llvm.clang, "-fuse-ld=lld", "-O2", "-o", "app"]
    again = one_command(dist_lto_cmd, program, "--out-dir", "app.lto", cache,
                        command=line(llvm, "app"))  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert again.stderr.startswith("dist-lto link: app: 5 jobs, 5 cached, 0 failed, ")


@pytest.mark.slow
def test_a_relocatable_lld_line_links_in_one_command_as_lld_links_it_in_process(
    program: Path, llvm: Llvm, dist_lto_cmd: list[str]
) -> None:
    def relocatable(out: str) -> list[str]:
        return [llvm.lld, "-m", "elf_x86_64", "-mllvm", "-import-instr-limit=5", "-z",
                "noexecstack", "-r", "-o", out, "main.o", "--whole-archive", "libplug.a",
                "--no-whole-archive", "--start-group", "libfoo.a", "libbar.a", "--end-group",
                "libfoo.a"]  # fmt: skip

    subprocess.run(relocatable("inprocess.o"), cwd=program, check=True)
    done = one_command(dist_lto_cmd, program, "--out-dir", "r.lto", "--no-cache",
                       f"--compiler={llvm.clang}", command=relocatable("ours.o"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    outputs = {}
    for name in ("inprocess", "ours"):
        subprocess.run([llvm.clang, "-fuse-ld=lld", f"{name}.o", "-o", name], cwd=program,
                       check=True)  # fmt: skip
        run = subprocess.run([f"./{name}"], cwd=program, capture_output=True, text=True)
        outputs[name] = run.stdout
    assert outputs["ours"] == outputs["inprocess"] == "foo=23 bar=22 registered=42 plugged=5\n"
    assert objcode.functions(program / "ours.o") == objcode.functions(program / "inprocess.o")


@pytest.mark.slow
def test_a_link_line_naming_a_missing_input_is_one_line_of_bad_input(
    program: Path, llvm: Llvm, dist_lto_cmd: list[str]
) -> None:
    command = [llvm.clang, "-fuse-ld=lld", "main.o", "libnone.a", "-o", "app"]
    done = one_command(dist_lto_cmd, program, "--out-dir", "app.lto", command=command)
    assert done.returncode == 2
    (message,) = done.stderr.splitlines()
    assert message.startswith("dist-lto link: error: libnone.a: ")
    assert not (program / "app").exists()


RECORDING_CLANG = """#!/bin/sh
printf '%s\\n' "$*" >> "$RECORD"
exec {clang} "$@"
"""


def recording_clang(tmp_path: Path, llvm: Llvm) -> tuple[str, dict[str, str]]:
    """A clang that writes each command line it runs to $RECORD, and that environment."""
    path = tmp_path / "clang-recording"
    path.write_text(RECORDING_CLANG.format(clang=llvm.clang))
    path.chmod(0o755)
    return str(path), {**os.environ, "RECORD": str(tmp_path / "record")}


def index_steps(tmp_path: Path) -> list[str]:
    record = (tmp_path / "record").read_text().splitlines()
    return [x for x in record if "--thinlto-index-only" in x]


@pytest.mark.slow
@pytest.mark.parametrize("off", [False, True])
def test_declaration_imports_are_on_unless_turned_off_for_link_and_plan(
    program: Path, llvm: Llvm, dist_lto_cmd: list[str], tmp_path: Path, off: bool
) -> None:
    clang, env = recording_clang(tmp_path, llvm)
    option = ["--no-declaration-imports"] if off else []
    command = [clang, "-fuse-ld=lld", "-O2", "main.o", "libfoo.a", "libbar.a", "libplug.a",
               "-o", "app"]  # fmt: skip
    done = subprocess.run([*dist_lto_cmd, "link", "--out-dir", "app.lto", "--no-cache",
                           f"--compiler={llvm.clang}", *option, "--", *command], cwd=program,
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    planned = subprocess.run([*dist_lto_cmd, "plan", *option, "app.lto/meta.json", "--", clang,
                              "-fuse-ld=lld", "-O2", "-o", "app"], cwd=program, env=env,
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert planned.returncode == 0, planned.stderr
    steps = index_steps(tmp_path)
    assert len(steps) == 2
    for step in steps:
        assert ("-Wl,-mllvm,-import-declaration" in step.split()) is not off
    plan = orjson.loads((program / "app.lto/link-plan.json").read_bytes())
    assert plan["declaration_imports"] is not off
    run = subprocess.run(["./app"], cwd=program, capture_output=True, text=True)
    assert run.stdout == "foo=23 bar=22 registered=42 plugged=-1\n"  # libplug.a not whole


# Splitting a link line, without running a linker.


def test_a_driver_line_keeps_inputs_and_positional_flags_in_place() -> None:
    got = split(["clang-22", "-fuse-ld=lld", "-O2", "main.o", "-Wl,--start-group", "libfoo.a",
                 "-lm", "-l", "z", "-Wl,--end-group", "-L", "lib", "-o", "app", "-Xlinker",
                 "--whole-archive", "libx.a", "-Wl,--no-whole-archive,-Bstatic",
                 "-Wl,--gc-sections", "-Xlinker", "-Map", "-Xlinker", "app.map"])  # fmt: skip
    assert got.command == ["clang-22", "-fuse-ld=lld", "-O2", "-L", "lib", "-o", "app",
                           "-Wl,--gc-sections", "-Xlinker", "-Map", "-Xlinker",
                           "app.map"]  # fmt: skip
    assert got.items == (
        Operand("main.o"), InPlace(("-Wl,--start-group",)), Operand("libfoo.a"),
        InPlace(("-lm",)), InPlace(("-l", "z")), InPlace(("-Wl,--end-group",)),
        InPlace(("-Xlinker", "--whole-archive")), Operand("libx.a"),
        InPlace(("-Wl,--no-whole-archive,-Bstatic",)),
    )  # fmt: skip
    assert not got.raw_linker


def test_an_lld_line_is_split_by_lld_options() -> None:
    got = split(["ld.lld-22", "-r", "-o", "vmlinux.o", "-m", "elf_x86_64", "--whole-archive",
                 "a.a", "--no-whole-archive", "--start-group", "b.a", "-lc", "--library", "m",
                 "--end-group", "-static", "x.o", "-mllvm", "-opt", "--soname",
                 "s.so"])  # fmt: skip
    assert got.command == ["ld.lld-22", "-r", "-o", "vmlinux.o", "-m", "elf_x86_64", "-mllvm",
                           "-opt", "--soname", "s.so"]  # fmt: skip
    assert got.items == (
        InPlace(("--whole-archive",)), Operand("a.a"), InPlace(("--no-whole-archive",)),
        InPlace(("--start-group",)), Operand("b.a"), InPlace(("-lc",)),
        InPlace(("--library", "m")), InPlace(("--end-group",)), InPlace(("-static",)),
        Operand("x.o"),
    )  # fmt: skip
    assert got.raw_linker


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["@flags.rsp"], "COMMAND: '@flags.rsp': expand response files into the link command"),
        (["-"], "COMMAND: '-' (standard input) cannot be an input of a planned link"),
        (["main.o", "-o"], "COMMAND: '-o' at the end is missing its argument"),
        (["-x", "c", "main.c"], "COMMAND: '-x': a link command names no source language"),
    ],
)
def test_what_no_planned_link_can_take_is_refused(args: list[str], problem: str) -> None:
    with pytest.raises(BadInput) as err:
        split(["clang", *args])
    assert err.value.message == problem


TOKENS = ["a.o", "b.a", "-O2", "-o", "out", "-L", "dir", "-lm", "-l", "z", "-Wl,--as-needed",
          "-Wl,--gc-sections", "-Xlinker", "--start-group", "-Wl,--end-group", "-fuse-ld=lld",
          "-static", "-Bstatic", "--whole-archive"]  # fmt: skip


def _subsequence(part: list[str], whole: list[str]) -> bool:
    it = iter(whole)
    return all(any(x == y for y in it) for x in part)


@given(st.lists(st.sampled_from(TOKENS), max_size=12), st.sampled_from(["clang", "ld.lld"]))
def test_splitting_keeps_every_argument_once_and_each_kind_in_its_order(
    args: list[str], program: str
) -> None:
    try:
        got = split([program, *args])
    except BadInput as err:
        assert err.message.endswith("at the end is missing its argument")
        return
    placed = [a for item in got.items
              for a in (item.args if isinstance(item, InPlace) else (item.path,))]  # fmt: skip
    assert got.command[0] == program
    assert sorted(got.command[1:] + placed) == sorted(args)
    assert _subsequence(got.command[1:], args) and _subsequence(placed, args)


def test_the_same_command_with_the_program_spelled_another_way_is_no_difference() -> None:
    clang = os.path.realpath("/usr/bin/clang-22")
    assert difference(["clang-22", "-O2", "-o", "a"], [clang, "-O2", "-o", "a"]) is None
    assert difference(["clang-22", "-O2", "-o", "p2"], ["clang-22", "-O3", "-o", "p3"]) == (
        "`-O3` where the plan has `-O2`; `p3` where the plan has `p2`"
    )
    assert difference(["clang", "-O2", "-s"], ["ld.lld", "-O2", "-g"]) == (
        "program 'ld.lld' where the plan has 'clang'; `-g` where the plan has `-s`"
    )
    assert difference(["clang", "-O2"], ["clang", "-O2", "-s"]) == "`-s`, which the plan lacks"
    assert difference(["clang", "-O2", "-s"], ["clang", "-s"]) == "no `-O2`, which the plan has"


def test_group_flags_leave_a_link_line_in_every_spelling() -> None:
    assert without_groups(["-Wl,--start-group", "a.o", "-Wl,--end-group"]) == ["a.o"]
    assert without_groups(["-Wl,--start-group,-lm,--end-group"]) == ["-Wl,-lm"]
    assert without_groups(["-Xlinker", "--start-group", "-Xlinker", "-Map"]) == [
        "-Xlinker", "-Map"
    ]  # fmt: skip
    assert without_groups(["-(", "a.a", "-)", "--start-group", "--end-group"]) == ["a.a"]
    assert without_groups(["-Wl,,x"]) == ["-Wl,,x"]  # untouched without a group flag


@pytest.mark.parametrize(
    ("command", "respelled"),
    [
        (["clang", "-O2", "-o", "app", "a.o"], ["clang", "-O2", "-o", "T", "a.o"]),
        (["clang", "-oapp", "a.o"], ["clang", "-oT", "a.o"]),
        (["clang", "-L", "-o", "-o", "app"], ["clang", "-L", "-o", "-o", "T"]),
        (["ld.lld", "--output=app", "-m", "-o"], ["ld.lld", "--output=T", "-m", "-o"]),
        (["ld.lld-22", "-r", "--output", "app"], ["ld.lld-22", "-r", "--output", "T"]),
        (["ld.lld", "-output=app"], ["ld.lld", "-output=T"]),
        (["ld.lld", "-output", "app"], ["ld.lld", "-output", "T"]),
    ],
)
def test_the_final_links_output_is_respelled_wherever_the_command_names_it(
    command: list[str], respelled: list[str]
) -> None:
    assert with_output(command, "T") == (respelled, "app")


@pytest.mark.parametrize(
    "command",
    [
        ["clang", "a.o"],
        ["clang", "-o", "a", "-o", "b"],
        ["clang", "-Wl,-o,app", "a.o"],
        ["clang", "-o", "a", "-Wl,--output=b"],
        ["clang", "-Xlinker", "-o", "-Xlinker", "app"],
        ["clang", "-objcmt-migrate-all", "a.o"],
        ["clang", "a.o", "-o"],
    ],
)
def test_an_output_named_never_twice_or_through_the_driver_is_left_alone(
    command: list[str],
) -> None:
    assert with_output(command, "T") is None
