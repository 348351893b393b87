"""HPACK (RFC 7541), the header compression of HTTP/2: the request headers Buck2 sends
the opt worker, decoded, and the few the worker answers with, encoded.

Decoding is complete (every representation, the dynamic table, Huffman-coded strings):
a client picks any of them, and a header block left undecoded would leave the table
the next block refers to wrong. Encoding writes literals that neither index nor use
Huffman codes, which every decoder takes and which leave the client's table alone.
"""

from collections import deque

from dist_lto.worker.protocol import varint

TABLE_SIZE = 4096
"""The dynamic table's size the worker allows (SETTINGS_HEADER_TABLE_SIZE's default)."""

_STATIC = (
    (b":authority", b""), (b":method", b"GET"), (b":method", b"POST"), (b":path", b"/"),
    (b":path", b"/index.html"), (b":scheme", b"http"), (b":scheme", b"https"),
    (b":status", b"200"), (b":status", b"204"), (b":status", b"206"), (b":status", b"304"),
    (b":status", b"400"), (b":status", b"404"), (b":status", b"500"),
    (b"accept-charset", b""), (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""), (b"accept-ranges", b""), (b"accept", b""),
    (b"access-control-allow-origin", b""), (b"age", b""), (b"allow", b""),
    (b"authorization", b""), (b"cache-control", b""), (b"content-disposition", b""),
    (b"content-encoding", b""), (b"content-language", b""), (b"content-length", b""),
    (b"content-location", b""), (b"content-range", b""), (b"content-type", b""),
    (b"cookie", b""), (b"date", b""), (b"etag", b""), (b"expect", b""), (b"expires", b""),
    (b"from", b""), (b"host", b""), (b"if-match", b""), (b"if-modified-since", b""),
    (b"if-none-match", b""), (b"if-range", b""), (b"if-unmodified-since", b""),
    (b"last-modified", b""), (b"link", b""), (b"location", b""), (b"max-forwards", b""),
    (b"proxy-authenticate", b""), (b"proxy-authorization", b""), (b"range", b""),
    (b"referer", b""), (b"refresh", b""), (b"retry-after", b""), (b"server", b""),
    (b"set-cookie", b""), (b"strict-transport-security", b""), (b"transfer-encoding", b""),
    (b"user-agent", b""), (b"vary", b""), (b"via", b""), (b"www-authenticate", b""),
)  # fmt: skip
"""RFC 7541 Appendix A: entries 1 to 61."""

_CODE_LENGTHS = (
    "DNSSSSSSSOUSSUSSSSSSSSUSSSSSSSSS6AACD68BAA8B8666555666666678F6CAD67777777777777777777777"
    "878DJDE6F56565666577666567655677777FBEDSKMKKMMMNMNNNNNONOOMNONNNNLMNMNNOMLKMMNNLNMMOLMNN"
    "LLMLNMNNKMMMNMMNQQKJMNMPQQQRRQOPJLQRRQROLLQQSRRRKOKLMLLNMMPPOOQNQRQQRRRRRSRRRRRQU"
)
"""RFC 7541 Appendix B: the length in bits of the Huffman code of each byte and, last,
of EOS, one character each (`int(c, 36)`). The code is canonical: taken in order of
length, then of symbol, each code is the one before it plus one, shifted left to its
length; so the lengths alone give the codes."""
_EOS = 256


class HpackError(ValueError):
    """A header block that is not valid HPACK (a COMPRESSION_ERROR of the connection)."""


def _canonical() -> tuple[dict[int, tuple[int, int, int]], list[int]]:
    """The symbols in code order and, for each code length, its first code, the position
    of its first symbol in that order, and how many codes have that length."""
    lengths = [int(c, 36) for c in _CODE_LENGTHS]
    symbols = sorted(range(len(lengths)), key=lambda s: (lengths[s], s))
    ranges: dict[int, tuple[int, int, int]] = {}
    code, previous = -1, 0
    for position, symbol in enumerate(symbols):
        length = lengths[symbol]
        code = (code + 1) << (length - previous)
        previous = length
        first, start, count = ranges.get(length, (code, position, 0))
        ranges[length] = (first, start, count + 1)
    return ranges, symbols


_RANGES, _SYMBOLS = _canonical()


def huffman_decode(data: bytes) -> bytes:
    """A Huffman-coded string's octets, a bit at a time: the bits read so far are a
    symbol's code once they fall in the range of the codes of their length."""
    out = bytearray()
    code = length = 0
    for byte in data:
        for shift in range(7, -1, -1):
            code = code << 1 | (byte >> shift) & 1
            length += 1
            first, start, count = _RANGES.get(length, (0, 0, 0))
            if 0 <= code - first < count:
                symbol = _SYMBOLS[start + code - first]
                if symbol == _EOS:
                    raise HpackError("EOS in a Huffman-coded string")
                out.append(symbol)
                code = length = 0
    if length > 7 or code != (1 << length) - 1:
        raise HpackError("a Huffman-coded string's padding is not EOS's first bits")
    return bytes(out)


def encode_int(value: int, prefix: int, flags: int = 0) -> bytes:
    """`value` with a `prefix`-bit prefix, the byte's other bits `flags`."""
    top = (1 << prefix) - 1
    if value < top:
        return bytes((flags | value,))
    return bytes((flags | top,)) + varint(value - top)


def literal(name: bytes, value: bytes) -> bytes:
    """A header field as a literal without indexing, its name and value as octets."""
    return b"\x00" + encode_int(len(name), 7) + name + encode_int(len(value), 7) + value


class Decoder:
    """One connection's decoding state: the dynamic table the client's blocks refer to."""

    def __init__(self) -> None:
        self.table: deque[tuple[bytes, bytes]] = deque()
        self.size = 0
        self.max_size = TABLE_SIZE

    def decode(self, block: bytes) -> list[tuple[bytes, bytes]]:
        """The header fields of `block`, in order; HpackError if it is not valid."""
        fields: list[tuple[bytes, bytes]] = []
        pos = 0
        while pos < len(block):
            first = block[pos]
            if first & 0x80:  # indexed field
                index, pos = self._int(block, pos, 7)
                fields.append(self._entry(index))
            elif first & 0x40:  # literal, added to the table
                name, value, pos = self._literal(block, pos, 6)
                fields.append((name, value))
                self._add(name, value)
            elif first & 0x20:  # the table's new size
                size, pos = self._int(block, pos, 5)
                if size > TABLE_SIZE:
                    raise HpackError(f"table size {size} over the {TABLE_SIZE} allowed")
                self.max_size = size
                self._evict(0)
            else:  # literal, not indexed (0000) or never indexed (0001)
                name, value, pos = self._literal(block, pos, 4)
                fields.append((name, value))
        return fields

    def _int(self, block: bytes, pos: int, prefix: int) -> tuple[int, int]:
        top = (1 << prefix) - 1
        value = block[pos] & top
        pos += 1
        if value < top:
            return value, pos
        shift = 0
        while True:
            if pos >= len(block) or shift > 28:
                raise HpackError("truncated or overlong integer")
            byte = block[pos]
            pos += 1
            value += (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value, pos

    def _string(self, block: bytes, pos: int) -> tuple[bytes, int]:
        if pos >= len(block):
            raise HpackError("truncated string")
        coded = block[pos] & 0x80
        size, pos = self._int(block, pos, 7)
        if pos + size > len(block):
            raise HpackError("truncated string")
        data = block[pos : pos + size]
        return (huffman_decode(data) if coded else data), pos + size

    def _literal(self, block: bytes, pos: int, prefix: int) -> tuple[bytes, bytes, int]:
        index, pos = self._int(block, pos, prefix)
        if index:
            name = self._entry(index)[0]
        else:
            name, pos = self._string(block, pos)
        value, pos = self._string(block, pos)
        return name, value, pos

    def _entry(self, index: int) -> tuple[bytes, bytes]:
        if 1 <= index <= len(_STATIC):
            return _STATIC[index - 1]
        dynamic = index - len(_STATIC) - 1
        if index == 0 or dynamic >= len(self.table):
            raise HpackError(f"index {index} is in neither table")
        return self.table[dynamic]

    def _add(self, name: bytes, value: bytes) -> None:
        size = len(name) + len(value) + 32
        self._evict(size)
        if size <= self.max_size:
            self.table.appendleft((name, value))
            self.size += size

    def _evict(self, room: int) -> None:
        """Drop the oldest entries until `room` more octets fit (all, if they cannot)."""
        while self.table and self.size + room > self.max_size:
            name, value = self.table.pop()
            self.size -= len(name) + len(value) + 32
