"""Listen on Buck2's socket before gRPC has loaded, and pass the bytes through.

Buck2 connects to a worker it starts by retrying with a doubling delay (50 ms, then
100, 200, 400, up to 500 ms apart), and importing grpc takes the worker 0.1 to 0.3 s: the
first connection attempt after that is what the first opt action waits for. So the
worker listens on Buck2's socket at once, with the standard library, and relays each
connection to its gRPC server on a private socket beside it once that is up; a request
sent meanwhile waits in the socket for the server. Two threads per connection (Buck2
opens one) copy bytes both ways; closing one side closes the other.
"""

import contextlib
import os
import socket
import stat
import threading

_CHUNK = 1 << 16


def listen_now(path: str) -> socket.socket:
    """A unix socket listening at `path` (a socket left there removed first; anything
    else there makes the bind fail)."""
    with contextlib.suppress(OSError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    return listener


class Relay:
    """Accepts on `listener` and connects each connection to the server at `target`."""

    def __init__(self, listener: socket.socket, target: str) -> None:
        self.listener = listener
        self.target = target
        self.lock = threading.Lock()
        self.open: set[socket.socket] = set()
        self.closed = False

    def start(self) -> None:
        threading.Thread(target=self._accept, name="relay-accept", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed: the worker is stopping
                return
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                server.connect(self.target)
            except OSError:
                client.close()
                server.close()
                continue
            with self.lock:
                if self.closed:
                    client.close()
                    server.close()
                    return
                self.open.update((client, server))
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        """Copy `source` to `sink` until either ends; then end both (which ends the other
        direction's pump) and close `source` (that pump closes `sink`)."""
        buffer = bytearray(_CHUNK)
        view = memoryview(buffer)
        try:
            while n := source.recv_into(buffer):
                sink.sendall(view[:n])
        except OSError:
            pass
        for end in (source, sink):
            _shut(end)
        with self.lock:
            self.open.discard(source)
        source.close()

    def close(self) -> None:
        """Stop accepting and end every relayed connection."""
        with self.lock:
            self.closed = True
            every = list(self.open)
        _shut(self.listener)
        self.listener.close()
        for end in every:
            _shut(end)


def _shut(end: socket.socket) -> None:
    """Shut both directions (a thread blocked on `end` returns), if still open."""
    with contextlib.suppress(OSError):
        end.shutdown(socket.SHUT_RDWR)
