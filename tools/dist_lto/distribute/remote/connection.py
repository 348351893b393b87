"""The gRPC channel to a REAPI service: TLS, stubs, metadata on every call, bounded retries.

A call that fails with a transient status (the engine restarting, a dropped
connection, an overloaded or lost worker) is tried again after a short, growing pause,
at most `attempts` times; every other status fails at once. Failures become one-line
`RemoteFailed` errors naming the service, the call and gRPC's status; a TLS handshake
that fails or credentials the service refuses are configuration errors (exit status
2), never retried. No message ever holds a header's value.
"""

import threading
import time
import uuid
from collections.abc import Callable
from typing import TypeVar

import grpc

from dist_lto.distribute.remote.credentials import CredentialHelper
from dist_lto.distribute.remote.protos import REQUEST_METADATA_KEY, bs_grpc, re_grpc, re_pb2
from dist_lto.distribute.remote.settings import RemoteSettings
from dist_lto.errors import EXIT_BAD_INPUT, DistLtoError

T = TypeVar("T")

TRANSIENT = frozenset({
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
})  # fmt: skip
"""Statuses worth another try (REAPI: UNAVAILABLE and RESOURCE_EXHAUSTED are transient;
BuildBarn answers ABORTED/DEADLINE_EXCEEDED for actions of workers that went away)."""

FIRST_PAUSE = 0.25
"""Seconds before the second try; doubled for each further one."""
MAX_MESSAGE = 64 * 1024 * 1024


def _version() -> str:
    from dist_lto import __version__

    return __version__


class RemoteFailed(DistLtoError):
    """The engine could not be used (unreachable, refused, lost a worker too often)."""


REFUSED = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED})
"""Statuses of a service that will not serve these credentials (never retried)."""


def _tls_failure(details: str) -> bool:
    """Whether gRPC's details say the TLS handshake failed (a wrong CA, an expired or
    refused certificate, a plaintext server): retrying cannot help."""
    lowered = details.lower()
    return any(word in lowered for word in ("handshake", "ssl", "certificate", "tsi_"))


def _unreachable(details: str) -> bool:
    """Whether an UNAVAILABLE came from the transport (no answer) rather than the engine
    (BuildBarn answers UNAVAILABLE when no worker offers the action's platform)."""
    lowered = details.lower()
    return any(
        word in lowered
        for word in ("failed to connect", "connection refused", "socket closed", "dns", "connect")
    )


class Connection:
    """One channel per distribution; thread-safe, as are gRPC's stubs."""

    def __init__(self, settings: RemoteSettings, *, invocation_id: str | None = None) -> None:
        self.settings = settings
        self.instance = settings.instance
        self.invocation_id = invocation_id or str(uuid.uuid4())
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE),
            ("grpc.max_send_message_length", MAX_MESSAGE),
            ("grpc.enable_retries", 0),
        ]
        if settings.tls:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=settings.ca or None,
                private_key=settings.client_key or None,
                certificate_chain=settings.client_cert or None,
            )
            self.channel = grpc.secure_channel(settings.target, credentials, options=options)
        else:
            self.channel = grpc.insecure_channel(settings.target, options=options)
        self.helper = (
            CredentialHelper(settings.credential_helper, settings.address)
            if settings.credential_helper
            else None
        )
        self.cas = re_grpc.ContentAddressableStorageStub(self.channel)
        self.ac = re_grpc.ActionCacheStub(self.channel)
        self.execution = re_grpc.ExecutionStub(self.channel)
        self.capabilities = re_grpc.CapabilitiesStub(self.channel)
        self.bytestream = bs_grpc.ByteStreamStub(self.channel)
        self._lock = threading.Lock()
        self._closed = False

    def metadata(self, action_id: str = "") -> tuple[tuple[str, str | bytes], ...]:
        """The user's headers plus REAPI's RequestMetadata (tool, invocation, action)."""
        request = re_pb2.RequestMetadata(
            tool_details=re_pb2.ToolDetails(tool_name="dist-lto", tool_version=_version()),
            action_id=action_id,
            tool_invocation_id=self.invocation_id,
        )
        helped = self.helper.headers() if self.helper is not None else ()
        return (
            *self.settings.headers,
            *helped,
            (REQUEST_METADATA_KEY, request.SerializeToString()),
        )

    def call(self, what: str, fn: Callable[[], T], *, attempts: int | None = None) -> T:
        """Run `fn` (one gRPC call), trying again on transient failures."""
        tries = attempts or self.settings.attempts
        pause = FIRST_PAUSE
        for attempt in range(1, tries + 1):
            try:
                return fn()
            except grpc.RpcError as err:
                code = err.code() if hasattr(err, "code") else None
                details = err.details() if hasattr(err, "details") else ""
                if (
                    self._closed
                    or code not in TRANSIENT
                    or attempt == tries
                    or _tls_failure(details or "")
                ):
                    raise self.failure(what, err, attempt) from None
            time.sleep(pause)
            pause *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def failure(self, what: str, err: grpc.RpcError, attempts: int = 1) -> RemoteFailed:
        code = err.code() if hasattr(err, "code") else None
        details = err.details() if hasattr(err, "details") else str(err)
        name = code.name if code is not None else "UNKNOWN"
        tries = f" (after {attempts} attempts)" if attempts > 1 else ""
        status = None
        if code is grpc.StatusCode.UNAVAILABLE and _tls_failure(details or ""):
            problem = f"TLS handshake failed (check the CA and the client certificate): {details}"
            status = EXIT_BAD_INPUT
        elif code in REFUSED:
            problem = f"the service refused our credentials: {name}: {details}"
            status = EXIT_BAD_INPUT
        elif code is grpc.StatusCode.UNAVAILABLE and _unreachable(details or ""):
            problem = f"cannot reach the remote service: UNAVAILABLE: {details}"
        else:
            problem = f"{name}: {details}"
        message = self.redact(f"{self.settings.address}: {what}: {problem}{tries}")
        return RemoteFailed(message, status=status)

    def redact(self, text: str) -> str:
        """`text` without any header value (a service may quote a token it refuses)."""
        secrets = [*self.settings.secrets(), *(self.helper.secrets() if self.helper else ())]
        for secret in sorted(secrets, key=len, reverse=True):
            if len(secret) >= 4:
                text = text.replace(secret, "<redacted>")
        return text

    def server_capabilities(self) -> "re_pb2.ServerCapabilities":
        """The engine's limits; fails early (and clearly) when nothing listens there."""
        caps = self.call(
            "GetCapabilities",
            lambda: self.capabilities.GetCapabilities(
                re_pb2.GetCapabilitiesRequest(instance_name=self.instance),
                metadata=self.metadata(),
                timeout=self.settings.rpc_timeout,
            ),
        )
        functions = caps.cache_capabilities.digest_function
        if functions and re_pb2.DigestFunction.SHA256 not in functions:
            raise RemoteFailed(f"{self.settings.address}: the engine does not accept SHA-256")
        if self.settings.cache_only:
            if not caps.cache_capabilities.action_cache_update_capabilities.update_enabled:
                raise RemoteFailed(
                    f"{self.settings.address}: instance {self.instance!r} does not accept"
                    " action results from clients (a cache only for remote execution)"
                )
        elif not caps.execution_capabilities.exec_enabled:
            raise RemoteFailed(
                f"{self.settings.address}: instance {self.instance!r} does not execute"
                " actions (use --remote-cache for a cache only)"
            )
        return caps

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self.channel.close()
