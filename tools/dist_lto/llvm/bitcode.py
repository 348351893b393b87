"""Just enough of LLVM's bitstream format to read a ThinLTO index's module table.

A backend (`clang -x ir M.o -fthinlto-index=M.o.thinlto.bc`) looks its input up
in the index by the path *as written on its command line*. When that spelling
differs from the one the index step saw (`./obj/m.o` or `/abs/obj/m.o` instead of
`obj/m.o`), clang 22 finds nothing, treats the module as imported-only and exits
0 with an object that holds no code. The module table (`MODULE_STRTAB_BLOCK`)
lists every path the index knows, so comparing it with the input before running
clang catches exactly that, reading only the index's module block.

Standard library only, no `struct`: this runs once per backend action.
"""

from dist_lto import TYPE_CHECKING
from dist_lto.errors import BadInput
from dist_lto.fsutil import read_input

BITCODE_MAGIC = b"BC\xc0\xde"
WRAPPER_MAGIC = b"\xde\xc0\x17\x0b"
"""A bitcode wrapper header (Darwin-style) in front of the bitcode."""


def is_bitcode(head: bytes) -> bool:
    """LLVM bitcode, bare or in a wrapper, by magic (never `file(1)`, which misreads it)."""
    return head[:4] in (BITCODE_MAGIC, WRAPPER_MAGIC)


_MODULE_BLOCK = 8
_MODULE_STRTAB_BLOCK = 19
_GLOBALVAL_SUMMARY_BLOCK = 20
_BLOCKINFO_BLOCK = 0
_MST_CODE_ENTRY = 1
_MST_CODE_HASH = 2
MST_CODE_HASH = _MST_CODE_HASH
"""The module table's record of a module's hash (`IndexRecords.modules`)."""
_MODULE_CODE_TRIPLE = 2
_MODULE_CODE_HASH = 17
_UNABBREV_RECORD = 3
FS_FLAGS = 20
_SKIP_MODULE_FLAG = 0x2
"""`ModuleSummaryIndex::skipModuleByDistributedBackend`: the module is not in the link."""

# Abbreviation operand encodings.
_LITERAL, _FIXED, _VBR, _ARRAY, _CHAR6, _BLOB = 0, 1, 2, 3, 4, 5
_CHAR6_TABLE = bytes(range(ord("a"), ord("z") + 1)) + bytes(range(ord("A"), ord("Z") + 1))
_CHAR6_TABLE += b"0123456789._"


class IndexModules:
    """What an individual index says about modules: their paths and the skip flag."""

    __slots__ = ("hashes", "paths", "skip")

    def __init__(
        self, paths: list[bytes], skip: bool, hashes: list[tuple[int, ...]] | None = None
    ) -> None:
        self.paths = paths
        """Module paths in the index's module table, as the index step spelled them."""
        self.skip = skip
        """The index step left this module out (a lazy archive member): clang writes an
        object without code on purpose."""
        self.hashes = hashes if hashes is not None else [() for _ in paths]
        """Each module's hash (5 words of SHA-1) as the index step read it from the
        module's bitcode; `()` when the table records none."""


class _Truncated(Exception):
    pass


class _BitCursor:
    """What every bitstream cursor decodes on top of its own `read(width)`."""

    __slots__ = ()

    def read(self, width: int) -> int:
        raise NotImplementedError

    def vbr(self, width: int) -> int:
        high = 1 << (width - 1)
        value = shift = 0
        while True:
            piece = self.read(width)
            value |= (piece & (high - 1)) << shift
            if not piece & high:
                return value
            shift += width - 1
            if shift > 64:
                raise ValueError("VBR value wider than 64 bits")

    def scalar(self, encoding: tuple[int, int]) -> int:
        kind, value = encoding
        if kind == _LITERAL:
            return value
        if kind == _FIXED:
            return self.read(value)
        if kind == _VBR:
            return self.vbr(value)
        if kind == _CHAR6:
            return _CHAR6_TABLE[self.read(6)]
        raise ValueError("array or blob used as a scalar")


class _Reader(_BitCursor):
    """A cursor over a bitstream: fields are little-endian bit runs."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes, start: int, end: int) -> None:
        self.data = data
        self.pos = start * 8
        self.end = end * 8

    def read(self, width: int) -> int:
        pos = self.pos
        if pos + width > self.end:
            raise _Truncated
        self.pos = pos + width
        byte = pos >> 3
        chunk = int.from_bytes(self.data[byte : byte + 9], "little")
        return (chunk >> (pos & 7)) & ((1 << width) - 1)

    def align32(self) -> None:
        self.pos = (self.pos + 31) & ~31
        if self.pos > self.end:
            raise _Truncated

    def chars(self, count: int, encoding: tuple[int, int]) -> bytes:
        """An array of `count` characters, decoded in one slice instead of one read each."""
        kind, width = encoding
        if kind == _CHAR6:
            width = 6
        elif kind != _FIXED or width > 8:
            return bytes(self.scalar(encoding) & 0xFF for _ in range(count))
        bits = count * width
        pos = self.pos
        if pos + bits > self.end:
            raise _Truncated
        self.pos = pos + bits
        run = int.from_bytes(self.data[pos >> 3 : ((pos + bits + 7) >> 3) + 1], "little")
        run = (run >> (pos & 7)) & ((1 << bits) - 1)
        if width == 8:
            return run.to_bytes(count, "little")
        mask = (1 << width) - 1
        out = bytearray(count)
        for i in range(count):
            out[i] = run & mask
            run >>= width
        if kind == _CHAR6:
            return bytes(_CHAR6_TABLE[c] for c in out)
        return bytes(out)


Abbrev = list[tuple[int, int]]
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    Decoder = Callable[[_Reader, int, list[Abbrev]], tuple[int, list[int], bytes]]
    """How `_Block.next` decodes a record: `_record` (arrays as bytes) or `_values`."""


def _define_abbrev(reader: _Reader) -> Abbrev:
    ops: Abbrev = []
    count = reader.vbr(5)
    while len(ops) < count:
        if reader.read(1):
            ops.append((_LITERAL, reader.vbr(8)))
            continue
        kind = reader.read(3)
        if kind in (_FIXED, _VBR):
            width = reader.vbr(5)
            if width == 0:  # LLVM reads a zero-width operand as the literal 0
                ops.append((_LITERAL, 0))
                continue
            if (kind == _VBR and width < 2) or width > 64:
                raise ValueError(f"bad abbreviation operand width {width}")
            ops.append((kind, width))
        elif kind in (_ARRAY, _CHAR6, _BLOB):
            ops.append((kind, 0))
        else:
            raise ValueError(f"unknown abbreviation operand encoding {kind}")
    if not ops:
        raise ValueError("empty abbreviation")
    for i, (kind, _) in enumerate(ops):
        if (kind == _ARRAY and i != len(ops) - 2) or (kind == _BLOB and i != len(ops) - 1):
            raise ValueError("array or blob operand out of place")
        if kind == _ARRAY and ops[i + 1][0] not in (_FIXED, _VBR, _CHAR6):
            # A literal element would read no bits: a huge count would never run out.
            raise ValueError("array of literals, arrays or blobs")
    if ops[0][0] in (_ARRAY, _BLOB):
        raise ValueError("abbreviation starts with an array or blob")
    return ops


def _record(reader: _Reader, abbrev_id: int, abbrevs: list[Abbrev]) -> tuple[int, list[int], bytes]:
    """One record as (code, scalar operands, trailing array or blob as bytes)."""
    if abbrev_id == 3:
        code = reader.vbr(6)
        ops = [reader.vbr(6) for _ in range(reader.vbr(6))]
        return code, ops, b""
    index = abbrev_id - 4
    if index >= len(abbrevs):
        raise ValueError(f"undefined abbreviation {abbrev_id}")
    fields: list[int] = []
    tail = b""
    abbrev = abbrevs[index]
    i = 0
    while i < len(abbrev):
        kind = abbrev[i][0]
        if kind == _ARRAY:
            tail = reader.chars(reader.vbr(6), abbrev[i + 1])
            break
        if kind == _BLOB:
            tail = read_blob(reader)
            break
        fields.append(reader.scalar(abbrev[i]))
        i += 1
    return fields[0], fields[1:], tail


def read_blob(reader: _Reader) -> bytes:
    """A blob operand: its length, then its bytes, 32-bit aligned on both sides."""
    size = reader.vbr(6)
    reader.align32()
    start = reader.pos >> 3
    reader.pos += size * 8
    if reader.pos > reader.end:
        raise _Truncated
    reader.align32()
    return reader.data[start : start + size]


def _values(reader: _Reader, abbrev_id: int, abbrevs: list[Abbrev]) -> tuple[int, list[int], bytes]:
    """One record as (code, every operand as an integer, b""): an array is decoded element
    by element (`_record` keeps only the low byte of each); a blob is a ValueError.

    A result cache decodes every summary record of every index of a link (~7,000 for
    Lua), so the bits come from a buffer refilled 512 at a time rather than from
    `_Reader`'s slice per field: about twice as fast."""
    if abbrev_id == 3:
        return _record(reader, abbrev_id, abbrevs)
    index = abbrev_id - 4
    if index >= len(abbrevs):
        raise ValueError(f"undefined abbreviation {abbrev_id}")
    bits = _Bits(reader)
    fields: list[int] = []
    abbrev = abbrevs[index]
    for i, encoding in enumerate(abbrev):
        kind = encoding[0]
        if kind == _ARRAY:
            elements = bits.vbr(6)
            if elements > bits.end - bits.pos:
                raise _Truncated  # more elements than bits left
            element = abbrev[i + 1]
            fields += [bits.scalar(element) for _ in range(elements)]
            break
        if kind == _BLOB:
            raise ValueError("blob operand in a summary record")
        fields.append(bits.scalar(encoding))
    reader.pos = bits.pos
    return fields[0], fields[1:], b""


class _Bits(_BitCursor):
    """Reading forward from a reader's position through a buffer of up to 512 bits."""

    __slots__ = ("buf", "data", "end", "left", "pos")

    def __init__(self, reader: _Reader) -> None:
        self.data, self.pos, self.end = reader.data, reader.pos, reader.end
        self.buf = self.left = 0

    def read(self, width: int) -> int:
        if width > self.left:
            pos = self.pos
            if pos + width > self.end:
                raise _Truncated
            self.buf = int.from_bytes(self.data[pos >> 3 : (pos >> 3) + 65], "little") >> (pos & 7)
            self.left = min(512, self.end - pos)
        value = self.buf & ((1 << width) - 1)
        self.buf >>= width
        self.left -= width
        self.pos += width
        return value


def _skip_vbr6(reader: _Reader, count: int) -> None:
    """Move past `count` VBR6 fields at once. Why: an unabbreviated record is a run of
    VBR6 fields, and a reader that needs only its code would otherwise pay a Python call
    per field (a module's function records hold about 20 each): here each window of bits
    becomes one string of chunk continuation bits, and its field ends are found by
    `str.find`."""
    data, pos = reader.data, reader.pos
    while count:
        window = min(6 * (count + 8), reader.end - pos)
        chunks = window // 6
        if chunks == 0:
            raise _Truncated
        value = int.from_bytes(data[pos >> 3 : ((pos + window) >> 3) + 1], "little") >> (pos & 7)
        bits = bin(value)[:1:-1].ljust(window, "0")  # least significant bit first
        continuation = bits[5 : chunks * 6 : 6]
        at = -1
        ended = 0
        while ended < count:
            at = continuation.find("0", at + 1)
            if at < 0:
                break
            ended += 1
        if ended == count:
            pos += (at + 1) * 6
            break
        pos += chunks * 6
        count -= ended
    reader.pos = pos


def _short_record(
    reader: _Reader, abbrev_id: int, abbrevs: list[Abbrev]
) -> tuple[int, list[int], bytes]:
    """A record as `_record` reads it, but an unabbreviated one with more than two
    operands comes back without them (skipped by `_skip_vbr6`): for walks that need the
    operands of short records only."""
    if abbrev_id != 3:
        return _record(reader, abbrev_id, abbrevs)
    code = reader.vbr(6)
    count = reader.vbr(6)
    if count <= 2:
        return code, [reader.vbr(6) for _ in range(count)], b""
    _skip_vbr6(reader, count)
    return code, [], b""


def _skip_block(reader: _Reader) -> None:
    reader.align32()
    words = reader.read(32)
    reader.pos += words * 32
    if reader.pos > reader.end:
        raise _Truncated


def _enter(reader: _Reader) -> tuple[int, int]:
    """Read an ENTER_SUBBLOCK's header: (block id, abbreviation width)."""
    block_id = reader.vbr(8)
    width = reader.vbr(4)
    if not 1 <= width <= 32:
        raise ValueError(f"bad abbreviation width {width}")
    return block_id, width


_SUBBLOCK = -1
"""The `code` that `_Block.next` reports for a sub-block."""


class _Block:
    """Walks one block's entries, defining abbreviations as they come."""

    __slots__ = ("abbrevs", "reader", "width")

    def __init__(self, reader: _Reader, width: int, inherited: list[Abbrev]) -> None:
        self.reader = reader
        self.width = width
        self.abbrevs = list(inherited)

    def next(self, record: "Decoder | None" = None) -> tuple[int, list[int], bytes] | None:
        """The next record as (code, operands, trailing array or blob), None at the end.

        A sub-block comes back as `(_SUBBLOCK, [block id, abbreviation width], b"")`
        with the reader at its length word; the caller enters or skips it.
        """
        reader = self.reader
        while True:
            abbrev_id = reader.read(self.width)
            if abbrev_id == 0:
                reader.align32()
                return None
            if abbrev_id == 1:
                return (_SUBBLOCK, list(_enter(reader)), b"")
            if abbrev_id == 2:
                self.abbrevs.append(_define_abbrev(reader))
                continue
            return (record or _record)(reader, abbrev_id, self.abbrevs)


def _subblocks(
    reader: _Reader, width: int, blockinfo: dict[int, list[Abbrev]]
) -> "Iterator[tuple[int, int, list[Abbrev], int, int]]":
    """The sub-blocks of the block `reader` is in (entered with abbreviation width
    `width`), as (block id, its abbreviation width, the abbreviations it inherits from
    BLOCKINFO, its first byte, its end bit). The caller reads a sub-block's entries or
    not; the walk goes on after its end, and fails there if the data ends first."""
    block = _Block(reader, width, [])
    while (entry := block.next()) is not None:
        code, ops, _ = entry
        if code != _SUBBLOCK:
            continue
        block_id, sub_width = ops
        reader.align32()
        start = reader.pos >> 3
        words = reader.read(32)
        end = reader.pos + words * 32
        yield block_id, sub_width, blockinfo.get(block_id, []), start, end
        reader.pos = end
        if end > reader.end:
            raise _Truncated


def _blockinfo(reader: _Reader, width: int, table: dict[int, list[Abbrev]]) -> None:
    """BLOCKINFO: abbreviations that other blocks start with, keyed by block id."""
    current: int | None = None
    while True:
        abbrev_id = reader.read(width)
        if abbrev_id == 0:
            reader.align32()
            return
        if abbrev_id == 1:
            _enter(reader)
            _skip_block(reader)
        elif abbrev_id == 2:
            if current is None:
                raise ValueError("abbreviation in BLOCKINFO before SETBID")
            table.setdefault(current, []).append(_define_abbrev(reader))
        else:
            code, ops, _ = _record(reader, abbrev_id, [])
            if code == 1:
                if not ops:
                    raise ValueError("empty SETBID record")
                current = ops[0]


def _bitcode_span(data: bytes) -> tuple[int, int]:
    if data[:4] == WRAPPER_MAGIC:
        if len(data) < 20:
            raise ValueError("truncated bitcode wrapper header")
        offset = int.from_bytes(data[8:12], "little")
        size = int.from_bytes(data[12:16], "little")
        if offset + size > len(data) or size < 4:
            raise ValueError("bitcode wrapper points outside the file")
        start, end = offset, offset + size
    else:
        start, end = 0, len(data)
    if data[start : start + 4] != BITCODE_MAGIC:
        raise ValueError("not LLVM bitcode")
    return start + 4, end


class TruncatedBitcode(ValueError):
    """The bitcode ends before what it declares: a writer that did not finish."""


def check_whole(data: bytes) -> None:
    """TruncatedBitcode unless `data`'s bitstream is whole: a whole number of 32-bit words
    (LLVM refuses anything else as having no bitcode signature, and clang then exits 0
    with an empty object), every top-level block within the file, nothing after the last."""
    start, end = _bitcode_span(data)
    size = end - (start - 4)
    if size % 4:
        raise TruncatedBitcode(f"{size} bytes of bitcode, not a whole number of 32-bit words")
    reader = _Reader(data, start, end)
    try:
        while reader.pos < reader.end:
            if reader.read(2) != 1:
                raise ValueError("expected a block at top level")
            _enter(reader)
            reader.align32()
            words = reader.read(32)
            if reader.pos + words * 32 > reader.end:
                missing = (reader.pos + words * 32 - reader.end) // 8
                raise TruncatedBitcode(f"its last block lacks {missing} bytes")
            reader.pos += words * 32
    except _Truncated:
        raise TruncatedBitcode("it ends inside a block header") from None


def parse_index(data: bytes) -> IndexModules:
    """The module table and skip flag of an individual ThinLTO index.

    Raises ValueError when `data` is not a well-formed index (TruncatedBitcode when it
    is cut short).
    """
    check_whole(data)
    reader, width, blockinfo = _find_module_block(data)
    try:
        return _module_block(reader, width, blockinfo)
    except _Truncated:
        raise ValueError("truncated bitcode") from None


def _find_module_block(data: bytes) -> tuple[_Reader, int, dict[int, list[Abbrev]]]:
    """A reader just past the module block's length word, its abbreviation width, and the
    BLOCKINFO abbreviations seen before it."""
    start, end = _bitcode_span(data)
    reader = _Reader(data, start, end)
    blockinfo: dict[int, list[Abbrev]] = {}
    try:
        while reader.pos + 32 <= reader.end:
            abbrev_id = reader.read(2)
            if abbrev_id != 1:
                raise ValueError(f"expected a block at top level, found abbreviation {abbrev_id}")
            block_id, width = _enter(reader)
            if block_id == _BLOCKINFO_BLOCK:
                reader.align32()
                reader.read(32)
                _blockinfo(reader, width, blockinfo)
            elif block_id == _MODULE_BLOCK:
                reader.align32()
                words = reader.read(32)
                if reader.pos + words * 32 > reader.end:  # cut short: a killed writer, say
                    raise _Truncated
                return reader, width, blockinfo
            else:
                _skip_block(reader)
    except _Truncated:
        raise ValueError("truncated bitcode") from None
    raise ValueError("no module block: not a ThinLTO index")


def _module_block(reader: _Reader, width: int, blockinfo: dict[int, list[Abbrev]]) -> IndexModules:
    paths: list[bytes] | None = None
    hashes: list[tuple[int, ...]] = []
    skip = False
    for block_id, sub_width, inherited, _, _ in _subblocks(reader, width, blockinfo):
        if block_id == _MODULE_STRTAB_BLOCK:
            paths = _module_paths(_Block(reader, sub_width, inherited), hashes)
        elif block_id == _GLOBALVAL_SUMMARY_BLOCK:
            skip = _summary_flags(_Block(reader, sub_width, inherited)) & _SKIP_MODULE_FLAG != 0
            break
    if paths is None:
        raise ValueError("no module table (MODULE_STRTAB_BLOCK): not a ThinLTO index")
    return IndexModules(paths, skip, hashes)


def _module_paths(block: _Block, hashes: list[tuple[int, ...]]) -> list[bytes]:
    """The module table's paths; each module's hash (the HASH record after its ENTRY, if
    any) is appended to `hashes`."""
    paths = []
    while (entry := block.next()) is not None:
        code, ops, tail = entry
        if code == _MST_CODE_ENTRY:
            # [module id, path...]: the path is the trailing array, or the operands when the
            # writer used no abbreviation.
            paths.append(tail or bytes(c & 0xFF for c in ops[1:]))
            hashes.append(())
        elif code == _MST_CODE_HASH and hashes:
            hashes[-1] = tuple(ops) + tuple(tail)
        elif code == _SUBBLOCK:
            _skip_block(block.reader)
    return paths


def module_has_hash(data: bytes, expected: tuple[int, ...]) -> bool | None:
    """Whether the bitcode module in `data` records the module hash `expected` (the hash
    an index step read from it); None when it records none. ValueError when `data` is not
    bitcode with a module block.

    LLVM writes the hash as the module block's last record, unabbreviated, so the common
    case (the same hash) is one comparison of the block's last bits with the record
    `expected` makes; anything else is decided by walking the block's records.
    """
    reader, width, blockinfo = _find_module_block(data)
    reader.pos -= 32
    end = reader.pos + 32 + reader.read(32) * 32  # read before: within the data
    record = [*_unabbreviated(width, _MODULE_CODE_HASH, expected), (0, width)]  # END_BLOCK
    bits = sum(w for _, w in record)
    value = shift = 0
    for field, field_width in record:
        value |= field << shift
        shift += field_width
    first = end - bits - 31
    if first >= reader.pos:
        last = int.from_bytes(data[first >> 3 : end >> 3], "little") >> (first & 7)
        for padding in range(32):  # zero bits from END_BLOCK up to the 32-bit boundary
            if last >> (31 - padding) == value:  # the record, then `padding` zero bits
                return True
    try:
        found = _top_level_record(
            _Block(reader, width, blockinfo.get(_MODULE_BLOCK, [])), _MODULE_CODE_HASH
        )
    except _Truncated:
        raise ValueError("truncated bitcode") from None
    return None if found is None else found == expected


def module_triple(data: bytes) -> str:
    """The target triple the bitcode module in `data` records ("" for none): the
    module block's top-level TRIPLE record. ValueError when `data` is not bitcode with a
    module block."""
    reader, width, blockinfo = _find_module_block(data)
    try:
        found = _top_level_record(_Block(reader, width, blockinfo.get(_MODULE_BLOCK, [])),
                                  _MODULE_CODE_TRIPLE)  # fmt: skip
    except _Truncated:
        raise ValueError("truncated bitcode") from None
    return "" if found is None else bytes(found).decode("ascii", errors="replace")


def _unabbreviated(width: int, code: int, ops: tuple[int, ...]) -> list[tuple[int, int]]:
    """An UNABBREV_RECORD as (value, width) fields, VBR6 operands split into chunks."""
    fields = [(_UNABBREV_RECORD, width)]
    for value in (code, len(ops), *ops):
        while True:
            piece = value & 31
            value >>= 5
            fields.append((piece | (32 if value else 0), 6))
            if not value:
                break
    return fields


def _top_level_record(block: _Block, wanted: int) -> tuple[int, ...] | None:
    """The operands (a trailing array's too) of the block's first record with code
    `wanted`, its sub-blocks skipped by their lengths; None when it has none."""
    while (entry := block.next()) is not None:
        code, ops, tail = entry
        if code == _SUBBLOCK:
            _skip_block(block.reader)
        elif code == wanted:
            return tuple(ops) + tuple(tail)
    return None


def _summary_flags(block: _Block) -> int:
    """The FLAGS record, which the writer puts first in the summary block (after VERSION)."""
    while (entry := block.next()) is not None:
        code, ops, _ = entry
        if code == FS_FLAGS:
            return ops[0] if ops else 0
        if code == _SUBBLOCK:
            _skip_block(block.reader)
    return 0


def read_index_modules(path: str) -> IndexModules:
    """The module table of the index file at `path`; a bad file is bad input naming it."""
    data = read_input(path, "ThinLTO index")
    if not data:
        raise BadInput(
            f"{path}: ThinLTO index is empty (0 bytes): clang would silently compile the module"
            " without ThinLTO"
        )
    try:
        return parse_index(data)
    except TruncatedBitcode as err:
        raise BadInput(
            f"{path}: ThinLTO index is truncated ({err}): the step that wrote it did not"
            " finish; run the index step again"
        ) from None
    except ValueError as err:
        raise BadInput(f"{path}: not a ThinLTO index: {err}") from None


class IndexRecords:
    """An individual index taken apart: its module table and summary records, decoded,
    and every other byte. A result cache keys on these rather than on the file, whose
    bytes depend on how modules are spelled (see `read_index_records`)."""

    __slots__ = ("modules", "other", "skip", "summary", "summary_bytes")

    def __init__(
        self,
        modules: list[tuple[int, bytes, list[tuple[int, list[int]]]]],
        summary: list[tuple[int, list[int]]] | None,
        summary_bytes: bytes,
        other: bytes,
        skip: bool | None = None,
    ) -> None:
        self.modules = modules
        """(module id, path, the records that follow its entry, e.g. its hash) in order."""
        self.summary = summary
        """The summary block's records as (code, operands) in order; None when it holds
        something they cannot express (a blob, a sub-block)."""
        self.summary_bytes = summary_bytes
        """The summary block's content as written."""
        self.other = other
        """The file without the module table, the summary block and the module block's
        length word."""
        self.skip = skip
        """The summary's skip flag (`IndexModules.skip`); None when its FLAGS record
        could not be read, or the blocks are not one module table and at most one
        summary after it, as LLVM writes them."""

    def module_table(self) -> IndexModules | None:
        """What `parse_index` says of the same index, from the records already decoded:
        so that a distributor reads each index once for its check and its key. None when
        the skip flag could not be read (`parse_index` then says why)."""
        if self.skip is None:
            return None
        paths = []
        hashes: list[tuple[int, ...]] = []
        for _, path, records in self.modules:
            paths.append(path)
            found: tuple[int, ...] = ()
            for code, ops in records:
                if code == _MST_CODE_HASH:
                    found = tuple(ops)
            hashes.append(found)
        return IndexModules(paths, self.skip, hashes)


def read_index_records(data: bytes, *, decode_summary: bool = True) -> IndexRecords:
    """Take an individual index apart (see `IndexRecords`). Raises ValueError when `data`
    is not a well-formed index.

    With `decode_summary` false, `summary` is None and only the module table is decoded
    (the summary block is skipped by its length): what a key of the bytes as written
    needs.

    Why: two indexes of one program can differ in bytes but not in meaning. Module paths
    differ (LLD's DTLTO names archive members after its process id: `lib.a(x.o at
    84).2.1F3A.o`), and LLD numbers the summary's values and orders its records by
    iterating hash tables keyed by those paths.
    """
    reader, width, blockinfo = _find_module_block(data)
    length_at = (reader.pos >> 3) - 4
    modules: list[tuple[int, bytes, list[tuple[int, list[int]]]]] | None = None
    summary: list[tuple[int, list[int]]] | None = None
    summary_bytes = b""
    skip: bool | None = False  # no summary block: nothing is skipped (`_module_block`)
    order: list[int] = []
    cuts: list[tuple[int, int]] = []
    try:
        for block_id, sub_width, inherited, start, end in _subblocks(reader, width, blockinfo):
            if end > reader.end:
                raise _Truncated
            if block_id in (_MODULE_STRTAB_BLOCK, _GLOBALVAL_SUMMARY_BLOCK):
                order.append(block_id)
            if block_id == _MODULE_STRTAB_BLOCK:
                modules = _module_table(_Block(reader, sub_width, inherited))
                cuts.append((start, end >> 3))
            elif block_id == _GLOBALVAL_SUMMARY_BLOCK:
                summary_bytes = data[start + 4 : end >> 3]
                at = reader.pos
                try:
                    flags = _summary_flags(_Block(reader, sub_width, inherited))
                    skip = flags & _SKIP_MODULE_FLAG != 0
                except (ValueError, _Truncated):
                    skip = None
                reader.pos = at
                if decode_summary:
                    summary = _summary_records(_Block(reader, sub_width, inherited))
                cuts.append((start, end >> 3))
    except _Truncated:
        raise ValueError("truncated bitcode") from None
    if modules is None:
        raise ValueError("no module table (MODULE_STRTAB_BLOCK): not a ThinLTO index")
    if order not in ([_MODULE_STRTAB_BLOCK], [_MODULE_STRTAB_BLOCK, _GLOBALVAL_SUMMARY_BLOCK]):
        skip = None  # not as LLVM writes it: `parse_index` reads it its own way
    pieces = [data[:length_at]]
    pos = length_at + 4
    for start, stop in cuts:
        pieces.append(data[pos:start])
        pos = stop
    pieces.append(data[pos:])
    return IndexRecords(modules, summary, summary_bytes, b"".join(pieces), skip)


def _module_table(block: _Block) -> list[tuple[int, bytes, list[tuple[int, list[int]]]]]:
    modules: list[tuple[int, bytes, list[tuple[int, list[int]]]]] = []
    while (entry := block.next()) is not None:
        code, ops, tail = entry
        if code == _MST_CODE_ENTRY:
            if not ops:
                raise ValueError("module table entry without a module id")
            modules.append((ops[0], tail or bytes(c & 0xFF for c in ops[1:]), []))
        elif code == _SUBBLOCK:
            _skip_block(block.reader)
        elif modules:
            modules[-1][2].append((code, [*ops, *tail]))
        else:
            raise ValueError(f"module table record {code} before any entry")
    return modules


def _summary_records(block: _Block) -> list[tuple[int, list[int]]] | None:
    """Every record of a summary block as (code, operands); None when one holds a blob,
    the block a sub-block, or a record is malformed. What `_summary_records_slowly`
    reads, with the bits in this walk's locals rather than in a cursor object per
    record and a method call per field: a warm link's distributor pays this for every
    index it has no alias for. _Truncated when the data ends first."""
    reader = block.reader
    data = reader.data
    end = reader.end
    pos = reader.pos
    buf = left = 0

    def read(width: int) -> int:
        nonlocal pos, buf, left
        if left < width:
            if pos + width > end:
                raise _Truncated
            buf = int.from_bytes(data[pos >> 3 : (pos >> 3) + 65], "little") >> (pos & 7)
            left = min(512, end - pos)
        value = buf & ((1 << width) - 1)
        buf >>= width
        left -= width
        pos += width
        return value

    def vbr(width: int) -> int:
        nonlocal pos, buf, left
        high = 1 << (width - 1)
        value = shift = 0
        while True:
            if left < width:
                if pos + width > end:
                    raise _Truncated
                buf = int.from_bytes(data[pos >> 3 : (pos >> 3) + 65], "little") >> (pos & 7)
                left = min(512, end - pos)
            piece = buf & ((high << 1) - 1)
            buf >>= width
            left -= width
            pos += width
            value |= (piece & (high - 1)) << shift
            if not piece & high:
                return value
            shift += width - 1
            if shift > 64:
                raise ValueError("VBR value wider than 64 bits")

    def scalar(kind: int, value: int) -> int:
        if kind == _VBR:
            return vbr(value)
        if kind == _FIXED:
            return read(value)
        return _CHAR6_TABLE[read(6)]  # _CHAR6: an array's elements are never literals

    def vbr8s(count: int) -> list[int]:
        """`count` VBR8 fields (a summary's reference and call lists): shifted to a byte
        boundary, each chunk of 8 bits is a byte, so the fields are read from a bytes
        object rather than by a call each."""
        nonlocal pos, buf, left
        chunks = min(10 * count, (end - pos) >> 3)
        start = pos >> 3
        run = data[start : start + chunks + 1]
        if pos & 7:
            run = (int.from_bytes(run, "little") >> (pos & 7)).to_bytes(len(run), "little")
        run = run[:chunks]
        buf = left = 0
        if run[:count].isascii() and len(run) >= count:  # every field a single chunk
            pos += 8 * count
            return list(run[:count])
        values: list[int] = []
        value = shift = 0
        for used, byte in enumerate(run, 1):
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                values.append(value)
                if len(values) == count:
                    pos += 8 * used
                    return values
                value = shift = 0
            else:
                shift += 7
                if shift > 64:
                    raise ValueError("VBR value wider than 64 bits")
        raise _Truncated

    width = block.width
    abbrevs = block.abbrevs
    records: list[tuple[int, list[int]]] = []
    try:
        while True:
            abbrev_id = read(width)
            if abbrev_id == 3:  # UNABBREV_RECORD: code, operand count, operands, in VBR6
                code = vbr(6)
                records.append((code, [vbr(6) for _ in range(vbr(6))]))
                continue
            if abbrev_id < 3:
                reader.pos = pos
                if abbrev_id == 0:  # END_BLOCK
                    reader.align32()
                    return records
                if abbrev_id == 1:  # ENTER_SUBBLOCK
                    return None
                abbrevs.append(_define_abbrev(reader))  # DEFINE_ABBREV
                pos = reader.pos
                buf = left = 0
                continue
            if abbrev_id - 4 >= len(abbrevs):
                raise ValueError(f"undefined abbreviation {abbrev_id}")
            abbrev = abbrevs[abbrev_id - 4]
            fields: list[int] = []
            for i, (kind, value) in enumerate(abbrev):
                if kind == _VBR:
                    fields.append(vbr(value))
                elif kind == _LITERAL:
                    fields.append(value)
                elif kind == _FIXED:
                    fields.append(read(value))
                elif kind == _ARRAY:
                    count = vbr(6)
                    if count > end - pos:
                        raise _Truncated  # more elements than bits left
                    element_kind, element = abbrev[i + 1]
                    if (element_kind, element) == (_VBR, 8):
                        fields += vbr8s(count)
                    else:
                        fields += [scalar(element_kind, element) for _ in range(count)]
                    break
                elif kind == _BLOB:
                    return None
                else:
                    fields.append(_CHAR6_TABLE[read(6)])
            records.append((fields[0], fields[1:]))
    except ValueError:
        return None  # as the slow walk: a record it cannot read is not expressed


def _summary_records_slowly(block: _Block) -> list[tuple[int, list[int]]] | None:
    """`_summary_records` one call per field (`_values`): the reference it is tested
    against."""
    records: list[tuple[int, list[int]]] = []
    while True:
        try:
            entry = block.next(_values)
        except ValueError:
            return None  # a blob: not expressible as operands
        if entry is None:
            return records
        code, ops, _ = entry
        if code == _SUBBLOCK:
            return None
        records.append((code, ops))
