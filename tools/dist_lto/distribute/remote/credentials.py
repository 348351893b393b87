"""Headers from a credential helper, in Bazel's protocol (so one helper serves both).

The helper is run as `PROGRAM get` with `{"uri": "<the service's URL>"}` on its
standard input and prints `{"headers": {"name": ["value", ...]}, "expires": "<RFC
3339>"}` (`expires` optional). Its headers are kept until they expire, or for
`DEFAULT_LIFETIME` when it does not say, so a link asks once, not once per call.
Their values are secrets: `secrets()` lists them for the connection to keep out of
every message.
"""

import json
import threading
import time
from datetime import datetime

from dist_lto.errors import EXIT_BAD_INPUT, DistLtoError
from dist_lto.process import children

DEFAULT_LIFETIME = 1800.0
"""Seconds headers without an `expires` are used (Bazel's default cache duration)."""
HELPER_TIMEOUT = 30.0
"""Seconds a helper may take to answer."""
REFRESH_MARGIN = 30.0
"""Headers are fetched again this many seconds before they expire."""


class CredentialsFailed(DistLtoError):
    """The credential helper could not give headers: exit status 2 (configuration)."""

    status = EXIT_BAD_INPUT


class CredentialHelper:
    """Runs the helper when its last headers are missing or about to expire; thread-safe."""

    def __init__(self, program: str, uri: str) -> None:
        self.program = program
        self.uri = uri
        self._headers: tuple[tuple[str, str], ...] = ()
        self._until = 0.0
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def headers(self) -> tuple[tuple[str, str], ...]:
        with self._lock:
            if time.monotonic() >= self._until:
                self._headers, lifetime = self._ask()
                self._until = time.monotonic() + max(lifetime - REFRESH_MARGIN, 0.0)
                self._seen.update(value for _, value in self._headers)
            return self._headers

    def secrets(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._seen)

    def _ask(self) -> tuple[tuple[tuple[str, str], ...], float]:
        where = f"credential helper {self.program}"
        try:
            proc = children.run(
                [self.program, "get"],
                stdin=json.dumps({"uri": self.uri}).encode(),
                stdout=children.CAPTURE,
                timeout=HELPER_TIMEOUT,
            )
        except children.TimedOut:
            raise CredentialsFailed(f"{where}: no answer in {HELPER_TIMEOUT:.0f} s") from None
        except children.CannotRun as err:
            raise CredentialsFailed(f"{where}: cannot run it: {err.reason}") from None
        if proc.status != 0:
            lines = proc.stderr.decode(errors="replace").strip().splitlines()
            said = f": {lines[-1]}" if lines else ""
            how = children.describe_status(proc.status)
            raise CredentialsFailed(f"{where}: {how}{said}")
        return parse_response(proc.stdout, where)


def parse_response(data: bytes, where: str) -> tuple[tuple[tuple[str, str], ...], float]:
    """The headers (names lowercased, as gRPC metadata needs) and for how many seconds
    they hold. Messages name what is wrong, never a value."""
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        raise CredentialsFailed(f"{where}: its answer is not JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("headers", {}), dict):
        raise CredentialsFailed(f'{where}: expected {{"headers": {{NAME: [VALUE]}}}}')
    headers: list[tuple[str, str]] = []
    for name, values in doc.get("headers", {}).items():
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise CredentialsFailed(f"{where}: header {name!r}: expected a list of strings")
        if not name.isascii() or not name.isprintable() or not name:
            raise CredentialsFailed(f"{where}: header name {name!r} is not printable ASCII")
        if not all(v.isascii() and v.isprintable() for v in values):
            raise CredentialsFailed(f"{where}: a value of header {name!r} is not printable ASCII")
        headers += [(name.lower(), value) for value in values]
    lifetime = DEFAULT_LIFETIME
    expires = doc.get("expires")
    if expires is not None:
        try:
            moment = datetime.fromisoformat(str(expires))
            lifetime = moment.timestamp() - time.time()
        except ValueError:
            raise CredentialsFailed(
                f"{where}: expires {expires!r} is not an RFC 3339 time"
            ) from None
    return tuple(headers), lifetime
