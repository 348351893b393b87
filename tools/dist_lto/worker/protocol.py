"""The messages of Buck2's local worker protocol, as protocol buffers' wire format.

Buck2 (app/buck2_worker_proto/worker.proto, package `worker`) calls
`worker.Worker/Execute` with an `ExecuteCommand` and takes an `ExecuteResponse`:

    ExecuteCommand  1: repeated bytes argv   2: repeated EnvironmentEntry env
                    3: optional uint64 timeout_s
    EnvironmentEntry  1: bytes key  2: bytes value
    ExecuteResponse 1: int32 exit_code   2: string stderr
                    3: optional uint64 timed_out_after_s
    ExecuteEvent    oneof: 1 ExecuteCommand command, 2 ExecuteCancel cancel (`Exec`)

Four small messages do not justify generated code and a protobuf runtime in the
worker: this module encodes and decodes them by hand (both directions, so tests and
bench/opt_overhead.py can play Buck2), and tests/test_opt_worker.py holds it to the
protobuf library's own encoding.
"""

from dataclasses import dataclass, field

SERVICE = "worker.Worker"
"""The gRPC service Buck2 calls (`/worker.Worker/Execute`, `/worker.Worker/Exec`)."""

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


class MalformedMessage(ValueError):
    """Bytes that are not the message they should be."""


@dataclass
class Command:
    """An `ExecuteCommand`: one action's arguments (the worker's own are not in them)."""

    argv: list[bytes] = field(default_factory=list)
    env: list[tuple[bytes, bytes]] = field(default_factory=list)
    timeout_s: int | None = None


@dataclass
class Response:
    """An `ExecuteResponse`."""

    exit_code: int = 0
    stderr: str = ""
    timed_out_after_s: int | None = None


@dataclass
class Event:
    """An `ExecuteEvent`: a command, or a cancellation of the stream's command."""

    command: Command | None = None
    cancel: bool = False


def varint(value: int) -> bytes:
    """`value` in groups of 7 bits, the lowest first, each but the last with its top bit
    set: protobuf's varint, and the continuation of an HPACK integer (`hpack.py`)."""
    value &= (1 << 64) - 1  # negative int32s are sign-extended to ten bytes
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _tag(number, _LENGTH) + varint(len(payload)) + payload


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise MalformedMessage("truncated or overlong varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value & ((1 << 64) - 1), pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) for every field, unknown ones included."""
    found: list[tuple[int, int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise MalformedMessage("field number 0")
        value: int | bytes
        if wire_type == _VARINT:
            value, pos = _read_varint(data, pos)
        elif wire_type == _LENGTH:
            size, pos = _read_varint(data, pos)
            if pos + size > len(data):
                raise MalformedMessage("truncated field")
            value, pos = data[pos : pos + size], pos + size
        elif wire_type in (_FIXED64, _FIXED32):
            size = 8 if wire_type == _FIXED64 else 4
            if pos + size > len(data):
                raise MalformedMessage("truncated field")
            value, pos = int.from_bytes(data[pos : pos + size], "little"), pos + size
        else:
            raise MalformedMessage(f"wire type {wire_type}")
        found.append((number, wire_type, value))
    return found


def _bytes_of(wire_type: int, value: int | bytes) -> bytes:
    if wire_type != _LENGTH or not isinstance(value, bytes):
        raise MalformedMessage("expected a length-delimited field")
    return value


def _int_of(wire_type: int, value: int | bytes) -> int:
    if wire_type != _VARINT or not isinstance(value, int):
        raise MalformedMessage("expected a varint field")
    return value


def decode_command(data: bytes) -> Command:
    command = Command()
    for number, wire_type, value in _fields(data):
        if number == 1:
            command.argv.append(_bytes_of(wire_type, value))
        elif number == 2:
            key = val = b""
            for inner, inner_type, inner_value in _fields(_bytes_of(wire_type, value)):
                if inner == 1:
                    key = _bytes_of(inner_type, inner_value)
                elif inner == 2:
                    val = _bytes_of(inner_type, inner_value)
            command.env.append((key, val))
        elif number == 3:
            command.timeout_s = _int_of(wire_type, value)
    return command


def encode_command(command: Command) -> bytes:
    out = [_length_delimited(1, arg) for arg in command.argv]
    for key, value in command.env:
        entry = (_length_delimited(1, key) if key else b"") + (
            _length_delimited(2, value) if value else b""
        )
        out.append(_length_delimited(2, entry))
    if command.timeout_s is not None:
        out.append(_tag(3, _VARINT) + varint(command.timeout_s))
    return b"".join(out)


def encode_response(response: Response) -> bytes:
    out = []
    if response.exit_code:
        out.append(_tag(1, _VARINT) + varint(response.exit_code))
    if response.stderr:
        out.append(_length_delimited(2, response.stderr.encode()))
    if response.timed_out_after_s is not None:
        out.append(_tag(3, _VARINT) + varint(response.timed_out_after_s))
    return b"".join(out)


def decode_response(data: bytes) -> Response:
    response = Response()
    for number, wire_type, value in _fields(data):
        if number == 1:
            code = _int_of(wire_type, value) & 0xFFFFFFFF
            response.exit_code = code - (1 << 32) if code >= 1 << 31 else code
        elif number == 2:
            try:
                response.stderr = _bytes_of(wire_type, value).decode()
            except UnicodeDecodeError:
                raise MalformedMessage("stderr is not UTF-8") from None
        elif number == 3:
            response.timed_out_after_s = _int_of(wire_type, value)
    return response


def decode_event(data: bytes) -> Event:
    event = Event()
    for number, wire_type, value in _fields(data):
        if number == 1:
            event.command, event.cancel = decode_command(_bytes_of(wire_type, value)), False
        elif number == 2:
            event.command, event.cancel = None, True
    return event


def encode_event(event: Event) -> bytes:
    if event.cancel:
        return _length_delimited(2, b"")
    return _length_delimited(1, encode_command(event.command or Command()))
