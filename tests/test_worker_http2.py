"""The opt worker's HTTP/2 server and HPACK decoder, held to other implementations: HPACK
to RFC 7541's examples and the hpack package's encoder, the server to gRPC's own client
(grpcio). tests/test_buck2_worker.py serves real Buck2 with them."""

from __future__ import annotations

import contextlib
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import hpack as reference
import pytest
from dist_lto.worker import hpack, http2
from hpack.huffman import HuffmanEncoder
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH
from hypothesis import given, settings
from hypothesis import strategies as st

# ---------------------------------------------------------------------------------
# HPACK


def _blocks(*hexes: str) -> list[bytes]:
    return [bytes.fromhex(h.replace(" ", "")) for h in hexes]


EXAMPLE_REQUESTS = [
    [(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"),
     (b":authority", b"www.example.com")],
    [(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"),
     (b":authority", b"www.example.com"), (b"cache-control", b"no-cache")],
    [(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/index.html"),
     (b":authority", b"www.example.com"), (b"custom-key", b"custom-value")],
]  # fmt: skip
"""RFC 7541 C.3 and C.4: three requests on one connection."""


@pytest.mark.parametrize(
    "blocks",
    [
        _blocks(  # C.3: literal strings
            "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
            "8286 84be 5808 6e6f 2d63 6163 6865",
            "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
        ),
        _blocks(  # C.4: Huffman-coded strings
            "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
            "8286 84be 5886 a8eb 1064 9cbf",
            "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
        ),
    ],
    ids=["literal", "huffman"],
)
def test_rfc7541s_request_examples_decode_to_its_headers(blocks: list[bytes]) -> None:
    decoder = hpack.Decoder()
    assert [decoder.decode(block) for block in blocks] == EXAMPLE_REQUESTS
    assert list(decoder.table) == [(b"custom-key", b"custom-value"),
                                   (b"cache-control", b"no-cache"),
                                   (b":authority", b"www.example.com")]  # fmt: skip
    assert decoder.size == 164


def test_rfc7541s_response_examples_evict_from_a_table_the_client_shrank() -> None:
    """C.6: Huffman-coded responses in a 256-octet table (set here by a size update)."""
    first, second, third = _blocks(
        "3fe101"  # the table's size: 256
        "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6"
        "2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
        "4883 640e ffc1 c0bf",
        "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab"
        "77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f"
        "9587 3160 65c0 03ed 4ee5 b106 3d50 07",
    )
    decoder = hpack.Decoder()
    decoder.decode(first)
    assert decoder.decode(second)[0] == (b":status", b"307")
    assert decoder.decode(third) == [
        (b":status", b"200"),
        (b"cache-control", b"private"),
        (b"date", b"Mon, 21 Oct 2013 20:13:22 GMT"),
        (b"location", b"https://www.example.com"),
        (b"content-encoding", b"gzip"),
        (b"set-cookie", b"foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"),
    ]
    assert [name for name, _ in decoder.table] == [b"set-cookie", b"content-encoding", b"date"]
    assert decoder.size == 215


@given(st.binary(max_size=64))
def test_huffman_codes_decode_to_what_the_reference_encoder_coded(data: bytes) -> None:
    coded = HuffmanEncoder(REQUEST_CODES, REQUEST_CODES_LENGTH).encode(data)
    assert hpack.huffman_decode(coded) == data


_header = st.tuples(
    st.sampled_from([":path", "content-type", "te", "grpc-timeout", "x-a", "x-b", "x-c"]),
    st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=300),
)


@given(st.lists(st.lists(_header, max_size=6), max_size=12))
def test_header_blocks_decode_to_what_the_reference_encoder_encoded(
    blocks: list[list[tuple[str, str]]],
) -> None:
    """The reference indexes and evicts as it likes (values up to 300 octets fill the
    4096-octet table); both tables must agree block after block."""
    encoder, decoder = reference.Encoder(), hpack.Decoder()
    for headers in blocks:
        decoded = decoder.decode(encoder.encode(headers))
        assert [(n.decode(), v.decode()) for n, v in decoded] == headers


@given(st.binary(max_size=80))
def test_garbage_header_blocks_decode_or_fail_with_hpack_error_never_a_crash(data: bytes) -> None:
    with contextlib.suppress(hpack.HpackError):
        hpack.Decoder().decode(data)


def test_a_huffman_string_padded_with_zeros_or_holding_eos_is_refused() -> None:
    with pytest.raises(hpack.HpackError, match="padding"):
        hpack.huffman_decode(b"\x00")  # '0' (00000) then three bits of 0
    with pytest.raises(hpack.HpackError, match="EOS"):
        hpack.huffman_decode(b"\xff\xff\xff\xfc")  # EOS's 30 bits of 1 and two of 0


# ---------------------------------------------------------------------------------
# The server, called by gRPC's own client


@contextlib.contextmanager
def serving(handler: http2.Handler) -> Iterator[tuple[grpc.Channel, str, list[str]]]:
    """A server running `handler`, a gRPC channel to it, its socket path and its log."""
    logs: list[str] = []
    with tempfile.TemporaryDirectory(prefix="h2-") as tmp:
        path = str(Path(tmp) / "socket")
        server = http2.Server(http2.listen_now(path), handler, logs.append)
        server.start()
        channel = grpc.insecure_channel(
            f"unix:{path}",
            options=[("grpc.max_receive_message_length", -1),
                     ("grpc.max_send_message_length", -1)],
        )  # fmt: skip
        try:
            yield channel, path, logs
        finally:
            channel.close()
            server.close()


def _unary(channel: grpc.Channel, method: str = "/t.T/Call") -> Callable[..., bytes]:
    return channel.unary_unary(method)


def _reversed(call: http2.Call) -> bytes:
    message = call.next_message()
    assert message is not None
    return message[::-1]


def test_calls_sent_at_once_each_get_their_own_reply() -> None:
    with serving(_reversed) as (channel, _, _):
        call = _unary(channel)
        futures = [call.future(f"request {i}".encode() * (i + 1)) for i in range(64)]
        for i, future in enumerate(futures):
            assert future.result(timeout=60) == (f"request {i}".encode() * (i + 1))[::-1]


def test_a_request_and_a_reply_larger_than_every_window_arrive_whole() -> None:
    """1.5 MB each way: past the default windows (64 KiB) and frame size (16 KiB)."""
    data = bytes(range(256)) * 6000
    with serving(_reversed) as (channel, _, _):
        assert _unary(channel)(data, timeout=60) == data[::-1]


def _waiting_for_cancel(cancelled: threading.Event, started: threading.Event) -> http2.Handler:
    def handler(call: http2.Call) -> bytes:
        call.on_cancel(cancelled.set)
        started.set()
        cancelled.wait(60)
        return b"too late"

    return handler


def test_a_call_the_client_cancels_tells_its_handler_and_the_server_serves_on() -> None:
    cancelled, started = threading.Event(), threading.Event()
    with serving(_waiting_for_cancel(cancelled, started)) as (channel, _, _):
        future = _unary(channel).future(b"x")
        assert started.wait(30)
        future.cancel()
        assert cancelled.wait(30)
        with pytest.raises(grpc.FutureCancelledError):
            future.result()
        started.clear()
        cancelled.clear()
        other = _unary(channel, "/t.T/Other").future(b"y")  # kept: a dropped future cancels
        assert started.wait(30)
        assert not other.done()


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload
    )


def test_a_connection_that_ends_cancels_its_calls() -> None:
    cancelled, started = threading.Event(), threading.Event()
    with serving(_waiting_for_cancel(cancelled, started)) as (_, path, _):
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(path)
            block = hpack.literal(b":method", b"POST") + hpack.literal(b":path", b"/t.T/Call")
            message = b"\x00" + (1).to_bytes(4, "big") + b"x"
            client.sendall(http2.PREFACE + _frame(4, 0, 0, b"") + _frame(1, 0x4, 1, block)
                           + _frame(0, 0x1, 1, message))  # fmt: skip
            assert started.wait(30)
        assert cancelled.wait(30)


def test_an_unknown_method_or_a_handler_that_raises_fails_its_call_alone() -> None:
    def handler(call: http2.Call) -> bytes:
        if call.method == "/t.T/Missing":
            raise http2.CallError(http2.UNIMPLEMENTED, "no method /t.T/Missing: 100% sure")
        if call.method == "/t.T/Broken":
            raise RuntimeError("broken")
        return _reversed(call)

    with serving(handler) as (channel, _, logs):
        with pytest.raises(grpc.RpcError) as missing:
            _unary(channel, "/t.T/Missing")(b"x", timeout=30)
        assert missing.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert missing.value.details() == "no method /t.T/Missing: 100% sure"
        with pytest.raises(grpc.RpcError) as broken:
            _unary(channel, "/t.T/Broken")(b"x", timeout=30)
        assert broken.value.code() == grpc.StatusCode.UNKNOWN
        assert "broken" in broken.value.details()
        assert logs == ["/t.T/Broken failed: RuntimeError: broken"]
        assert _unary(channel)(b"abc", timeout=30) == b"cba"


def test_a_client_streams_messages_reach_the_handler_as_they_arrive() -> None:
    """The handler reads the first message before the client sends the second: how
    `Exec` gets its command and, later, perhaps its cancellation."""
    first_read = threading.Event()

    def handler(call: http2.Call) -> bytes:
        got = [call.next_message()]
        first_read.set()
        got += list(iter(call.next_message, None))
        return b"|".join(m or b"" for m in got)

    def messages() -> Iterator[bytes]:
        yield b"command"
        assert first_read.wait(30)
        yield b"then"
        yield b"more"

    with serving(handler) as (channel, _, _):
        call = channel.stream_unary("/t.T/Stream")
        assert call(messages(), timeout=60) == b"command|then|more"


def test_a_message_over_the_limit_fails_its_call_and_the_server_serves_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(http2, "MAX_MESSAGE", 1000)
    with serving(_reversed) as (channel, _, _):
        with pytest.raises(grpc.RpcError) as large:
            _unary(channel)(b"x" * 2000, timeout=30)
        assert large.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert _unary(channel)(b"x" * 1000, timeout=30) == b"x" * 1000


def _read_all(sock: socket.socket) -> bytes:
    sock.settimeout(30)
    data = b""
    while chunk := sock.recv(1 << 16):
        data += chunk
    return data


_MIB_HEADER = (1 << 20).to_bytes(3, "big")
"""The length field of a frame's header claiming a 1 MiB payload."""


@pytest.mark.parametrize(
    "frames",
    [
        _MIB_HEADER + bytes((0, 0)) + (1).to_bytes(4, "big"),  # DATA
        _frame(1, 0, 1, hpack.literal(b":method", b"POST"))  # HEADERS, then CONTINUATION
        + _MIB_HEADER
        + bytes((9, 0x4))
        + (1).to_bytes(4, "big"),
    ],
    ids=["data", "continuation"],
)
def test_a_client_that_breaks_the_protocol_gets_goaway_and_others_are_served(
    frames: bytes,
) -> None:
    with serving(_reversed) as (channel, path, logs):
        with socket.socket(socket.AF_UNIX) as plain:  # not HTTP/2: dropped unanswered
            plain.connect(path)
            plain.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _read_all(plain) == b""
        with socket.socket(socket.AF_UNIX) as oversized:
            oversized.connect(path)
            oversized.sendall(http2.PREFACE + frames)
            received = _read_all(oversized)
        goaway = received[received.index(b"\x00\x00\x08\x07") :][:17]
        assert int.from_bytes(goaway[13:17], "big") == 0x6  # FRAME_SIZE_ERROR
        assert logs == ["a connection broke HTTP/2 and was closed: a frame of 1048576 bytes"]
        assert _unary(channel)(b"ok", timeout=30) == b"ko"


def test_pings_are_answered_with_their_payload() -> None:
    with serving(_reversed) as (_, path, _), socket.socket(socket.AF_UNIX) as client:
        client.connect(path)
        client.sendall(http2.PREFACE + _frame(6, 0, 0, b"12345678"))
        client.settimeout(30)
        received = b""
        deadline = time.monotonic() + 30
        answer = _frame(6, 0x1, 0, b"12345678")  # PING with ACK
        while answer not in received and time.monotonic() < deadline:
            received += client.recv(1 << 16)
        assert answer in received


_frames = st.lists(
    st.tuples(
        st.integers(0, 10),  # the frame types, and one unknown
        st.integers(0, 255),  # flags
        st.sampled_from([0, 1, 2, 3, 5, 0x7FFFFFFF]),  # streams
        st.binary(max_size=40),
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(_frames)
def test_hostile_frames_never_crash_the_server_nor_stop_it_serving(
    frames: list[tuple[int, int, int, bytes]],
) -> None:
    """Whatever a client sends after the preface, the server's threads raise nothing and
    a well-behaved client on another connection is still answered."""
    failures: list[threading.ExceptHookArgs] = []
    hook, threading.excepthook = threading.excepthook, failures.append
    try:
        with serving(_reversed) as (channel, path, _):
            with socket.socket(socket.AF_UNIX) as hostile:
                hostile.connect(path)
                hostile.sendall(http2.PREFACE + b"".join(_frame(*f) for f in frames))
                hostile.shutdown(socket.SHUT_WR)
                hostile.settimeout(30)
                while hostile.recv(1 << 16):  # until the server has closed its side
                    pass
            assert _unary(channel)(b"still", timeout=30) == b"llits"
    finally:
        threading.excepthook = hook
    assert not failures, [f"{f.exc_type.__name__}: {f.exc_value}" for f in failures]


def test_a_long_error_message_is_cut_to_fit_one_frame_and_the_call_fails_cleanly() -> None:
    def handler(call: http2.Call) -> bytes:
        if call.method == "/t.T/Long":
            raise http2.CallError(http2.INTERNAL, "é" * 20000)  # 6 bytes each, encoded
        return _reversed(call)

    with serving(handler) as (channel, _, _):
        with pytest.raises(grpc.RpcError) as failed:
            _unary(channel, "/t.T/Long")(b"x", timeout=30)
        assert failed.value.code() == grpc.StatusCode.INTERNAL
        assert failed.value.details() == "é" * http2.MESSAGE_LIMIT
        assert _unary(channel)(b"ab", timeout=30) == b"ba"
