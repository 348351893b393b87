"""The ar header table, read by hand: all of a GNU thin archive, and where a GNU name table is.

libarchive rejects thin archives (`!<thin>\\n`), so this is the one place where we
parse ar headers ourselves. A thin archive is a GNU archive whose members keep
only their headers: the symbol table (`/` or `/SYM64/`) and the name table (`//`)
carry their data inline, member headers are followed directly by the next header,
and member names are paths to the real files, resolved against the archive's
directory. Each header is 60 bytes: name[16] date[12] uid[6] gid[6] mode[8]
size[10] and the terminator "`\\n"; inline data is padded to an even length.

`gnu_name_table` serves regular archives: libarchive's GNU name table parser
requires every `/` in the table to end a name, so it rejects the names with
directories that `llvm-ar` writes when it flattens a thin archive; the caller
locates the table here and masks those slashes before libarchive reads it.

Standard library only.
"""

from typing import NamedTuple

from dist_lto.errors import BadInput

ARCH_MAGIC = b"!<arch>\n"
THIN_MAGIC = b"!<thin>\n"
HEADER_SIZE = 60
_TERMINATOR = b"`\n"
_SYMBOL_TABLES = (b"/", b"/SYM64/")
_NAME_TABLE = b"//"


class ThinMember(NamedTuple):
    """One member of a thin archive, in archive order."""

    name: bytes
    """The path recorded in the archive, relative to the archive's directory unless absolute."""
    size: int
    """The size the header records (the file itself may have changed since)."""


class _Header(NamedTuple):
    name: bytes
    """The name field without its space padding."""
    size: int


def _header(data: bytes, offset: int, path: str) -> _Header:
    """Parse the header at `offset`; anything malformed is bad input naming the offset."""
    raw = data[offset : offset + HEADER_SIZE]
    if len(raw) < HEADER_SIZE:
        raise BadInput(f"{path}: truncated member header at offset {offset}")
    if raw[58:60] != _TERMINATOR:
        raise BadInput(f"{path}: malformed member header at offset {offset} (bad terminator)")
    size_field = raw[48:58].rstrip(b" ")
    if not size_field.isdigit():
        raise BadInput(f"{path}: malformed member header at offset {offset} (size {size_field!r})")
    return _Header(raw[0:16].rstrip(b" "), int(size_field))


def _long_name(table: bytes | None, field: bytes, offset: int, path: str) -> bytes:
    """Resolve a GNU `/N` name: the entry at byte N of the name table, up to its `/\\n`."""
    if table is None:
        raise BadInput(f"{path}: member header at offset {offset} refers to a missing name table")
    start = int(field[1:])
    end = table.find(b"/\n", start)
    if start >= len(table) or end < 0:
        raise BadInput(
            f"{path}: member header at offset {offset} refers to a bad name-table entry {start}"
        )
    return table[start:end]


def read_thin_members(data: bytes, path: str) -> list[ThinMember]:
    """The members of the GNU thin archive `data` (read from `path`), in archive order.

    Symbol and name tables are accepted only before the first member, as the
    linker reads them; every malformation is `BadInput` naming `path`.
    """
    if not data.startswith(THIN_MAGIC):
        raise BadInput(f"{path}: not a thin archive")
    members: list[ThinMember] = []
    table: bytes | None = None
    offset = len(THIN_MAGIC)
    while offset < len(data):
        header = _header(data, offset, path)
        name = header.name
        body = offset + HEADER_SIZE
        if not members and (name in _SYMBOL_TABLES or name == _NAME_TABLE):
            end = body + header.size
            if end > len(data):
                raise BadInput(f"{path}: truncated {name.decode()!r} table at offset {offset}")
            if name == _NAME_TABLE:
                table = data[body:end]
            offset = end + (header.size & 1)
            continue
        if name[:1] == b"/" and name[1:].isdigit():
            name = _long_name(table, name, offset, path)
        elif name.endswith(b"/") and len(name) > 1:
            name = name[:-1]
        else:
            raise BadInput(
                f"{path}: member header at offset {offset} has name {name!r},"
                " which is not a GNU member name"
            )
        if not name:
            raise BadInput(f"{path}: member header at offset {offset} has an empty name")
        members.append(ThinMember(name, header.size))
        offset = body
    return members


def gnu_name_table(data: bytes | memoryview, path: str) -> tuple[int, int] | None:
    """Offset and size of the `//` name table's data in regular archive `data`, if it has one.

    GNU archives put it first or right after the symbol table. Anything unexpected
    yields None: libarchive, which reads the archive, reports malformations itself.
    """
    offset = len(ARCH_MAGIC)
    for _ in range(2):
        try:
            header = _header(bytes(data[offset : offset + HEADER_SIZE]), 0, path)
        except BadInput:
            return None
        if header.name == _NAME_TABLE:
            return offset + HEADER_SIZE, header.size
        if header.name not in _SYMBOL_TABLES:
            return None
        offset += HEADER_SIZE + header.size + (header.size & 1)
    return None
