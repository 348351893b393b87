"""Certificates and a bearer token for a TLS-protected test service, made with `openssl`.

One CA signs the service's certificate (for 127.0.0.1 and localhost), a client
certificate, and an expired client certificate; a second, unrelated CA stands for the
wrong one. The token is a JSON Web Token signed with an Ed25519 key whose public half
the service gets as a JSON Web Key Set. Standard library plus the `openssl` command.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    ca: Path
    other_ca: Path
    """A CA that signed nothing the service presents: the wrong CA."""
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    client_pair: Path
    """The client certificate followed by its key, in one file (Buck2's form)."""
    expired_cert: Path
    expired_key: Path
    jwks: Path
    """The JSON Web Key Set that checks `token`."""
    token: str
    """A bearer token the service accepts (valid for a day)."""
    forged_token: str
    """A well-formed token signed with another key: the service refuses it."""


def _openssl(args: list[str], cwd: Path, data: bytes | None = None) -> bytes:
    proc = subprocess.run(["openssl", *args], cwd=cwd, input=data, capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)}: {proc.stderr.decode(errors='replace')}")
    return proc.stdout


def _ca(d: Path, name: str) -> None:
    _openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
              "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "3650",
              "-subj", f"/CN=dist-lto test {name}",
              "-addext", "basicConstraints=critical,CA:TRUE",
              "-addext", "keyUsage=critical,keyCertSign,cRLSign"], d)  # fmt: skip


def _request(d: Path, name: str, subject: str) -> None:
    _openssl(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
              "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject], d)  # fmt: skip


def _extensions(d: Path, name: str, usage: str, alt: str = "") -> str:
    lines = ["basicConstraints=CA:FALSE", f"extendedKeyUsage={usage}"]
    if alt:
        lines.append(f"subjectAltName={alt}")
    (d / f"{name}.ext").write_text("\n".join(lines) + "\n")
    return f"{name}.ext"


def _sign(d: Path, name: str, usage: str, alt: str = "") -> None:
    ext = _extensions(d, name, usage, alt)
    _openssl(["x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
              "-CAcreateserial", "-out", f"{name}.pem", "-days", "3650",
              "-extfile", ext], d)  # fmt: skip


def _sign_expired(d: Path, name: str) -> None:
    """Signed by the CA for one day in 2020 (`openssl ca` takes explicit dates)."""
    (d / "db").mkdir()
    (d / "db" / "index.txt").write_text("")
    (d / "db" / "serial").write_text("1000\n")
    (d / "ca.cnf").write_text(
        "[ca]\ndefault_ca = test\n[test]\ndatabase = db/index.txt\nnew_certs_dir = db\n"
        "serial = db/serial\ndefault_md = sha256\npolicy = any\n[any]\ncommonName = supplied\n"
    )
    ext = _extensions(d, name, "clientAuth")
    _openssl(["ca", "-batch", "-config", "ca.cnf", "-cert", "ca.pem", "-keyfile", "ca.key",
              "-in", f"{name}.csr", "-out", f"{name}.pem", "-notext", "-extfile", ext,
              "-startdate", "20200101000000Z", "-enddate", "20200102000000Z"], d)  # fmt: skip


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _token(d: Path, key: str) -> str:
    header = _b64(json.dumps({"alg": "EdDSA", "typ": "JWT"}).encode())
    now = int(time.time())
    payload = _b64(json.dumps({"sub": "dist-lto-tests", "iat": now, "exp": now + 86400}).encode())
    signing_input = f"{header}.{payload}"
    (d / "jwt.input").write_text(signing_input)
    signature = _openssl(["pkeyutl", "-sign", "-inkey", key, "-rawin", "-in", "jwt.input"], d)
    return f"{signing_input}.{_b64(signature)}"


def make_pki(d: Path) -> Pki:
    d.mkdir(parents=True, exist_ok=True)
    _ca(d, "ca")
    _ca(d, "other-ca")
    _request(d, "server", "/CN=localhost")
    _sign(d, "server", "serverAuth", "IP:127.0.0.1,DNS:localhost")
    _request(d, "client", "/CN=dist-lto client")
    _sign(d, "client", "clientAuth")
    _request(d, "expired", "/CN=dist-lto expired client")
    _sign_expired(d, "expired")
    (d / "client-pair.pem").write_bytes((d / "client.pem").read_bytes()
                                        + (d / "client.key").read_bytes())  # fmt: skip
    for name in ("jwt", "forger"):
        _openssl(["genpkey", "-algorithm", "ed25519", "-out", f"{name}.key"], d)
    public = _openssl(["pkey", "-in", "jwt.key", "-pubout", "-outform", "DER"], d)[-32:]
    jwks = {"keys": [{"kty": "OKP", "crv": "Ed25519", "x": _b64(public), "use": "sig"}]}
    (d / "jwks.json").write_text(json.dumps(jwks))
    return Pki(
        ca=d / "ca.pem", other_ca=d / "other-ca.pem",
        server_cert=d / "server.pem", server_key=d / "server.key",
        client_cert=d / "client.pem", client_key=d / "client.key",
        client_pair=d / "client-pair.pem",
        expired_cert=d / "expired.pem", expired_key=d / "expired.key",
        jwks=d / "jwks.json", token=_token(d, "jwt.key"), forged_token=_token(d, "forger.key"),
    )  # fmt: skip
