"""The `dist-lto opt` command line: its import set, `--help`, and the fast parser."""

from __future__ import annotations

import argparse
import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest
from dist_lto import opt_request
from dist_lto.commands import opt
from dist_lto.llvm.toolchain import tool
from hypothesis import given, settings
from hypothesis import strategies as st
from support.budget import examples
from support.links import ThinIndex
from support.tools import REPO, run_cli

MAIN = str(REPO / "tools" / "dist_lto" / "__main__.py")

OPT_PATH_MODULES = {
    "dist_lto",
    "dist_lto.cli",
    "dist_lto.errors",
    "dist_lto.commands",
    "dist_lto.commands.opt",
    "dist_lto.opt_request",
    "dist_lto.backend",
    "dist_lto.fsutil",
    "dist_lto.llvm",
    "dist_lto.llvm.flags",
    "dist_lto.llvm.bitcode",
    "dist_lto.process",
    "dist_lto.process.children",
}
"""Everything the opt path may import beyond what `import os, _signal` loads."""


def imported_modules(args: list[str], cwd: Path) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-S", "-E", "-X", "importtime", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    return {
        line.rsplit("|", 1)[1].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:") and "|" in line and "imported package" not in line
    }


def test_opt_path_imports_only_its_own_modules_and_the_standard_library_core(
    lua_thin_index: ThinIndex, tmp_path: Path
) -> None:
    baseline = imported_modules(["-c", "import os, _signal"], tmp_path)
    args = tmp_path / "link.args"
    args.write_text("-O2\n-flto=thin\n-fuse-ld=lld\n-Wl,--gc-sections\n-lm\n")
    run = imported_modules(
        [MAIN, "opt", "--input", "obj/lzio.o", "--index", "obj/lzio.o.thinlto.bc", "--out",
         str(tmp_path / "lzio.opt.o"), "--args", str(args), "--", tool("clang")],
        lua_thin_index.root,
    )  # fmt: skip
    assert (tmp_path / "lzio.opt.o").exists()
    extra = run - baseline
    assert extra == OPT_PATH_MODULES
    heavy = {"orjson", "dist_lto.formats.jsonio", "subprocess", "argparse", "typing", "dataclasses",
             "re", "enum", "signal", "contextlib", "collections", "runpy"}  # fmt: skip
    assert not heavy & run


def test_help_documents_every_option() -> None:
    result = run_cli(["opt", "--help"])
    assert result.returncode == 0
    documented = ["--input", "--index", "--out", "--args", "--dwo", "--split-dwarf"]
    documented += ["--print-command", "--no-lld-defaults", "--unweighted", "CLANG", "docs/opt.md"]
    documented += ["128+N"]
    for option in documented:
        assert option in result.stdout


def test_missing_required_option_is_a_usage_error() -> None:
    result = run_cli(["opt", "--input", "m.o", "--out", "m.opt.o", "--", "clang"])
    assert result.returncode == 2
    assert "the following arguments are required: --index" in result.stderr


def test_ready_writes_an_empty_stamp_and_runs_no_compiler(tmp_path: Path) -> None:
    stamp = tmp_path / "ready"
    stamp.write_bytes(b"stale")
    result = run_cli(["opt", "--ready", str(stamp), "--", str(tmp_path / "no-such-clang")])
    assert (result.returncode, result.stderr) == (0, "")
    assert stamp.read_bytes() == b""


@pytest.mark.parametrize(
    "other", [["--input", "m.o"], ["--out", "o"], ["--print-command"], ["--unweighted"]]
)
def test_ready_with_a_backends_option_is_a_usage_error(tmp_path: Path, other: list[str]) -> None:
    stamp = tmp_path / "ready"
    result = run_cli(["opt", "--ready", str(stamp), *other, "--", "clang"])
    assert result.returncode == 2
    assert f"argument --ready: not allowed with argument {other[0]}" in result.stderr
    assert not stamp.exists()


def test_missing_compiler_is_a_usage_error() -> None:
    result = run_cli(["opt", "--input", "m.o", "--index", "i", "--out", "o"])
    assert result.returncode == 2
    assert "usage: dist-lto opt" in result.stderr


# ---------------------------------------------------------------------------------
# The fast parser must agree with argparse, the reference


PATHS = st.text("abcxyz./-_=", min_size=1, max_size=8)
OPTION = st.one_of(
    st.tuples(
        st.sampled_from(
            ["--input", "--index", "--out", "--args", "--dwo", "--split-dwarf", "--ready"]
        ),
        PATHS,
    ),
    st.tuples(st.sampled_from(["--print-command", "--no-lld-defaults", "--unweighted"])),
    st.tuples(st.sampled_from(["--inp", "--bogus", "-h", "--input"])),
)


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    argv: list[str] = []
    for option in draw(st.lists(OPTION, max_size=8)):
        if len(option) == 2 and draw(st.booleans()):
            argv.append(f"{option[0]}={option[1]}")
        else:
            argv.extend(option)
    if draw(st.booleans()):
        argv.append("--")
        argv.extend(draw(st.lists(st.sampled_from(["clang", "-O2", "-g", "x"]), max_size=4)))
    return argv


def argparse_result(argv: list[str]) -> argparse.Namespace | None:
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            return opt.build_parser().parse_args(argv)
        except SystemExit:
            return None


@given(argv=command_lines())
@settings(max_examples=examples(400), deadline=None)
def test_fast_parser_agrees_with_argparse(argv: list[str]) -> None:
    fast = opt_request.parse_fast(argv)
    namespace = argparse_result(argv)
    if fast is None:
        return  # argparse decides: it is what parse_args falls back to
    assert namespace is not None, argv
    reference = opt.from_namespace(namespace)
    assert reference is not None, argv
    assert len(fast.backends()) == len(reference.backends()), argv
    for ours, theirs in zip(fast.backends(), reference.backends(), strict=True):
        for name in opt_request.Options.__slots__:
            if name != "more":
                assert getattr(ours, name) == getattr(theirs, name), (name, argv)


def test_fast_parser_takes_the_usual_command_line() -> None:
    argv = ["--input", "obj/m.o", "--index=idx/m.o.thinlto.bc", "--out", "out/m.o",
            "--args", "link.args", "--dwo", "out/m.dwo", "--", "clang", "-g", "-O2"]  # fmt: skip
    parsed = opt_request.parse_fast(argv)
    assert parsed is not None
    assert (parsed.input, parsed.index, parsed.out, parsed.args, parsed.dwo) == (
        "obj/m.o", "idx/m.o.thinlto.bc", "out/m.o", "link.args", "out/m.dwo")  # fmt: skip
    assert parsed.command == ["clang", "-g", "-O2"]


@pytest.mark.parametrize(
    "argv",
    [["--input", "m.o", "--index", "i", "--out", "o"],  # no compiler
     ["--input", "m.o", "--index", "i", "--", "clang"],  # no --out
     ["--inp", "m.o", "--index", "i", "--out", "o", "--", "clang"],  # abbreviation
     ["--input", "--index", "i", "--out", "o", "--", "clang"]],  # missing value
)  # fmt: skip
def test_fast_parser_leaves_the_unusual_to_argparse(argv: list[str]) -> None:
    assert opt_request.parse_fast(argv) is None


@pytest.mark.parametrize("flags", [["-S", "-E"], ["-I"]], ids=["S-E", "isolated"])
@pytest.mark.parametrize("target", ["file", "directory"])
def test_package_runs_without_installation(flags: list[str], target: str, tmp_path: Path) -> None:
    entry = MAIN if target == "file" else str(Path(MAIN).parent)
    result = subprocess.run(
        [sys.executable, *flags, entry, "opt", "--help"], cwd=tmp_path, capture_output=True,
        text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: dist-lto opt")
