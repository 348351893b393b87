"""Reading a ThinLTO index's module table: against LLVM's own reader, and as a parser."""

from __future__ import annotations

import contextlib
import re
import subprocess
from pathlib import Path

import pytest
from dist_lto.errors import BadInput
from dist_lto.llvm.bitcode import (
    BITCODE_MAGIC,
    module_has_hash,
    parse_index,
    read_index_modules,
)
from dist_lto.llvm.toolchain import tool
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.budget import examples
from support.links import ThinIndex
from support.tools import Llvm


def bcanalyzer_module_paths(index: Path) -> list[bytes]:
    dump = subprocess.run(
        [tool("llvm-bcanalyzer"), "-dump", str(index)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    table = dump.split("<MODULE_STRTAB_BLOCK", 1)[1].split("</MODULE_STRTAB_BLOCK>", 1)[0]
    return [m.encode() for m in re.findall(r"<ENTRY .*record string = '(.*)'", table)]


def test_module_tables_of_real_lua_indexes_match_llvm_bcanalyzer(
    lua_thin_index: ThinIndex,
) -> None:
    for obj in lua_thin_index.build.objects:
        index = lua_thin_index.root / f"{obj}.thinlto.bc"
        modules = read_index_modules(str(index))
        assert modules.paths == bcanalyzer_module_paths(index), obj
        assert obj.encode() in modules.paths
        assert not modules.skip


def test_lazy_member_index_is_flagged_skip_with_an_empty_table(
    llvm: Llvm, lua_thin_index: ThinIndex, tmp_path: Path
) -> None:
    (tmp_path / "unused.c").write_text("int never_called(int x) { return x * 3; }\n")
    subprocess.run([llvm.clang, "-O2", "-flto=thin", "-c", "unused.c", "-o", "unused.o"],
                   cwd=tmp_path, check=True)  # fmt: skip
    (tmp_path / "main.c").write_text("int main(void) { return 0; }\n")
    subprocess.run([llvm.clang, "-O2", "-flto=thin", "-c", "main.c", "-o", "main.o"],
                   cwd=tmp_path, check=True)  # fmt: skip
    subprocess.run(
        [llvm.clang, "-flto=thin", "-fuse-ld=lld", "main.o", "-Wl,--start-lib", "unused.o",
         "-Wl,--end-lib", "-o", "prog", "-Wl,--thinlto-index-only"],
        cwd=tmp_path, check=True,
    )  # fmt: skip
    modules = read_index_modules(str(tmp_path / "unused.o.thinlto.bc"))
    assert modules.skip
    assert modules.paths == []
    assert read_index_modules(str(tmp_path / "main.o.thinlto.bc")).paths == [b"main.o"]


def test_empty_index_file_is_bad_input_naming_it(tmp_path: Path) -> None:
    index = tmp_path / "m.o.thinlto.bc"
    index.write_bytes(b"")
    with pytest.raises(BadInput, match=r"m\.o\.thinlto\.bc: ThinLTO index is empty"):
        read_index_modules(str(index))


def test_missing_index_file_is_bad_input_naming_it(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=r"nope\.thinlto\.bc: cannot read ThinLTO index"):
        read_index_modules(str(tmp_path / "nope.thinlto.bc"))


def test_object_file_given_as_index_is_bad_input(lua_thin_index: ThinIndex) -> None:
    # The module itself is bitcode but holds no module table: a classic argument swap.
    with pytest.raises(BadInput, match="not a ThinLTO index"):
        read_index_modules(str(lua_thin_index.root / "obj/lua.o"))


# ---------------------------------------------------------------------------------
# Property tests on synthetic bitstreams written the way LLVM's writer may write them


class BitWriter:
    """A minimal LLVM bitstream writer, enough to produce index-shaped files."""

    def __init__(self) -> None:
        self.value = 0
        self.size = 0
        self.blocks: list[tuple[int, int, int]] = []  # (outer width, length word pos, start)
        self.width = 2

    def emit(self, value: int, width: int) -> None:
        assert 0 <= value < 1 << width
        self.value |= value << self.size
        self.size += width

    def vbr(self, value: int, width: int) -> None:
        high = 1 << (width - 1)
        while value >= high:
            self.emit((value & (high - 1)) | high, width)
            value >>= width - 1
        self.emit(value, width)

    def align32(self) -> None:
        self.size = (self.size + 31) // 32 * 32

    def enter(self, block_id: int, width: int) -> None:
        self.emit(1, self.width)
        self.vbr(block_id, 8)
        self.vbr(width, 4)
        self.align32()
        self.blocks.append((self.width, self.size, self.size + 32))
        self.emit(0, 32)
        self.width = width

    def end(self) -> None:
        self.emit(0, self.width)
        self.align32()
        outer, length_at, start = self.blocks.pop()
        self.value |= ((self.size - start) // 32) << length_at
        self.width = outer

    def unabbreviated(self, code: int, ops: list[int]) -> None:
        self.emit(3, self.width)
        self.vbr(code, 6)
        self.vbr(len(ops), 6)
        for op in ops:
            self.vbr(op, 6)

    def define_array_abbrev(self, code: int, element: tuple[int, int]) -> None:
        """[literal code, vbr8 id, array of element] as in writeModStrings."""
        self.emit(2, self.width)
        self.vbr(4, 5)
        self.emit(1, 1)
        self.vbr(code, 8)
        self.emit(0, 1)
        self.emit(2, 3)
        self.vbr(8, 5)
        self.emit(0, 1)
        self.emit(3, 3)
        self.emit(0, 1)
        kind, width = element
        self.emit(kind, 3)
        if kind in (1, 2):
            self.vbr(width, 5)

    def data(self) -> bytes:
        return BITCODE_MAGIC + self.value.to_bytes((self.size + 7) // 8, "little")


CHAR6 = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._"
ENCODINGS = {"fixed8": (1, 8), "fixed7": (1, 7), "char6": (4, 0)}


def write_index(paths: list[tuple[bytes, str]], skip: bool, width: int, junk: bool) -> bytes:
    w = BitWriter()
    if junk:  # an IDENTIFICATION block first, as files written by clang have
        w.enter(13, 5)
        w.unabbreviated(1, list(b"LLVM22"))
        w.end()
    w.enter(8, 3)
    w.unabbreviated(1, [2])  # VERSION
    w.enter(19, width)
    abbrev_ids = {}
    for name, encoding in ENCODINGS.items():
        w.define_array_abbrev(1, encoding)
        abbrev_ids[name] = 4 + len(abbrev_ids)
    for module_id, (path, encoding) in enumerate(paths):
        if encoding == "unabbreviated":
            w.unabbreviated(1, [module_id, *path])
        else:
            w.emit(abbrev_ids[encoding], width)
            w.vbr(module_id, 8)
            w.vbr(len(path), 6)
            for c in path:
                if encoding == "char6":
                    w.emit(CHAR6.index(c), 6)
                else:
                    w.emit(c, ENCODINGS[encoding][1])
        w.unabbreviated(2, [1, 2, 3, 4, 5])  # HASH
        if junk:
            w.enter(99, 4)  # an unknown sub-block is skipped
            w.unabbreviated(7, [1, 2])
            w.end()
    w.end()
    w.enter(20, 4)
    w.unabbreviated(10, [12])  # VERSION
    w.unabbreviated(20, [0x2 if skip else 0x461])  # FLAGS
    w.end()
    w.end()
    return w.data()


@st.composite
def module_entries(draw: st.DrawFn) -> tuple[bytes, str]:
    path = draw(st.binary(min_size=1, max_size=40))
    choices = ["fixed8", "unabbreviated"]
    if all(c < 128 for c in path):
        choices.append("fixed7")
    if all(c in CHAR6 for c in path):
        choices.append("char6")
    return path, draw(st.sampled_from(choices))


@given(
    paths=st.lists(module_entries(), max_size=12),
    skip=st.booleans(),
    width=st.integers(3, 8),
    junk=st.booleans(),
)
@settings(max_examples=examples(150))
def test_module_paths_round_trip_through_every_string_encoding(
    paths: list[tuple[bytes, str]], skip: bool, width: int, junk: bool
) -> None:
    modules = parse_index(write_index(paths, skip, width, junk))
    assert modules.paths == [p for p, _ in paths]
    assert modules.skip == skip


@given(data=st.binary(max_size=300))
@settings(max_examples=examples(300))
def test_arbitrary_bytes_are_rejected_cleanly(data: bytes) -> None:
    for candidate in (data, BITCODE_MAGIC + data):
        with contextlib.suppress(ValueError):
            parse_index(candidate)


@given(cut=st.integers(0, 10_000), flip=st.integers(0, 80_000))
@settings(max_examples=examples(200), suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_damaged_real_index_never_crashes_the_reader(
    lua_thin_index: ThinIndex, cut: int, flip: int
) -> None:
    data = (lua_thin_index.root / "obj/lua.o.thinlto.bc").read_bytes()
    damaged = bytearray(data[: len(data) - cut % len(data)])
    if damaged:
        damaged[flip // 8 % len(damaged)] ^= 1 << (flip % 8)
    try:
        modules = parse_index(bytes(damaged))
    except ValueError:
        return
    assert all(isinstance(p, bytes) for p in modules.paths)


def test_array_of_literals_is_rejected_rather_than_looped_over() -> None:
    w = BitWriter()
    w.enter(8, 3)
    w.enter(19, 4)
    w.emit(2, 4)  # DEFINE_ABBREV [literal 1, array of literal 7]
    w.vbr(3, 5)
    w.emit(1, 1)
    w.vbr(1, 8)
    w.emit(0, 1)
    w.emit(3, 3)
    w.emit(1, 1)
    w.vbr(7, 8)
    w.emit(4, 4)  # a record using it, claiming 2**40 elements
    w.vbr(1 << 40, 6)
    w.end()
    w.end()
    with pytest.raises(ValueError, match="array of literals"):
        parse_index(w.data())


@pytest.fixture(scope="module")
def lua_module_and_hash(lua_thin_index: ThinIndex) -> tuple[bytes, tuple[int, ...]]:
    index = read_index_modules(str(lua_thin_index.root / "obj/lvm.o.thinlto.bc"))
    expected = index.hashes[index.paths.index(b"obj/lvm.o")]
    return (lua_thin_index.root / "obj/lvm.o").read_bytes(), expected


def test_every_real_lua_module_carries_the_hash_its_index_recorded(
    lua_thin_index: ThinIndex,
) -> None:
    """Checked both ways: the fast look at the module block's last record, and the walk
    over every record (forced by asking about a hash that is not the module's)."""
    for obj in lua_thin_index.build.objects:
        index = read_index_modules(str(lua_thin_index.root / f"{obj}.thinlto.bc"))
        expected = index.hashes[index.paths.index(obj.encode())]
        assert len(expected) == 5 and any(expected)
        data = (lua_thin_index.root / obj).read_bytes()
        assert module_has_hash(data, expected) is True
        assert module_has_hash(data, (expected[0] ^ 1, *expected[1:])) is False


@given(flips=st.lists(st.integers(0, 1 << 22), min_size=1, max_size=4))
@settings(max_examples=examples(150), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
def test_a_damaged_module_is_judged_or_rejected_never_crashes(
    lua_module_and_hash: tuple[bytes, tuple[int, ...]], flips: list[int]
) -> None:
    data, expected = lua_module_and_hash
    damaged = bytearray(data)
    for bit in flips:
        damaged[(bit >> 3) % len(damaged)] ^= 1 << (bit & 7)
    with contextlib.suppress(ValueError):
        assert module_has_hash(bytes(damaged), expected) in (True, False, None)
    with contextlib.suppress(ValueError):
        module_has_hash(bytes(damaged[: len(damaged) * flips[0] % len(damaged)]), expected)
