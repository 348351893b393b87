"""Property tests: the name rules, the thin reader, and prepare on mutated real archives.

Mutations start from archives the real llvm-ar wrote (GNU with a symbol table, long
names and a duplicate; BSD; nested names in the name table; thin) and flip, cut,
insert and overwrite bytes. Every run must end in success or a clean exit-2 error,
and write nothing but the objects directory and, on success, the manifest.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tempfile
from contextlib import redirect_stderr
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from dist_lto import cli
from dist_lto.archive.ar_headers import (
    _names_or_error,
    _well_formed_names,
    member_headers,
    read_thin_members,
)
from dist_lto.archive.member_names import (
    UnsafeName,
    assign_paths,
    check_name_characters,
    directories_of,
    safe_path,
)
from dist_lto.archive.thin import _relative_prefix
from dist_lto.commands import prepare as prepare_command
from dist_lto.errors import BadInput
from dist_lto.formats import jsonio
from dist_lto.formats.manifest import manifest_bytes, manifest_document
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.budget import examples
from support.tools import Llvm

if TYPE_CHECKING:
    from dist_lto.formats.manifest import Entry

NAME_CHARS = st.sampled_from(["a", "b", "o", ".", "/", "~", "2", "é", " ", "\n", "_"])


DIRS = st.lists(st.sampled_from(["a", "b", "c"]), max_size=4).map(lambda p: "/" + "/".join(p))
PLAIN = st.lists(st.sampled_from(["a", "b", "x.o"]), min_size=1, max_size=3).map("/".join)


@given(DIRS, DIRS, PLAIN)
def test_thin_member_manifest_paths_match_relpath(base: str, start: str, name: str) -> None:
    # The thin path's shortcut for plain names against the reference it replaces.
    prefix, shared = _relative_prefix(base, start)
    expected = os.path.relpath(os.path.normpath(os.path.join(base, name)), start)
    if shared is None or name.split("/")[0] != shared:
        assert prefix + name == expected
    below = start != base and start.startswith(base.rstrip("/") + "/")
    assert (shared is not None) == below


@given(st.text(max_size=12))
def test_control_characters_in_member_names_are_refused_exactly(name: str) -> None:
    refused = any(c < " " or c == "\x7f" for c in name)
    try:
        check_name_characters("a.a", name, 0)
    except BadInput:
        assert refused
    else:
        assert not refused


@given(st.text(NAME_CHARS, max_size=24))
def test_safe_path_is_relative_normalised_and_inside(name: str) -> None:
    try:
        path = safe_path(name)
    except UnsafeName:
        parts = name.split("/")
        assert name.startswith("/") or ".." in parts or not [p for p in parts if p not in ("", ".")]
        return
    assert not path.startswith("/")
    parts = path.split("/")
    assert all(part not in ("", ".", "..") for part in parts)
    assert parts == [part for part in name.split("/") if part not in ("", ".")]


@given(st.text(st.characters(blacklist_characters="/\0"), min_size=1, max_size=40))
def test_plain_names_extract_to_themselves(name: str) -> None:
    if name in (".", ".."):
        return
    assert safe_path(name) == name


COMPONENTS = st.sampled_from(["a", "b", "foo.o", "foo~2.o", "foo~3.o", "a~2", "b~2", "x"])
PATHS = st.lists(COMPONENTS, min_size=1, max_size=3).map("/".join)


@given(st.lists(PATHS, max_size=30))
def test_assigned_paths_never_collide(paths: list[str]) -> None:
    result = assign_paths(paths)
    assert len(result) == len(paths)
    assert len(set(result)) == len(result)
    directories = directories_of(paths)
    assert not set(result) & directories
    assert directories_of(result) <= directories
    seen: set[str] = set()
    for original, given_path in zip(paths, result, strict=True):
        keeps = original not in seen and original not in directories
        assert (given_path == original) == keeps
        if not keeps:
            assert given_path not in paths
            assert given_path.rpartition("/")[0] == original.rpartition("/")[0]
        seen.add(original)


@given(st.integers(min_value=2, max_value=400))
def test_many_duplicates_get_consecutive_numbers(count: int) -> None:
    result = assign_paths(["dir/foo.o"] * count)
    assert result == ["dir/foo.o"] + [f"dir/foo~{k}.o" for k in range(2, count + 1)]


@pytest.fixture(scope="session")
def seeds(llvm: Llvm, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Small archives written by the real llvm-ar, as bytes to mutate."""
    root = tmp_path_factory.mktemp("seeds")
    (root / "c").mkdir()
    (root / "c/a.c").write_text("int a(void) { return 1; }\n")
    (root / "c/b.c").write_text("int b(void) { return 2; }\n")
    for name, lto in (("a", ["-flto=thin"]), ("b", [])):
        cmd = [llvm.clang, "-O1", *lto, "-c", f"c/{name}.c", "-o", f"c/{name}.o"]
        subprocess.run(cmd, cwd=root, check=True)
    (root / "d/sub").mkdir(parents=True)
    shutil.copy(root / "c/a.o", root / "d/sub/a_member_with_a_long_name.o")
    shutil.copy(root / "c/b.o", root / "d/b.o")
    members = ["d/sub/a_member_with_a_long_name.o", "d/b.o", "c/b.o"]
    ar = llvm.ar
    subprocess.run([ar, "rcs", "gnu.a", *members], cwd=root, check=True)
    subprocess.run([ar, "rcs", "--format=bsd", "bsd.a", *members], cwd=root, check=True)
    subprocess.run([ar, "rcT", "nested-thin.a", *members], cwd=root, check=True)
    subprocess.run([ar, "qcL", "nested.a", "nested-thin.a"], cwd=root, check=True)
    absolute = [str(root / m) for m in members]
    subprocess.run([ar, "rcsT", "thin.a", *absolute], cwd=root, check=True)
    names = ("gnu", "bsd", "nested", "thin", "nested-thin")
    return {name: (root / f"{name}.a").read_bytes() for name in names}


TOKENS = st.sampled_from(
    [
        b"/",
        b"//",
        b"..",
        b"../",
        b"`\n",
        b"#1/",
        b"#1/99",
        b"9999999",
        b" ",
        b"\n",
        b"\0",
        b"/0",
        b"/9",
        b"120777",
        b"20644",
        b"\xff",
        b"!<thin>\n",
        b"!<arch>\n",
    ]
)


@st.composite
def mutations(draw: st.DrawFn, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "overwrite"]))
        last = max(len(out) - 1, 0)
        start = 0 if draw(st.integers(0, 9)) == 0 else min(8, last)  # rarely the magic
        at = draw(st.integers(start, last))
        if kind == "flip" and out:
            out[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "cut":
            del out[at:]
        elif kind == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:
            token = draw(TOKENS)
            out[at : at + len(token)] = token
    return bytes(out)


def check_one_run(data: bytes) -> None:
    """Prepare `data` in a fresh directory; assert the outcome is clean either way."""
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        (root / "in").mkdir()
        archive = root / "in/lib.a"
        archive.write_bytes(data)
        stderr = io.StringIO()
        args = [
            "prepare",
            "--archive",
            str(archive),
            "--objects-out",
            str(root / "out/objects"),
            "--manifest-out",
            str(root / "out/manifest.json"),
        ]
        with redirect_stderr(stderr):
            status = cli.main(args)
        written = {str(p.relative_to(root)) for p in root.rglob("*")} - {"in", "in/lib.a"}
        if status == 2:
            message = stderr.getvalue()
            assert message.count("\n") == 1 and "Traceback" not in message, message
            assert message.startswith(f"dist-lto prepare: error: {archive}: "), message
            assert written == set(), written
            return
        assert status == 0, stderr.getvalue()
        assert stderr.getvalue() == ""
        manifest = json.loads((root / "out/manifest.json").read_text())
        objects = {
            os.path.normpath(f"out/{m['path']}")
            for m in manifest["members"]
            if not manifest["thin"]
        }
        extracted = {p for p in written if (root / p).is_file()} - {"out/manifest.json"}
        assert extracted == objects
        for p in written:
            assert p in ("out", "out/manifest.json") or p.startswith("out/objects"), p
        if not manifest["thin"]:
            for member in manifest["members"]:
                assert (root / "out" / member["path"]).stat().st_size == member["size"]


@pytest.mark.parametrize("seed", ["gnu", "bsd", "nested", "thin", "nested-thin"])
def test_unmutated_seeds_prepare_cleanly(seeds: dict[str, bytes], seed: str) -> None:
    check_one_run(seeds[seed])


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_archives_succeed_or_fail_cleanly(
    seeds: dict[str, bytes], data: st.DataObject
) -> None:
    seed = data.draw(st.sampled_from(sorted(seeds)))
    check_one_run(data.draw(mutations(seeds[seed])))


@settings(max_examples=examples(150), deadline=None)
@given(st.binary(max_size=300))
def test_thin_reader_accepts_or_rejects_any_bytes(tail: bytes) -> None:
    try:
        names = read_thin_members(b"!<thin>\n" + tail, "t.a")
    except BadInput as err:
        assert err.message.startswith("t.a: ") and "\n" not in err.message
        return
    assert all(names)


def thin_archive(names: list[bytes], long: list[bool], symbols: bool) -> bytes:
    """A GNU thin archive as llvm-ar lays it out: an optional symbol table, the name
    table, then one 60-byte header per member (long names as `/N`, others `name/`)."""

    def header(name: bytes, size: int) -> bytes:
        return (
            name.ljust(16)
            + b"0".ljust(12)
            + b"0".ljust(6) * 2
            + b"644".ljust(8)
            + b"%-10d`\n" % size
        )

    out = b"!<thin>\n"
    if symbols:
        out += header(b"/", 4) + b"\0\0\0\0"
    table = b"".join(n + b"/\n" for n, is_long in zip(names, long, strict=True) if is_long)
    if table:
        out += header(b"//", len(table)) + table + b"\n" * (len(table) & 1)
    start = 0
    for name, is_long in zip(names, long, strict=True):
        if is_long:
            out += header(b"/%d" % start, 100 + start)
            start += len(name) + 2
        else:
            out += header(name + b"/", 7)
    return out


THIN_NAMES = st.lists(
    st.tuples(st.binary(min_size=1, max_size=20).filter(lambda n: b"/\n" not in n), st.booleans()),
    max_size=12,
).map(lambda rows: [(n if is_long or len(n) < 15 else n[:14], is_long) for n, is_long in rows])


def reference_names(data: bytes) -> list[bytes] | str:
    """What the header-by-header reader makes of `data`: names, or its error message."""
    try:
        offset, table = member_headers(data, "t.a")
        return _names_or_error(data, offset, table, "t.a")
    except BadInput as err:
        return err.message


def read_names(data: bytes) -> list[bytes] | str:
    try:
        return read_thin_members(data, "t.a")
    except BadInput as err:
        return err.message


@settings(max_examples=examples(300), deadline=None)
@given(rows=THIN_NAMES, symbols=st.booleans(), data=st.data())
def test_the_thin_reader_reads_as_the_header_by_header_reader(
    rows: list[tuple[bytes, bool]], symbols: bool, data: st.DataObject
) -> None:
    names = [n for n, _ in rows]
    archive = thin_archive(names, [is_long for _, is_long in rows], symbols)
    offset, table = member_headers(archive, "t.a")
    assert _well_formed_names(archive, offset, table) == names  # well formed: the fast path
    mutated = data.draw(mutations(archive)) if data.draw(st.booleans()) else archive
    assert read_names(mutated) == reference_names(mutated)


def test_the_thin_reader_takes_its_fast_path_on_llvm_ars_thin_archives(
    seeds: dict[str, bytes],
) -> None:
    for seed in ("thin", "nested-thin"):
        offset, table = member_headers(seeds[seed], "t.a")
        names = _well_formed_names(seeds[seed], offset, table)
        assert names is not None and len(names) == 3
        assert names == _names_or_error(seeds[seed], offset, table, "t.a")


@settings(max_examples=examples(300), deadline=None)
@given(
    archive=st.text(),
    thin=st.booleans(),
    members=st.lists(
        st.fixed_dictionaries(
            {
                "name": st.text(),
                "position": st.integers(0, 1 << 32),
                "path": st.text(),
                "size": st.integers(0, 1 << 63),
                "bitcode": st.booleans(),
            }
        ),
        max_size=4,
    ),
)
def test_the_manifest_writer_writes_the_bytes_orjson_writes(
    archive: str, thin: bool, members: list[Entry]
) -> None:
    expected = jsonio.dumps(manifest_document(archive, thin, members))
    assert manifest_bytes(archive, thin, members) == expected


BASENAMES = st.sampled_from(
    ["foo.o", "foo~2.o", "foo~3.o", "foo_1.o", "bar.o", "a_rather_long_member_name.o", "x"]
)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(BASENAMES, min_size=1, max_size=12), fmt=st.sampled_from(["gnu", "bsd"]))
def test_any_member_names_round_trip_through_llvm_ar(
    llvm: Llvm, names: list[str], fmt: str
) -> None:
    """Whatever names llvm-ar stores, every member comes out once, intact, in order."""
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        files = []
        for i, name in enumerate(names):
            (root / f"src{i}").mkdir()
            (root / f"src{i}" / name).write_bytes(b"member %d\n" % i)
            files.append(f"src{i}/{name}")
        subprocess.run([llvm.ar, "rc", f"--format={fmt}", "lib.a", *files], cwd=root, check=True)
        status = cli.main(
            [
                "prepare",
                "--archive",
                str(root / "lib.a"),
                "--objects-out",
                str(root / "objects"),
                "--manifest-out",
                str(root / "m.json"),
            ]
        )
        assert status == 0
        manifest = json.loads((root / "m.json").read_text())
        assert [m["name"] for m in manifest["members"]] == names
        for i, member in enumerate(manifest["members"]):
            assert (root / member["path"]).read_bytes() == b"member %d\n" % i
        assert sum(1 for p in (root / "objects").rglob("*")) == len(names)


PREPARE_OPTION = st.one_of(
    st.tuples(
        st.sampled_from(["--archive", "--objects-out", "--manifest-out"]),
        st.text("abxy./-_=", min_size=1, max_size=8),
    ),
    st.tuples(st.sampled_from(["--arch", "--bogus", "-h", "--archive", "x"])),
)


@st.composite
def prepare_command_lines(draw: st.DrawFn) -> list[str]:
    argv: list[str] = []
    for option in draw(st.lists(PREPARE_OPTION, max_size=6)):
        if len(option) == 2 and draw(st.booleans()):
            argv.append(f"{option[0]}={option[1]}")
        else:
            argv.extend(option)
    return argv


@given(argv=prepare_command_lines())
@settings(max_examples=300, deadline=None)
def test_prepare_fast_parser_agrees_with_argparse(argv: list[str]) -> None:
    fast = prepare_command._parse_fast(argv)
    if fast is None:
        return  # argparse decides: it is what main falls back to
    with redirect_stderr(io.StringIO()):
        try:
            reference = prepare_command._parser().parse_args(argv)
        except SystemExit:
            reference = None
    assert reference is not None, argv
    for name in prepare_command.Options.__slots__:
        assert getattr(fast, name) == getattr(reference, name), (name, argv)


def test_prepare_fast_parser_takes_the_usual_command_line() -> None:
    argv = ["--archive", "lib.a", "--objects-out=out/objects", "--manifest-out", "out/m.json"]
    parsed = prepare_command._parse_fast(argv)
    assert parsed is not None
    assert (parsed.archive, parsed.objects_out, parsed.manifest_out) == (
        "lib.a", "out/objects", "out/m.json")  # fmt: skip
