"""The linker's line behind a clang driver (`llvm/driver_line.py`), held to the real
clang 22 driver: for any inputs, the command it prints for them and the program it
links; refused wherever the driver would do anything else."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from dist_lto.llvm import driver_line
from dist_lto.llvm.driver_line import LinkerLine, linker_inputs, parse, resolve
from support.links import SMALL_PROGRAM
from support.tools import Llvm

INPUTS = ["a.o", "-Wl,--start-lib", "b.o", "-Wl,--end-lib", "-lm", "-Xlinker", "-z",
          "-Xlinker", "now", "-l", "dl", "-Wl,--as-needed,-lpthread"]  # fmt: skip
"""Driver link arguments of every kind the line takes in place."""


def printed(driver: list[str], args: list[str], cwd: Path) -> list[str]:
    """The one command `DRIVER -### ARGS` prints."""
    proc = subprocess.run([driver[0], "-###", *driver[1:], *args], cwd=cwd,
                          capture_output=True, text=True, check=True)  # fmt: skip
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith(' "')]
    return shlex.split(line)


@pytest.mark.parametrize(
    "flags",
    [
        ["-fuse-ld=lld", "-O2"],
        ["-fuse-ld=lld", "-O2", "-flto=thin"],
        ["-fuse-ld=lld", "-static"],
        ["-fuse-ld=lld", "-shared"],
        ["-fuse-ld=lld", "-pthread", "-rdynamic", "-Wl,--gc-sections", "-lm"],
        ["-fuse-ld=lld", "-nostdlib"],
    ],
)
@pytest.mark.parametrize("cxx", [False, True], ids=["clang", "clang++"])
def test_the_line_is_what_the_driver_prints_for_any_inputs(
    llvm: Llvm, tmp_path: Path, flags: list[str], cxx: bool
) -> None:
    driver = [llvm.clangxx if cxx else llvm.clang, *flags]
    for name in ("a.o", "b.o"):
        (tmp_path / name).write_bytes(b"")  # the driver only asks that inputs exist
    line = resolve(driver)
    assert isinstance(line, LinkerLine), line
    words = linker_inputs(INPUTS)
    assert words is not None
    assert line.command(words, "out/prog") == printed(driver, ["-o", "out/prog", *INPUTS], tmp_path)
    # No output (an index step): the driver's line without its `-o a.out`.
    default = printed(driver, INPUTS, tmp_path)
    at = default.index("-o")
    assert default[at + 1] == "a.out"
    assert line.command(words, None) == default[:at] + default[at + 2 :]


def test_a_program_linked_on_the_line_is_the_drivers_byte_for_byte(
    llvm: Llvm, tmp_path: Path
) -> None:
    objects = []
    for name, text in SMALL_PROGRAM.items():
        (tmp_path / name).write_text(text)
        subprocess.run([llvm.clang, "-O2", "-c", name], cwd=tmp_path, check=True)
        objects.append(name.replace(".c", ".o"))
    driver = [llvm.clang, "-fuse-ld=lld", "-O2"]
    subprocess.run([*driver, "-o", "by-driver", *objects, "-lm"], cwd=tmp_path, check=True)
    line = resolve(driver)
    assert isinstance(line, LinkerLine), line
    words = linker_inputs([*objects, "-lm"])
    assert words is not None
    subprocess.run(line.command(words, "by-line"), cwd=tmp_path, check=True)
    assert (tmp_path / "by-line").read_bytes() == (tmp_path / "by-driver").read_bytes()
    ran = subprocess.run(["./by-line", "x"], cwd=tmp_path, capture_output=True, text=True)
    assert (ran.returncode, ran.stdout) == (0, "4\n")


@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        (["-fuse-ld=lld", "-v"], "the driver is given `-v`"),
        (["-fuse-ld=lld", "-o", "prog"], "the driver is given `-o`"),
        (["-fuse-ld=lld", "@more.args"], "the driver is given `@more.args`"),
        (["-fuse-ld=lld", "-c"], "the driver said: .*warning"),  # it would compile nothing
        (["-fuse-ld=lld", "-flto=thin", "-gsplit-dwarf"], "names the output or the inputs"),
        (["-fuse-ld=lld", "-fno-such-flag"], "unknown argument"),
    ],
)
def test_a_driver_that_would_do_more_than_run_the_line_has_none(
    llvm: Llvm, flags: list[str], reason: str
) -> None:
    found = resolve([llvm.clang, *flags])
    assert isinstance(found, str)
    assert re.search(reason, found), found


def test_a_linker_or_a_missing_program_has_no_line(llvm: Llvm, tmp_path: Path) -> None:
    assert resolve([llvm.lld, "-O2"]) == "not a clang driver"
    found = resolve([str(tmp_path / "clang"), "-O2"])
    assert isinstance(found, str) and found.startswith("cannot run")


HEAD = "Debian clang version 22.1.8\nTarget: x86_64-pc-linux-gnu\nThread model: posix\n"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (HEAD, "would run 0 commands"),
        (HEAD + ' "ld.lld" "-o" "dist-lto-output-N" "dist-lto-inputs-N"\n' * 2, "would run 2"),
        (HEAD + ' "ld.lld" -o "dist-lto-output-N" "dist-lto-inputs-N"\n', "did not quote"),
        (HEAD + ' "cc1" "-o" "dist-lto-output-N" "dist-lto-inputs-N"\n', "run cc1, not a linker"),
        (HEAD + ' "ld.lld" "dist-lto-inputs-N" "-o" "dist-lto-output-N"\n', "other than in place"),
        (HEAD + ' "ld.lld" "-o" "dist-lto-output-N" "dist-lto-inputs-N" "x=dist-lto-inputs-N"\n',
         "other than in place"),
        (HEAD + ' "ld.lld" "--out=dist-lto-output-N" "dist-lto-inputs-N"\n', "other than in place"),
        ("Found candidate GCC installation: /usr/lib/gcc/x86_64-linux-gnu/12\n"
         ' "ld.lld" "-o" "dist-lto-output-N" "dist-lto-inputs-N"\n', "the driver said: Found"),
    ],
)  # fmt: skip
def test_output_other_than_one_linker_command_with_its_markers_in_place_is_refused(
    text: str, reason: str
) -> None:
    found = parse(text, "N")
    assert isinstance(found, str)
    assert reason in found, found


def test_quoted_words_are_read_back_as_the_driver_escaped_them() -> None:
    quoted = r'"-z" "a b\"c\\d\$e"'
    text = f'{HEAD} "ld.lld" "-o" "dist-lto-output-N" {quoted} "dist-lto-inputs-N" "-lc"\n'
    line = parse(text, "N")
    assert line == LinkerLine(("ld.lld", "-z", 'a b"c\\d$e'), ("-lc",), 1)
    assert line.command(["x.o"], "p") == ["ld.lld", "-o", "p", "-z", 'a b"c\\d$e', "x.o", "-lc"]
    assert LinkerLine.from_json(line.as_json()) == line


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["-Wl,-z,now", "-Wl,"], ["-z", "now", ""]),
        (["-l", "m", "-lpthread", "-l:libx.a"], ["-lm", "-lpthread", "-l:libx.a"]),
        (["-Xlinker", "--defsym=a=b", "lib/libz.a", "obj/x.rcgu.o"],
         ["--defsym=a=b", "lib/libz.a", "obj/x.rcgu.o"]),
        (["libc.so.6", "noext", "dir.d/noext"], ["libc.so.6", "noext", "dir.d/noext"]),
        (["-L/opt/lib"], None),  # the driver puts it before its own search paths
        (["-pthread"], None),  # the driver adds a library after the inputs
        (["@more.args"], None),
        (["main.c"], None),  # compiled first
        (["x.bc"], None),
        ([""], None),
        (["-Xlinker"], None),
        (["-l"], None),
        (["-l", "-lm"], None),
    ],
)  # fmt: skip
def test_only_words_the_driver_copies_in_place_translate(
    words: list[str], expected: list[str] | None
) -> None:
    assert linker_inputs(words) == expected


def test_a_process_knows_only_the_lines_it_was_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(driver_line, "_known", {})
    line = LinkerLine(("ld.lld",), (), 1)
    assert driver_line.known(["clang", "-O1"]) is None
    driver_line.remember(["clang", "-O1"], line)
    assert driver_line.known(["clang", "-O1"]) == line
    assert driver_line.known(["clang", "-O2"]) is None
