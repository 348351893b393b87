"""A bitcode module's relocation model, read from its module flags.

Why: for a relocatable link (`ld.lld -r`), LLD's in-process ThinLTO sets no relocation
model, so each backend takes its module's own (llvm/lib/LTO/LTOBackend.cpp,
`createTargetMachine`): PIC when the module flag "PIC Level" is set and not 0, static
otherwise. LLD 22's DTLTO job file then names no model, and a separate `clang -x ir`
backend falls back to its driver's default (PIE on Debian): non-PIC bitcode such as
the Linux kernel's fails (`invalid operand for inline asm constraint 'i'`) or compiles
to other code. The backend gets the module's own model as a flag instead
(`relocation_flag`).

Cost, bounded by the module's top-level records: clang writes the flag only when the
level is not 0, as a string in the module's metadata strings blob (raw bytes), so a
module whose bytes lack "PIC Level" is not PIC: one `bytes.find`, no decoding. Only
otherwise are records read: the module block's records up to its metadata block
(global values are counted: constants are numbered after them), the metadata strings,
the named metadata `llvm.module.flags` (reached through the metadata index LLVM writes
for lazy loading, so that debug information is never decoded), its flag nodes and
their values, and the module-level constants they name. Function bodies are never
read. Standard library only: `dist-lto opt` runs it once per backend.
"""

from dist_lto.llvm.bitcode import (
    _ARRAY,
    _BLOB,
    _BLOCKINFO_BLOCK,
    _MODULE_BLOCK,
    _SUBBLOCK,
    Abbrev,
    _Bits,
    _Block,
    _blockinfo,
    _find_module_block,
    _Reader,
    _record,
    _short_record,
    _skip_block,
    _Truncated,
    read_blob,
)

PIC_LEVEL = b"PIC Level"
PIE_LEVEL = b"PIE Level"

RELOCATION_FLAGS = frozenset({
    "-fpic", "-fPIC", "-fpie", "-fPIE", "-fno-pic", "-fno-PIC", "-fno-pie", "-fno-PIE",
})  # fmt: skip
"""Clang flags that choose a relocation model: a command holding one says its own."""

_CONSTANTS_BLOCK = 11
_FUNCTION_BLOCK = 12
_METADATA_BLOCK = 15
_GLOBAL_VALUE_CODES = frozenset({7, 8, 9, 14, 15})
"""GLOBALVAR, FUNCTION, ALIAS_OLD, ALIAS, IFUNC: each is a value, numbered before constants."""
_CST_SETTYPE = 1
_CST_INTEGER = 4
_MD_VALUE = 2
_MD_NODE = 3
_MD_NAME = 4
_MD_DISTINCT_NODE = 5
_MD_NAMED_NODE = 10
_MD_STRINGS = 35
_MD_INDEX_OFFSET = 38
_MD_INDEX = 39
_MD_NOT_NUMBERED = frozenset({_MD_NAME, 6, _MD_NAMED_NODE, 11, _MD_STRINGS, 36,
                              _MD_INDEX_OFFSET, _MD_INDEX})  # fmt: skip
"""Metadata records that define no metadata id (names, kinds, attachments, the index);
STRINGS defines one per string."""


def relocation_levels(data: bytes) -> tuple[int, int]:
    """The module's (PIC level, PIE level): 0 for a flag it does not set.

    Raises ValueError when `data` is not a bitcode module that can be read.
    """
    if PIC_LEVEL not in data:
        return 0, 0
    try:
        flags = _flag_values(data, (PIC_LEVEL, PIE_LEVEL))
    except _Truncated:
        raise ValueError("truncated bitcode") from None
    return flags.get(PIC_LEVEL, 0), flags.get(PIE_LEVEL, 0)


def flag_for_levels(pic: int, pie: int) -> str:
    """The clang flag that gives a backend the model of a module with these levels."""
    if pic <= 0:
        return "-fno-pic"
    if pie > 0:
        return "-fpie" if pie == 1 else "-fPIE"
    return "-fpic" if pic == 1 else "-fPIC"


def relocation_flag(data: bytes) -> str:
    """The clang flag for the relocation model of the module in `data` (ValueError if it
    cannot be read)."""
    return flag_for_levels(*relocation_levels(data))


def says_relocation_model(args: list[str]) -> bool:
    """Whether a command's arguments choose a relocation model themselves."""
    return any(arg in RELOCATION_FLAGS for arg in args) or "-mrelocation-model" in args


def _operands(
    reader: _Reader, abbrev_id: int, abbrevs: list[Abbrev]
) -> tuple[int, list[int], bytes]:
    """One record as (code, operands, blob): arrays as integers, a blob as bytes."""
    if abbrev_id == 3:
        return _record(reader, abbrev_id, abbrevs)
    index = abbrev_id - 4
    if index >= len(abbrevs):
        raise ValueError(f"undefined abbreviation {abbrev_id}")
    abbrev = abbrevs[index]
    fields: list[int] = []
    for i, encoding in enumerate(abbrev):
        kind = encoding[0]
        if kind == _ARRAY:
            bits = _Bits(reader)
            count = bits.vbr(6)
            if count > bits.end - bits.pos:
                raise _Truncated
            element = abbrev[i + 1]
            fields += [bits.scalar(element) for _ in range(count)]
            reader.pos = bits.pos
            break
        if kind == _BLOB:
            return fields[0], fields[1:], read_blob(reader)
        fields.append(reader.scalar(encoding))
    return fields[0], fields[1:], b""


def _flag_values(data: bytes, names: tuple[bytes, ...]) -> dict[bytes, int]:
    """The integer values of the module flags `names` that the module sets."""
    reader, width, blockinfo = _find_module_block(data)
    block = _Block(reader, width, blockinfo.get(_MODULE_BLOCK, []))
    global_values = 0
    constants: tuple[int, int, list[Abbrev]] | None = None
    while (entry := block.next(_short_record)) is not None:
        code, ops, _ = entry
        if code != _SUBBLOCK:
            global_values += code in _GLOBAL_VALUE_CODES
            continue
        block_id, sub_width = ops
        reader.align32()
        end = reader.pos + 32
        end += reader.read(32) * 32
        if end > reader.end:
            raise _Truncated
        if block_id == _BLOCKINFO_BLOCK:
            _blockinfo(reader, sub_width, blockinfo)
        elif block_id == _CONSTANTS_BLOCK and constants is None:
            constants = (reader.pos, sub_width, blockinfo.get(_CONSTANTS_BLOCK, []))
        elif block_id == _METADATA_BLOCK:
            metadata = _Block(reader, sub_width, blockinfo.get(_METADATA_BLOCK, []))
            values = _flag_value_ids(metadata, names)
            wanted = {name: vid - global_values for name, vid in values.items()}
            return _integers(reader, constants, wanted)
        elif block_id == _FUNCTION_BLOCK:
            break  # the module's metadata comes before its functions: it has none
        reader.pos = end
    return {}


def _flag_value_ids(block: _Block, names: tuple[bytes, ...]) -> dict[bytes, int]:
    """Value ids of the flags `names` in the module's metadata block."""
    reader = block.reader
    strings: list[bytes] = []
    numbered: dict[int, tuple[int, list[int]]] = {}
    next_id = 0
    index_base: int | None = None
    index: list[int] | None = None
    name = b""
    flags: list[int] | None = None
    while (entry := block.next(_operands)) is not None:
        code, ops, blob = entry
        if code == _SUBBLOCK:
            _skip_block(reader)
        elif code == _MD_STRINGS:
            added = _strings(ops, blob)
            strings += added
            next_id += len(added)
        elif code == _MD_INDEX_OFFSET:
            if len(ops) < 2:
                raise ValueError("short metadata index offset")
            index_base = reader.pos  # what the offset and the index count from
            reader.pos = index_base + (ops[0] | ops[1] << 32)
            if reader.pos > reader.end:
                raise _Truncated
        elif code == _MD_INDEX:
            index = ops
        elif code == _MD_NAME:
            name = bytes(c & 0xFF for c in ops)
        elif code == _MD_NAMED_NODE:
            if name == b"llvm.module.flags":
                flags = ops
            name = b""
        elif code not in _MD_NOT_NUMBERED:
            if code in (_MD_VALUE, _MD_NODE, _MD_DISTINCT_NODE):
                numbered[next_id] = (code, ops)
            next_id += 1
    if flags is None:
        return {}

    def record(md: int) -> tuple[int, list[int]]:
        found = numbered.get(md)
        if found is not None:
            return found
        at = md - len(strings)
        if index is None or index_base is None or not 0 <= at < len(index):
            raise ValueError(f"module flag metadata {md} not found")
        reader.pos = index_base + sum(index[: at + 1])
        entry = block.next(_operands)
        if entry is None or entry[0] == _SUBBLOCK:
            raise ValueError(f"module flag metadata {md}: no record at its index position")
        return entry[0], entry[1]

    values: dict[bytes, int] = {}
    for node in flags:
        code, ops = record(node)
        if code not in (_MD_NODE, _MD_DISTINCT_NODE) or len(ops) != 3:
            raise ValueError("a module flag that is not a (behaviour, name, value) node")
        key = ops[1] - 1
        if not 0 <= key < len(strings) or strings[key] not in names:
            continue
        code, value = record(ops[2] - 1)
        if code != _MD_VALUE or len(value) != 2:
            raise ValueError(f"module flag {strings[key].decode()!r} has no constant value")
        values[strings[key]] = value[1]
    return values


def _strings(ops: list[int], blob: bytes) -> list[bytes]:
    """METADATA_STRINGS: [count, offset of the characters], and a blob holding the
    lengths (VBR6) then the characters."""
    if len(ops) < 2 or ops[1] > len(blob):
        raise ValueError("malformed metadata strings record")
    count, offset = ops[0], ops[1]
    bits = _Bits(_Reader(blob, 0, offset))
    strings = []
    at = offset
    for _ in range(count):
        length = bits.vbr(6)
        strings.append(blob[at : at + length])
        at += length
    if at > len(blob):
        raise ValueError("metadata strings run past their blob")
    return strings


def _integers(
    reader: _Reader, constants: tuple[int, int, list[Abbrev]] | None, wanted: dict[bytes, int]
) -> dict[bytes, int]:
    """The module-level integer constants at the positions `wanted` names."""
    if not wanted:
        return {}
    if constants is None:
        raise ValueError("module flags name constants the module does not have")
    start, width, abbrevs = constants
    reader.pos = start
    block = _Block(reader, width, abbrevs)
    by_position: dict[int, list[bytes]] = {}
    for name, position in wanted.items():
        by_position.setdefault(position, []).append(name)
    if min(by_position) < 0:
        raise ValueError("a module flag's value is a global, not a constant")
    last = max(by_position)
    found: dict[bytes, int] = {}
    position = 0
    while position <= last and (entry := block.next(_short_record)) is not None:
        code, ops, _ = entry
        if code == _SUBBLOCK:
            _skip_block(reader)
            continue
        if code == _CST_SETTYPE:
            continue
        for name in by_position.get(position, ()):
            if code != _CST_INTEGER or not ops:
                raise ValueError(f"module flag {name.decode()!r} is not an integer")
            found[name] = -(ops[0] >> 1) if ops[0] & 1 else ops[0] >> 1
        position += 1
    if len(found) != len(wanted):
        raise ValueError("module flags name constants the module does not have")
    return found


def module_relocation_flag(path: str) -> str:
    """`relocation_flag` of the module file at `path`; BadInput naming it when it cannot
    be read or its module flags cannot be."""
    from dist_lto.errors import BadInput

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise BadInput(f"{path}: cannot read the module: {err.strerror}") from None
    try:
        return relocation_flag(data)
    except ValueError as err:
        raise BadInput(
            f"{path}: cannot read the module's relocation model (its module flags): {err};"
            " name one for the backend (-fpic, -fno-pic)"
        ) from None
