"""gRPC's calls over HTTP/2 (RFC 9113), served with the standard library: what Buck2's
worker client (tonic, over a unix socket) needs of a server, and no more.

A connection is one thread reading frames; each call a client opens (a HEADERS frame
on a new stream) gets a thread that runs the handler, which reads the call's request
messages as they arrive and returns the reply's message or raises `CallError`. Served:
unary and client-streaming calls, the peer's flow control over what the worker sends
(it never needs to hold back what it receives: it lets the client send as much as
`MAX_MESSAGE` allows), pings, and cancellation: a stream the client resets, or a
connection that ends, cancels its calls (`Call.on_cancel`). Not served: TLS, server
push (never asked of a server), compressed messages (`grpc-encoding`: Buck2 sends
none; such a message fails its call) and `grpc-timeout` (Buck2 sets none; a request's
own `timeout_s` bounds it).

A gRPC reply is three frames: HEADERS (`:status` 200, `content-type`), DATA (the
message, after a 5-byte prefix: a compression flag and its length) and HEADERS that
end the stream (`grpc-status`, with `grpc-message` when it is not 0).
"""

import contextlib
import io
import os
import queue
import socket
import stat
import struct
import threading
from collections.abc import Callable

from dist_lto.worker import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
MAX_MESSAGE = 1 << 26
"""The largest request message taken (64 MiB): a call sending more fails."""
MAX_HEADER_BLOCK = 1 << 16
"""The largest header block taken: a client sending more ends the connection."""
MESSAGE_LIMIT = 1024
"""The characters of an error's message a reply carries (`grpc-message`)."""
MAX_STREAMS = 256
"""Calls open at once on a connection (SETTINGS_MAX_CONCURRENT_STREAMS)."""

_DATA, _HEADERS, _PRIORITY, _RST_STREAM, _SETTINGS = 0, 1, 2, 3, 4
_PUSH_PROMISE, _PING, _GOAWAY, _WINDOW_UPDATE, _CONTINUATION = 5, 6, 7, 8, 9
_END_STREAM = _ACK = 0x1
_END_HEADERS, _PADDED, _PRIORITY_FLAG = 0x4, 0x8, 0x20
_INITIAL_WINDOW_SIZE, _MAX_FRAME_SIZE, _MAX_CONCURRENT_STREAMS = 0x4, 0x5, 0x3
_NO_ERROR, _PROTOCOL_ERROR, _FLOW_CONTROL_ERROR = 0x0, 0x1, 0x3
_FRAME_SIZE_ERROR, _REFUSED_STREAM, _COMPRESSION_ERROR = 0x6, 0x7, 0x9
_DEFAULT_WINDOW = 65535
_MAX_WINDOW = (1 << 31) - 1
_FRAME_LIMIT = 16384
"""The largest frame payload the worker takes (SETTINGS_MAX_FRAME_SIZE's default)."""


def _frame(kind: int, flags: int, stream: int, payload: bytes | memoryview) -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload
    )


UNKNOWN, INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNIMPLEMENTED, INTERNAL = 2, 3, 8, 12, 13
"""gRPC status codes the server sends."""
_REPLY_HEADERS = b"\x88" + hpack.literal(b"content-type", b"application/grpc")  # 200
_OK_TRAILERS = hpack.literal(b"grpc-status", b"0")
_NO_ERROR_CODE = _NO_ERROR.to_bytes(4, "big")
_OPENING = _frame(
    _SETTINGS,
    0,
    0,
    struct.pack(
        ">HIHIHI",
        _MAX_CONCURRENT_STREAMS,
        MAX_STREAMS,
        _INITIAL_WINDOW_SIZE,
        _MAX_WINDOW,
        _MAX_FRAME_SIZE,
        _FRAME_LIMIT,
    ),
) + _frame(_WINDOW_UPDATE, 0, 0, struct.pack(">I", _MAX_WINDOW - _DEFAULT_WINDOW))
"""The server's first frames: its settings, and the connection's window at its widest
(SETTINGS cannot widen that one)."""


class CallError(Exception):
    """Ends a call with gRPC status `code` and `message` instead of a reply."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ProtocolViolation(Exception):
    """The client broke the protocol: the connection ends with GOAWAY `code`."""

    def __init__(self, code: int, why: str) -> None:
        super().__init__(why)
        self.code = code


class Call:
    """One call: its `method` (the request's `:path`), its request messages as they
    arrive, and its cancellation."""

    __slots__ = (
        "_buffer",
        "_callbacks",
        "_lock",
        "_messages",
        "_received",
        "cancelled",
        "done",
        "method",
        "remote_closed",
        "send_window",
        "stream",
    )

    def __init__(self, stream: int, method: str, send_window: int) -> None:
        self.stream = stream
        self.method = method
        self._messages: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._buffer = bytearray()
        self._received = 0
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self.cancelled = False
        self.done = False
        self.remote_closed = False
        self.send_window = send_window
        """What the client lets the reply send before it widens the window."""

    def next_message(self) -> bytes | None:
        """The next request message; None once the client has sent its last, or the
        call was cancelled."""
        return self._messages.get()

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Call `callback` once if the call is cancelled before its reply (at once if it
        has been)."""
        with self._lock:
            if not self.cancelled:
                self._callbacks.append(callback)
                return
        callback()

    def _cancel(self, answered: bool = False) -> None:
        """Wake the handler and tell the callbacks: the client reset the call, the
        connection ended, or (`answered`) the server ended the call with an error."""
        with self._lock:
            if self.cancelled or (self.done and not answered):
                return
            self.cancelled = True
            callbacks, self._callbacks = self._callbacks, []
        self._messages.put(None)
        for callback in callbacks:
            callback()

    def _data(self, data: bytes, end: bool) -> None:
        """Bytes of the request's DATA frames: split into its messages."""
        self._received += len(data)
        self._buffer += data
        while len(self._buffer) >= 5:
            size = int.from_bytes(self._buffer[1:5], "big")
            if size > MAX_MESSAGE:
                raise CallError(
                    RESOURCE_EXHAUSTED, f"a message of {size} bytes, over {MAX_MESSAGE}"
                )
            if len(self._buffer) < 5 + size:
                break
            if self._buffer[0]:
                raise CallError(UNIMPLEMENTED, "a compressed message")
            self._messages.put(bytes(self._buffer[5 : 5 + size]))
            del self._buffer[: 5 + size]
        if end:
            self.remote_closed = True
            self._messages.put(None)


Handler = Callable[[Call], bytes]


class Connection:
    """One client's connection: its reading thread and the calls it opened."""

    def __init__(self, sock: socket.socket, handler: Handler, log: Callable[[str], None]) -> None:
        self.sock = sock
        self.handler = handler
        self.log = log
        self.decoder = hpack.Decoder()
        self.calls: dict[int, Call] = {}
        self.last_stream = 0
        self.write_lock = threading.Lock()
        self.flow = threading.Condition()
        """Held to change the send windows, and waited on for them to open."""
        self.send_window = _DEFAULT_WINDOW
        self.peer_window = _DEFAULT_WINDOW
        self.peer_frame = _FRAME_LIMIT
        self.unacknowledged = 0
        """What the client sent since the worker last widened the connection's window."""
        self.closed = False

    def serve(self) -> None:
        """Read frames until the client leaves or breaks the protocol; then cancel every
        call still open."""
        reader = io.BufferedReader(socket.SocketIO(self.sock, "r"), 1 << 16)
        try:
            if reader.read(len(PREFACE)) != PREFACE:
                return
            self._send(_OPENING)
            while self._frame(reader):
                pass
        except ProtocolViolation as err:
            self.log(f"a connection broke HTTP/2 and was closed: {err}")
            with contextlib.suppress(OSError):
                self._send(_frame(_GOAWAY, 0, 0, struct.pack(">II", self.last_stream, err.code)))
        except (OSError, ValueError):  # the socket closed under the reader
            pass
        finally:
            self.close()
            reader.close()

    def close(self) -> None:
        """End the connection and cancel its open calls."""
        with self.flow:
            self.closed = True
            calls = list(self.calls.values())
            self.flow.notify_all()
        for call in calls:
            call._cancel()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()

    def _frame(self, reader: "io.BufferedReader[socket.SocketIO]") -> bool:
        header = reader.read(9)
        if len(header) < 9:
            return False
        size = int.from_bytes(header[:3], "big")
        kind, flags = header[3], header[4]
        stream = int.from_bytes(header[5:9], "big") & _MAX_WINDOW
        if size > _FRAME_LIMIT:
            raise ProtocolViolation(_FRAME_SIZE_ERROR, f"a frame of {size} bytes")
        payload = reader.read(size)
        if len(payload) < size:
            return False
        if kind == _HEADERS:
            block = _unpad(payload, flags)
            if flags & _PRIORITY_FLAG:
                block = block[5:]
            while not flags & _END_HEADERS:
                more = reader.read(9)
                if len(more) < 9 or more[3] != _CONTINUATION:
                    raise ProtocolViolation(_PROTOCOL_ERROR, "headers without their CONTINUATION")
                flags |= more[4] & _END_HEADERS
                more_size = int.from_bytes(more[:3], "big")
                if more_size > _FRAME_LIMIT:
                    raise ProtocolViolation(_FRAME_SIZE_ERROR, f"a frame of {more_size} bytes")
                block += reader.read(more_size)
                if len(block) > MAX_HEADER_BLOCK:
                    raise ProtocolViolation(_COMPRESSION_ERROR, "a header block over 64 KiB")
            self._headers(stream, block, bool(flags & _END_STREAM))
        elif kind == _DATA:
            self._data(stream, payload, flags)
        elif kind == _RST_STREAM:
            call = self.calls.pop(stream, None)
            if call is not None:
                call._cancel()
                with self.flow:  # its reply may be waiting for a window
                    self.flow.notify_all()
        elif kind == _SETTINGS:
            if not flags & _ACK:
                self._settings(payload)
        elif kind == _PING:
            if not flags & _ACK:
                self._send(_frame(_PING, _ACK, 0, payload))
        elif kind == _WINDOW_UPDATE:
            self._window_update(stream, int.from_bytes(payload[:4], "big") & _MAX_WINDOW)
        elif kind == _GOAWAY:
            return True  # no new calls come; those open finish, then the client closes
        elif kind == _PUSH_PROMISE:
            raise ProtocolViolation(_PROTOCOL_ERROR, "a client's PUSH_PROMISE")
        return True  # PRIORITY and unknown frames are ignored

    def _headers(self, stream: int, block: bytes, end: bool) -> None:
        try:
            fields = dict(self.decoder.decode(block))
        except hpack.HpackError as err:
            raise ProtocolViolation(_COMPRESSION_ERROR, str(err)) from None
        call = self.calls.get(stream)
        if call is not None:  # trailers: the request ends here
            call._data(b"", True)
            return
        if stream <= self.last_stream:
            return  # trailers of a call already answered or reset
        if stream % 2 == 0:
            raise ProtocolViolation(_PROTOCOL_ERROR, f"headers on stream {stream}")
        self.last_stream = stream
        if len(self.calls) >= MAX_STREAMS:
            self._send(_frame(_RST_STREAM, 0, stream, struct.pack(">I", _REFUSED_STREAM)))
            return
        path = fields.get(b":path", b"").decode(errors="replace")
        call = Call(stream, path, self.peer_window)
        self.calls[stream] = call
        if end:
            call._data(b"", True)
        threading.Thread(target=self._run, args=(call,), name="opt", daemon=True).start()

    def _data(self, stream: int, payload: bytes, flags: int) -> None:
        self.unacknowledged += len(payload)
        if self.unacknowledged > _MAX_WINDOW // 2:
            self._send(_frame(_WINDOW_UPDATE, 0, 0, struct.pack(">I", self.unacknowledged)))
            self.unacknowledged = 0
        call = self.calls.get(stream)
        if call is None or call.remote_closed:
            return  # a call already answered or reset: its late data is dropped
        try:
            call._data(_unpad(payload, flags), bool(flags & _END_STREAM))
        except CallError as err:
            self._reply(call, None, err)
            call._cancel(answered=True)
            return
        if call._received > _MAX_WINDOW // 2:
            self._send(_frame(_WINDOW_UPDATE, 0, stream, struct.pack(">I", call._received)))
            call._received = 0

    def _settings(self, payload: bytes) -> None:
        if len(payload) % 6:
            raise ProtocolViolation(_FRAME_SIZE_ERROR, "a SETTINGS frame of a partial setting")
        for key, value in struct.iter_unpack(">HI", payload):
            if key == _INITIAL_WINDOW_SIZE:
                if value > _MAX_WINDOW:
                    raise ProtocolViolation(_FLOW_CONTROL_ERROR, f"an initial window of {value}")
                with self.flow:
                    for call in self.calls.values():
                        call.send_window += value - self.peer_window
                    self.peer_window = value
                    self.flow.notify_all()
            elif key == _MAX_FRAME_SIZE:
                self.peer_frame = value
        self._send(_frame(_SETTINGS, _ACK, 0, b""))

    def _window_update(self, stream: int, increment: int) -> None:
        with self.flow:
            if stream == 0:
                self.send_window += increment
            elif stream in self.calls:
                self.calls[stream].send_window += increment
            self.flow.notify_all()

    def _run(self, call: Call) -> None:
        """Run the handler for `call` and send its reply (unless the call was cancelled)."""
        message = error = None
        try:
            message = self.handler(call)
        except CallError as err:
            error = err
        except Exception as err:
            self.log(f"{call.method} failed: {type(err).__name__}: {err}")
            error = CallError(UNKNOWN, f"{type(err).__name__}: {err}")
        if not call.cancelled:
            self._reply(call, message, error)

    def _reply(self, call: Call, message: bytes | None, error: CallError | None) -> None:
        with call._lock:
            if call.cancelled or call.done:
                return
            call.done = True
        stream = call.stream
        ok = _frame(_HEADERS, _END_HEADERS | _END_STREAM, stream, _OK_TRAILERS)
        rest = b"" if call.remote_closed else _frame(_RST_STREAM, 0, stream, _NO_ERROR_CODE)
        try:  # one write when the client's windows take the message whole
            if error is None and message is not None:
                head = _frame(_HEADERS, _END_HEADERS, stream, _REPLY_HEADERS)
                body = len(message).to_bytes(5, "big") + message
                if self._take_window(call, len(body)):
                    self._send(head + _frame(_DATA, 0, stream, body) + ok + rest)
                else:
                    self._send(head)
                    if self._send_data(call, body):
                        self._send(ok + rest)
            else:
                code, text = (error.code, error.message) if error else (INTERNAL, "no reply")
                block = _REPLY_HEADERS + _status(code, text)
                self._send(_frame(_HEADERS, _END_HEADERS | _END_STREAM, stream, block) + rest)
        except OSError:
            pass  # the connection has gone: the client will not read the reply
        finally:
            with self.flow:
                self.calls.pop(call.stream, None)

    def _take_window(self, call: Call, size: int) -> bool:
        """Whether `size` bytes fit the windows and one frame (then taken from them)."""
        with self.flow:
            if size > min(self.send_window, call.send_window, self.peer_frame):
                return False
            self.send_window -= size
            call.send_window -= size
            return True

    def _send_data(self, call: Call, data: bytes) -> bool:
        """`data` in DATA frames as the client's windows and frame size allow; False if
        the client reset the call meanwhile."""
        view = memoryview(data)
        while view:
            with self.flow:
                while not self.closed and (self.send_window <= 0 or call.send_window <= 0):
                    if call.cancelled:
                        return False
                    self.flow.wait()
                if self.closed:
                    raise OSError("the connection closed")
                size = min(len(view), self.send_window, call.send_window, self.peer_frame)
                self.send_window -= size
                call.send_window -= size
            self._send(_frame(_DATA, 0, call.stream, view[:size]))
            view = view[size:]
        return True

    def _send(self, frames: bytes) -> None:
        with self.write_lock:
            self.sock.sendall(frames)


class Server:
    """Serves calls on an already listening unix socket, a thread per connection."""

    def __init__(
        self, listener: socket.socket, handler: Handler, log: Callable[[str], None]
    ) -> None:
        self.listener = listener
        self.handler = handler
        self.log = log
        self.lock = threading.Lock()
        self.connections: set[Connection] = set()
        self.closed = False

    def start(self) -> None:
        threading.Thread(target=self._accept, name="http2-accept", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:  # closed: the worker is stopping
                return
            connection = Connection(sock, self.handler, self.log)
            with self.lock:
                if self.closed:
                    connection.close()
                    return
                self.connections.add(connection)
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: Connection) -> None:
        connection.serve()
        with self.lock:
            self.connections.discard(connection)

    def close(self) -> None:
        """Stop accepting, end every connection and cancel its calls."""
        with self.lock:
            self.closed = True
            every = list(self.connections)
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for connection in every:
            connection.close()


def listen_now(path: str) -> socket.socket:
    """A unix socket listening at `path` (a socket left there removed first; anything
    else there makes the bind fail).

    The worker listens before it imports the rest of itself: Buck2 connects to a worker
    it starts by retrying with a doubling delay (50 ms, then 100, 200, 400, up to 500 ms
    apart), and its connection waits in the socket until `Server.start`."""
    with contextlib.suppress(OSError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    return listener


def _unpad(payload: bytes, flags: int) -> bytes:
    if not flags & _PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise ProtocolViolation(_PROTOCOL_ERROR, "padding longer than its frame")
    return payload[1 : len(payload) - payload[0]]


def _status(code: int, message: str) -> bytes:
    """`grpc-status` and, percent-encoded, `grpc-message` (its first `MESSAGE_LIMIT`
    characters: the block goes in one HEADERS frame, which the client takes up to 16 KiB)."""
    encoded = "".join(
        c if " " <= c <= "~" and c != "%" else "".join(f"%{b:02X}" for b in c.encode())
        for c in message[:MESSAGE_LIMIT]
    )
    return hpack.literal(b"grpc-status", str(code).encode()) + hpack.literal(
        b"grpc-message", encoded.encode()
    )
