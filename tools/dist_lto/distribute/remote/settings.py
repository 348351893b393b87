"""What the remote options say, checked: the engine's address (`grpc://` or `grpcs://`),
instance name, TLS files, headers, credential helper, platform, timeouts and retries.

Standard library only, so the options can be validated (and property-tested) without
grpc installed. Header values are secrets: no message here ever repeats one.
"""

import re
from dataclasses import dataclass, field

from dist_lto.errors import BadInput

DEFAULT_PLATFORM: tuple[tuple[str, str], ...] = (("OSFamily", "linux"), ("toolchain", "llvm-22"))
"""The platform our loopback engine's workers advertise
(tests/support/buildbarn_config/common.libsonnet): Linux with LLVM 22 preinstalled at the
path the job file names (/usr/lib/llvm-22/bin), so the compiler is referenced, not
uploaded."""

DEFAULT_RPC_TIMEOUT = 60.0
"""Seconds one remote call may take (`--remote-timeout`), Bazel's `--remote_timeout`
default."""

DEFAULT_ATTEMPTS = 4
"""Tries per remote call that fails transiently (network, overloaded or lost worker)."""

_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)$")
_HEADER_NAME = re.compile(r"^[0-9a-z_.-]+$")
_RESERVED_HEADERS = ("grpc-", ":")


@dataclass(frozen=True)
class RemoteSettings:
    """Where the engine is and how to talk to it. `target` is gRPC's `host:port`."""

    address: str
    target: str
    instance: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    platform: tuple[tuple[str, str], ...] = DEFAULT_PLATFORM
    attempts: int = DEFAULT_ATTEMPTS
    extra: dict[str, str] = field(default_factory=dict)
    tls: bool = False
    """`grpcs://`: TLS, the engine's certificate checked against `ca` (PEM) or, when
    that is empty, the system's roots."""
    ca: bytes = b""
    ca_path: str = ""
    client_cert: bytes = b""
    """Mutual TLS: this PEM certificate (chain) and `client_key` prove who we are."""
    client_key: bytes = b""
    credential_helper: str = ""
    """A program speaking Bazel's credential-helper protocol (`docs/remote.md`)."""
    rpc_timeout: float = DEFAULT_RPC_TIMEOUT
    """Seconds each remote call may take (`--remote-timeout`, its deadline), transfers
    included; an Execute call waits for its action longer (executor.EXECUTE_TIMEOUT)."""
    action_timeout: float = 0.0
    """Seconds one action may run on a worker (the Action's timeout,
    `--remote-action-timeout`); 0: the engine's."""
    cache_only: bool = False
    """Compile here; only the action cache and the CAS are remote (`--remote-cache`)."""

    def secrets(self) -> tuple[str, ...]:
        """Values never to print (the static headers'; a helper's are added by the
        connection that asks it)."""
        return tuple(value for _, value in self.headers if value)


TLS_PORT = 443
"""The port of a `grpcs://HOST` address that names none."""


def parse_address(text: str, option: str = "--remote") -> str:
    """`grpc://HOST:PORT` or `grpcs://HOST[:PORT]` -> `HOST:PORT` (gRPC's target)."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        raise BadInput(f"{option}: expected grpc://HOST:PORT or grpcs://HOST[:PORT], got {text!r}")
    if scheme not in ("grpc", "grpcs"):
        raise BadInput(
            f"{option}: unsupported scheme {scheme!r} in {text!r}"
            " (grpc:// for plaintext, grpcs:// for TLS)"
        )
    if scheme == "grpcs" and (":" not in rest or rest.endswith("]")):
        host, port = rest, str(TLS_PORT)
    else:
        host, _, port = rest.rpartition(":")
    if not host or not _HOST.match(host):
        raise BadInput(f"{option}: expected {scheme}://HOST:PORT, got {text!r}")
    if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise BadInput(f"{option}: port must be 1 to 65535, got {port!r} in {text!r}")
    return f"{host}:{int(port)}"


def parse_instance(text: str, option: str = "--instance") -> str:
    """A REAPI instance name: `/`-separated segments, none of them empty or reserved."""
    if not text:
        return ""
    for segment in text.split("/"):
        if not segment or segment in (
            "blobs",
            "uploads",
            "actions",
            "actionResults",
            "operations",
            "capabilities",
            "compressed-blobs",
        ):
            raise BadInput(
                f"{option}: {text!r} has an empty or reserved segment {segment!r}"
            )  # fmt: skip
        if not segment.isprintable() or " " in segment:
            raise BadInput(f"{option}: {text!r} has a space or a control character")
    return text


def parse_pair(text: str, option: str, *, secret: bool = False) -> tuple[str, str]:
    """`K=V` -> (K, V); K is non-empty, V may be empty. A `secret` V is never echoed."""
    key, eq, value = text.partition("=")
    shown = repr(key + "=...") if secret else repr(text)
    if not eq or not key:
        shown = "a value without '='" if secret and not eq else shown
        raise BadInput(f"{option}: expected KEY=VALUE, got {shown}")
    if not (value.isprintable() and key.isprintable()):
        raise BadInput(f"{option}: {shown} has a control character")
    return key, value


def parse_header(text: str, option: str = "--remote-header") -> tuple[str, str]:
    """A gRPC metadata entry sent with every call (an engine's auth token, say)."""
    key, value = parse_pair(text, option, secret=True)
    key = key.lower()
    if not _HEADER_NAME.match(key) or key.startswith(_RESERVED_HEADERS):
        raise BadInput(
            f"{option}: {key!r} is not a valid gRPC metadata key"
            " (lowercase letters, digits, '-', '_', '.'; not grpc-*)"
        )
    if key.endswith("-bin"):
        raise BadInput(f"{option}: binary header {key!r} is not supported")
    if not value.isascii():
        raise BadInput(f"{option}: the value of {key!r} must be ASCII")
    return key, value


def _read_pem(path: str, where: str, marker: bytes) -> bytes:
    """A PEM file's bytes; BadInput naming the file when it cannot be read or holds no
    `-----BEGIN ...marker` block."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise BadInput(f"{where}: {path}: {err.strerror}") from None
    if b"-----BEGIN " not in data or marker not in data:
        what = "certificate" if marker == b"CERTIFICATE" else "private key"
        raise BadInput(f"{where}: {path}: not a PEM {what}")
    return data


def parse_timeout(text: str, where: str = "--remote-timeout") -> float:
    """A positive duration (`60`, `60s`, `5m`) in seconds; BadInput naming `where`."""
    from dist_lto.durations import parse_duration

    try:
        seconds = parse_duration(text)
    except ValueError as err:
        raise BadInput(f"{where}: {err}") from None
    if not (0 < seconds < 1e9):
        raise BadInput(f"{where}: expected a positive duration, got {text!r}")
    return seconds


def _program(path: str, where: str) -> str:
    """An executable named by path, or found on PATH."""
    import shutil

    found = shutil.which(path)
    if found is None:
        raise BadInput(f"{where}: {path}: no such executable")
    return found


def settings_from_options(
    address: str,
    instance: str | None,
    headers: list[str],
    platform: list[str] | None,
    *,
    ca: str | None = None,
    client_cert: str | None = None,
    client_key: str | None = None,
    credential_helper: str | None = None,
    timeout: str | None = None,
    action_timeout: str | None = None,
    cache_only: bool = False,
    origin: dict[str, str] | None = None,
) -> RemoteSettings:
    """Check the remote settings; `origin` names where a value came from when not from
    its option (`DIST_LTO_REMOTE_CA`, `FILE: remote.ca`)."""
    origin = origin or {}

    def where(attr: str, option: str) -> str:
        return origin.get(attr, option)

    address_attr = "remote_cache" if cache_only else "remote"
    target = parse_address(address, where(address_attr, "--" + address_attr.replace("_", "-")))
    tls = address.startswith("grpcs://")
    if not tls:
        for attr, option, value in (
            ("remote_ca", "--remote-ca", ca),
            ("remote_client_cert", "--remote-client-cert", client_cert),
            ("remote_client_key", "--remote-client-key", client_key),
        ):
            if value:
                raise BadInput(f"{where(attr, option)} needs a grpcs:// address, got {address!r}")
    if bool(client_cert) != bool(client_key):
        raise BadInput("--remote-client-cert and --remote-client-key go together")
    properties = DEFAULT_PLATFORM
    if platform is not None:
        pairs = dict(parse_pair(item, where("platform", "--platform")) for item in platform)
        properties = tuple(sorted(pairs.items()))
    return RemoteSettings(
        address=address,
        target=target,
        instance=parse_instance(instance or "", where("instance", "--instance")),
        headers=tuple(parse_header(h, where("remote_header", "--remote-header")) for h in headers),
        platform=properties,
        tls=tls,
        ca=_read_pem(ca, where("remote_ca", "--remote-ca"), b"CERTIFICATE") if ca else b"",
        ca_path=ca or "",
        client_cert=(
            _read_pem(client_cert, where("remote_client_cert", "--remote-client-cert"),
                      b"CERTIFICATE") if client_cert else b""
        ),
        client_key=(
            _read_pem(client_key, where("remote_client_key", "--remote-client-key"),
                      b"PRIVATE KEY") if client_key else b""
        ),
        credential_helper=(
            _program(credential_helper, where("credential_helper", "--credential-helper"))
            if credential_helper else ""
        ),
        rpc_timeout=parse_timeout(timeout, where("remote_timeout", "--remote-timeout"))
        if timeout else DEFAULT_RPC_TIMEOUT,
        action_timeout=parse_timeout(
            action_timeout, where("remote_action_timeout", "--remote-action-timeout")
        ) if action_timeout else 0.0,
        cache_only=cache_only,
    )  # fmt: skip
