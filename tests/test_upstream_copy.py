"""`dist-lto upstream copy`: a native member's output is a copy of the member's bytes, or
one line of bad input, never a link that dangles or points back at the member."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support.tools import Llvm, run_cli


@pytest.fixture
def member(tmp_path: Path, llvm: Llvm) -> Path:
    """A native object as prepare leaves it, under `prep/objects/`."""
    (tmp_path / "fast.c").write_text("int fast(int x) { return x * 7; }\n")
    objects = tmp_path / "prep" / "objects"
    objects.mkdir(parents=True)
    subprocess.run([llvm.clang, "-O2", "-c", "fast.c", "-o", str(objects / "fast.o")],
                   cwd=tmp_path, check=True)  # fmt: skip
    return objects / "fast.o"


def copy(tmp_path: Path, to: str, source: str) -> subprocess.CompletedProcess[str]:
    return run_cli(["upstream", "copy", "--to", to, "--from", source], cwd=tmp_path)


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_a_member_given_through_a_relative_symlink_is_copied_not_linked(
    tmp_path: Path, member: Path
) -> None:
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "fast.o").symlink_to(os.path.relpath(member, tmp_path / "links"))
    done = copy(tmp_path, "out/opt/fast.o", "links/fast.o")
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out" / "opt" / "fast.o"
    assert not out.is_symlink() and out.read_bytes() == member.read_bytes()
    assert names(out.parent) == ["fast.o"]


@pytest.mark.parametrize("how", ["same-path", "symlink-to-it", "symlink-to-its-link"])
def test_an_output_that_is_the_member_itself_is_refused_and_the_member_kept(
    tmp_path: Path, member: Path, how: str
) -> None:
    before = member.read_bytes()
    source = "prep/objects/fast.o"
    to = source
    if how != "same-path":
        to = "out.o"
        (tmp_path / to).symlink_to(member)
    if how == "symlink-to-its-link":
        (tmp_path / "alias.o").symlink_to(member)
        source = "alias.o"
    done = copy(tmp_path, to, source)
    assert done.returncode == 2
    assert done.stderr == (
        f"dist-lto upstream: error: {to}: is the member it would copy ({source}):"
        " name another output\n"
    )
    assert member.read_bytes() == before
    assert names(member.parent) == ["fast.o"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_an_output_naming_a_directory_is_one_line_and_changes_nothing(
    tmp_path: Path, member: Path
) -> None:
    (tmp_path / "out").mkdir()
    done = copy(tmp_path, "out", "prep/objects/fast.o")
    assert (done.returncode, done.stderr) == (
        2, "dist-lto upstream: error: out: is a directory, not a file to write\n")  # fmt: skip
    assert names(tmp_path / "out") == []


def test_a_rerun_onto_the_hard_link_it_made_succeeds_and_keeps_the_copy(
    tmp_path: Path, member: Path
) -> None:
    assert copy(tmp_path, "out/fast.o", "prep/objects/fast.o").returncode == 0
    again = copy(tmp_path, "out/fast.o", "prep/objects/fast.o")
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "out" / "fast.o").read_bytes() == member.read_bytes()
    assert names(tmp_path / "out") == ["fast.o"]


def test_a_missing_or_non_regular_member_is_one_line(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.o")
    cases = [("gone.o", "no such archive member to copy"),
             ("fifo.o", "not a regular file: no archive member to copy")]  # fmt: skip
    for source, problem in cases:
        done = copy(tmp_path, "out/x.o", source)
        assert (done.returncode, done.stderr) == (
            2, f"dist-lto upstream: error: {source}: {problem}\n")  # fmt: skip
    assert not (tmp_path / "out").exists()
