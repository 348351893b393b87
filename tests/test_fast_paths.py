"""Fast paths held to their references: each answers exactly as the plain code it
replaces, on every input drawn (the plain code is the specification)."""

from __future__ import annotations

import os
import posixpath
import tempfile
from pathlib import Path

import pytest
from dist_lto.fsutil import write_atomic
from dist_lto.llvm.index_step import DirListing
from dist_lto.path_spelling import all_plain, is_plain
from dist_lto.whole_files import WholeWriter
from hypothesis import given, settings
from hypothesis import strategies as st
from support.budget import examples

_PART = st.sampled_from(["..", ".", "", "a", "b", "x.o", "a\nb"])
_PATH = st.lists(_PART, min_size=1, max_size=5).map("/".join) | st.just("/a")


@given(paths=st.lists(_PATH, max_size=6))
@settings(max_examples=examples(500))
def test_all_plain_agrees_with_is_plain_on_each_path(paths: list[str]) -> None:
    assert all_plain(paths) == all(is_plain(p) for p in paths)


_TREE = ["a", "a/x.o", "a/b", "a/b/y.o", "c.o", "link"]
"""Directories end without an extension; `link` is a dangling symbolic link."""


def _make_tree(root: Path) -> None:
    for entry in _TREE[:-1]:
        path = root / entry
        if path.suffix:
            path.write_bytes(b"")
        else:
            path.mkdir()
    (root / "link").symlink_to("missing")


@given(paths=st.lists(st.lists(st.sampled_from(["a", "b", "x.o", "y.o", "c.o", "link", "..",
                                                 ".", "", "z"]), min_size=1, max_size=4)
                      .map("/".join), max_size=8))  # fmt: skip
@settings(max_examples=examples(300), deadline=None)
def test_dir_listing_answers_as_lexists_for_every_file_path(paths: list[str]) -> None:
    """Paths whose last normal part names an entry (what the planner asks about: files),
    in any spelling; one listing per directory answers as a stat of each would."""
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        _make_tree(root)
        cwd = os.getcwd()
        os.chdir(root)
        try:
            listing = DirListing()
            for path in paths:
                if posixpath.basename(posixpath.normpath(path)) in ("", ".", ".."):
                    continue  # a directory's own entry: not what the listing is for
                assert listing.exists(path) == os.path.lexists(posixpath.normpath(path)), path
        finally:
            os.chdir(cwd)


@pytest.mark.parametrize("unnamed", [True, False], ids=["O_TMPFILE", "rename"])
def test_whole_writer_leaves_what_write_atomic_leaves(tmp_path: Path, unnamed: bool) -> None:
    """Both of its ways: the same bytes and mode as the plain writer, an existing file
    replaced, nothing else left in the directory."""
    files = {"p/a.json": b"{}", "p/b.json": b"x" * 70000, "q/c.json": b"", "p/a2.json": b"1"}
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a2.json").write_bytes(b"old")
    (tmp_path / "reference" / "p").mkdir(parents=True)
    (tmp_path / "reference" / "q").mkdir()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        writer = WholeWriter()
        writer.tmpfile = writer.tmpfile and unnamed
        try:
            for path, data in files.items():
                writer.write(path, data)
        finally:
            writer.close()
        for path, data in files.items():
            write_atomic(f"reference/{path}", data)
    finally:
        os.chdir(cwd)
    for path, data in files.items():
        ours, theirs = tmp_path / path, tmp_path / "reference" / path
        assert ours.read_bytes() == data == theirs.read_bytes()
        assert ours.stat().st_mode == theirs.stat().st_mode
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["a.json", "a2.json", "b.json"]
    assert [p.name for p in (tmp_path / "q").iterdir()] == ["c.json"]
