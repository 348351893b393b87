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

from dist_lto import TYPE_CHECKING
from dist_lto.errors import BadInput

if TYPE_CHECKING:
    from mmap import mmap

ARCH_MAGIC = b"!<arch>\n"
THIN_MAGIC = b"!<thin>\n"
HEADER_SIZE = 60
_TERMINATOR = b"`\n"
_SYMBOL_TABLES = (b"/", b"/SYM64/")
_NAME_TABLE = b"//"


def _header(data: bytes, offset: int, path: str) -> tuple[bytes, int]:
    """The name field (without its space padding) and size of the header at `offset`;
    anything malformed is bad input naming the offset."""
    raw = data[offset : offset + HEADER_SIZE]
    if len(raw) < HEADER_SIZE:
        raise BadInput(f"{path}: truncated member header at offset {offset}")
    if raw[58:60] != _TERMINATOR:
        raise BadInput(f"{path}: malformed member header at offset {offset} (bad terminator)")
    size_field = raw[48:58].rstrip(b" ")
    if not size_field.isdigit():
        raise BadInput(f"{path}: malformed member header at offset {offset} (size {size_field!r})")
    return raw[0:16].rstrip(b" "), int(size_field)


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


def read_thin_members(data: bytes, path: str) -> list[bytes]:
    """The member names of the GNU thin archive `data` (read from `path`), in archive
    order: paths relative to the archive's directory unless absolute.

    Symbol and name tables are accepted only before the first member, as the
    linker reads them; every malformation is `BadInput` naming `path`.
    """
    offset, table = member_headers(data, path)
    names = _well_formed_names(data, offset, table)
    return names if names is not None else _names_or_error(data, offset, table, path)


def member_headers(data: bytes, path: str) -> tuple[int, bytes | None]:
    """Where the thin archive's member headers begin, past its symbol and name tables,
    and the name table's data (None without one)."""
    if not data.startswith(THIN_MAGIC):
        raise BadInput(f"{path}: not a thin archive")
    offset = len(THIN_MAGIC)
    table: bytes | None = None
    while offset < len(data):
        name, size = _header(data, offset, path)
        if name not in _SYMBOL_TABLES and name != _NAME_TABLE:
            break
        end = offset + HEADER_SIZE + size
        if end > len(data):
            raise BadInput(f"{path}: truncated {name.decode()!r} table at offset {offset}")
        if name == _NAME_TABLE:
            table = data[offset + HEADER_SIZE : end]
        offset = end + (size & 1)
    return offset, table


def _well_formed_names(data: bytes, offset: int, table: bytes | None) -> list[bytes] | None:
    """The names of the member headers from `offset` on, read a column at a time (slices
    and joins over every header at once, C speed for thousands of members); None
    when anything is unusual, for `_names_or_error` to find and name."""
    rows = range(offset, len(data), HEADER_SIZE)
    count = len(rows)
    if (len(data) - offset) % HEADER_SIZE or data[offset + 58 :: HEADER_SIZE] != b"`" * count:
        return None
    if data[offset + 59 :: HEADER_SIZE] != b"\n" * count:
        return None
    sizes = [data[i + 48 : i + 58].rstrip(b" ") for i in rows]
    if sizes and not (all(sizes) and b"".join(sizes).isdigit()):
        return None
    fields = [data[i : i + 16].rstrip(b" ") for i in rows]
    entries: dict[bytes, bytes] = {}
    if table is not None:
        start = 0
        for entry in table.split(b"/\n")[:-1]:  # the text after the last `/\n` is no entry
            entries[b"/%d" % start] = entry
            start += len(entry) + 2
    names: list[bytes] = []
    for field in fields:
        name = entries.get(field)
        if name is None and field[-1:] == b"/":
            name = field[:-1]
        if not name:
            return None  # an unknown or empty long name, or no GNU member name
        names.append(name)
    return names


def _names_or_error(data: bytes, offset: int, table: bytes | None, path: str) -> list[bytes]:
    """The member names, header by header: the reference `_well_formed_names` agrees with,
    and the one that names what is wrong."""
    names: list[bytes] = []
    while offset < len(data):
        name, _ = _header(data, offset, path)
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
        names.append(name)
        offset += HEADER_SIZE
    return names


def gnu_name_table(data: "bytes | memoryview | mmap", path: str) -> tuple[int, int] | None:
    """Offset and size of the `//` name table's data in regular archive `data`, if it has one.

    GNU archives put it first or right after the symbol table. Anything unexpected
    yields None: libarchive, which reads the archive, reports malformations itself.
    """
    offset = len(ARCH_MAGIC)
    for _ in range(2):
        try:
            name, size = _header(bytes(data[offset : offset + HEADER_SIZE]), 0, path)
        except BadInput:
            return None
        if name == _NAME_TABLE:
            return offset + HEADER_SIZE, size
        if name not in _SYMBOL_TABLES:
            return None
        offset += HEADER_SIZE + size + (size & 1)
    return None
