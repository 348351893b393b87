"""What `--remote`, `--instance`, `--remote-header` and `--platform` say, checked.

Standard library only, so the options can be validated (and property-tested) without
grpc installed.
"""

import re
from dataclasses import dataclass, field

from dist_lto.errors import BadInput

DEFAULT_PLATFORM: tuple[tuple[str, str], ...] = (("OSFamily", "linux"), ("toolchain", "llvm-22"))
"""The platform our loopback engine's workers advertise
(tests/support/buildbarn_config/common.libsonnet): Linux with LLVM 22 preinstalled at the
path the job file names (/usr/lib/llvm-22/bin), so the compiler is referenced, not
uploaded."""

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


def parse_address(text: str) -> str:
    """`grpc://HOST:PORT` -> `HOST:PORT` (plaintext gRPC; TLS engines are not supported)."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        raise BadInput(f"--remote: expected grpc://HOST:PORT, got {text!r}")
    if scheme != "grpc":
        raise BadInput(
            f"--remote: unsupported scheme {scheme!r} in {text!r} (only grpc://, plaintext)"
        )
    host, colon, port = rest.rpartition(":")
    if not colon or not host or not _HOST.match(host):
        raise BadInput(f"--remote: expected grpc://HOST:PORT, got {text!r}")
    if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise BadInput(f"--remote: port must be 1 to 65535, got {port!r} in {text!r}")
    return f"{host}:{int(port)}"


def parse_instance(text: str) -> str:
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
                f"--instance: {text!r} has an empty or reserved segment {segment!r}"
            )  # fmt: skip
        if not segment.isprintable() or " " in segment:
            raise BadInput(f"--instance: {text!r} has a space or a control character")
    return text


def parse_pair(text: str, option: str) -> tuple[str, str]:
    """`K=V` -> (K, V); K is non-empty, V may be empty."""
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise BadInput(f"{option}: expected KEY=VALUE, got {text!r}")
    if not (value.isprintable() and key.isprintable()):
        raise BadInput(f"{option}: {text!r} has a control character")
    return key, value


def parse_header(text: str) -> tuple[str, str]:
    """A gRPC metadata entry sent with every call (an engine's auth token, say)."""
    key, value = parse_pair(text, "--remote-header")
    key = key.lower()
    if not _HEADER_NAME.match(key) or key.startswith(_RESERVED_HEADERS):
        raise BadInput(
            f"--remote-header: {key!r} is not a valid gRPC metadata key"
            " (lowercase letters, digits, '-', '_', '.'; not grpc-*)"
        )
    if key.endswith("-bin"):
        raise BadInput(f"--remote-header: binary header {key!r} is not supported")
    if not value.isascii():
        raise BadInput(f"--remote-header: the value of {key!r} must be ASCII")
    return key, value


def settings_from_options(
    address: str,
    instance: str | None,
    headers: list[str],
    platform: list[str] | None,
) -> RemoteSettings:
    """Check the remote options as the command line gave them."""
    target = parse_address(address)
    properties = DEFAULT_PLATFORM
    if platform is not None:
        pairs = dict(parse_pair(item, "--platform") for item in platform)
        properties = tuple(sorted(pairs.items()))
    return RemoteSettings(
        address=address,
        target=target,
        instance=parse_instance(instance or ""),
        headers=tuple(parse_header(h) for h in headers),
        platform=properties,
    )
