"""`dist-lto distribute` against a BuildBarn engine behind TLS, on loopback.

The engine's client listener (tests/support/buildbarn.py with a `tls_dir`) speaks TLS
with a certificate for 127.0.0.1 from a CA the test makes (tests/support/pki.py), and
lets a call through only with a client certificate from that CA, unexpired, and a
bearer token its JSON Web Key Set checks. The workers use a plaintext listener of
their own. The link lines name only the distributor: the service, the CA, the client
certificate and the credential helper come from DIST_LTO_* variables.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from support import buildbarn, workloads
from support.links import DtltoLink
from support.pki import Pki
from support.tools import run_cli
from test_remote_engine import fresh_instance, link_remote, worker_record


def credential_helper(directory: Path, token: str) -> Path:
    """A helper in Bazel's protocol that answers with `token` for the engine's URI only,
    and logs each request."""
    path = directory / "re-credentials"
    (directory / "token").write_text(token)
    path.write_text(
        f"#!{sys.executable}\n"
        "import json, pathlib, sys\n"
        "here = pathlib.Path(sys.argv[0]).parent\n"
        "uri = json.load(sys.stdin)['uri']\n"
        "with open(here / 'requests', 'a') as log:\n"
        "    log.write(sys.argv[1] + ' ' + uri + '\\n')\n"
        "if not uri.startswith('grpcs://127.0.0.1:'):\n"
        "    sys.exit('no credentials for ' + uri)\n"
        "token = (here / 'token').read_text()\n"
        "print(json.dumps({'headers': {'Authorization': ['Bearer ' + token]}}))\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def tls_env(engine: buildbarn.Engine, pki: Pki, helper: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIST_LTO_")}
    env.update({
        "DIST_LTO_REMOTE": engine.address,
        "DIST_LTO_REMOTE_CA": str(pki.ca),
        "DIST_LTO_REMOTE_CLIENT_CERT": str(pki.client_cert),
        "DIST_LTO_REMOTE_CLIENT_KEY": str(pki.client_key),
        "DIST_LTO_CREDENTIAL_HELPER": str(helper),
    })  # fmt: skip
    env.update(extra)
    return env


@pytest.mark.slow
def test_lua_links_with_every_backend_on_the_tls_engine_configured_by_the_environment(
    tls_engine: buildbarn.Engine, pki: Pki, tmp_path: Path
) -> None:
    helper = credential_helper(tmp_path, pki.token)
    instance = fresh_instance()
    env = tls_env(tls_engine, pki, helper, DIST_LTO_REMOTE_INSTANCE=instance)
    build = workloads.build("lua", tmp_path / "b")
    link = link_remote(tls_engine, build, tmp_path / "cache", instance, flag="", env=env)
    assert link.proc.returncode == 0, link.proc.stderr
    workloads.check_binary("lua", build.root / "lua")
    assert f"remote {tls_engine.address}" in link.proc.stderr
    assert len(link.lines("executed remotely on")) == len(link.outputs) == 33
    record = worker_record(tls_engine, instance)
    assert set(link.outputs) <= set(record.outputs)
    # The helper was asked once, for the engine's URL, and its token never printed.
    assert (tmp_path / "requests").read_text() == f"get {tls_engine.address}\n"
    assert pki.token not in link.proc.stderr


@pytest.fixture
def small_link(small_dtlto: DtltoLink, tmp_path: Path) -> Path:
    root = small_dtlto.clone(tmp_path / "link")
    return root


def distribute(
    root: Path, job_file: str, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "dist_lto", "distribute", "--no-cache", *args, job_file]
    return subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "problem"),
    [
        ("wrong CA", "TLS handshake failed (check the CA and the client certificate):"),
        ("expired client certificate", "the service refused our credentials: UNAUTHENTICATED:"
                                       " Cannot validate TLS client certificate: x509:"
                                       " certificate has expired"),
        ("no client certificate", "the service refused our credentials: UNAUTHENTICATED:"
                                  " Client provided no TLS client certificate"),
        ("refused token", "the service refused our credentials: UNAUTHENTICATED:"
                          " No valid authorization header"),
    ],
)  # fmt: skip
def test_each_refusal_is_one_line_with_status_2_and_writes_nothing(
    tls_engine: buildbarn.Engine, pki: Pki, small_link: Path, small_dtlto: DtltoLink,
    tmp_path: Path, case: str, problem: str,
) -> None:  # fmt: skip
    token = pki.forged_token if case == "refused token" else pki.token
    env = tls_env(tls_engine, pki, credential_helper(tmp_path, token))
    if case == "wrong CA":
        env["DIST_LTO_REMOTE_CA"] = str(pki.other_ca)
    elif case == "expired client certificate":
        env["DIST_LTO_REMOTE_CLIENT_CERT"] = str(pki.expired_cert)
        env["DIST_LTO_REMOTE_CLIENT_KEY"] = str(pki.expired_key)
    elif case == "no client certificate":
        del env["DIST_LTO_REMOTE_CLIENT_CERT"], env["DIST_LTO_REMOTE_CLIENT_KEY"]
    result = distribute(small_link, small_dtlto.job_file, env)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"dist-lto distribute: error: {tls_engine.address}: GetCapabilities: ")
    assert problem in line
    assert token not in result.stderr
    assert list(small_link.glob("*.native.o")) == []


@pytest.mark.slow
def test_a_remote_cache_behind_tls_shares_results_between_two_copies(
    tls_engine: buildbarn.Engine, pki: Pki, small_dtlto: DtltoLink, tmp_path: Path
) -> None:
    helper = credential_helper(tmp_path, pki.token)
    env = tls_env(tls_engine, pki, helper, DIST_LTO_REMOTE_INSTANCE=fresh_instance())
    env["DIST_LTO_REMOTE_CACHE"] = env.pop("DIST_LTO_REMOTE")
    said = []
    for name in ("one", "two"):
        root = small_dtlto.clone(tmp_path / name)
        result = distribute(root, small_dtlto.job_file, env, "--verbose")
        assert result.returncode == 0, result.stderr
        assert len(list(root.glob("*.native.o"))) == 4
        said.append(result.stderr)
    assert said[0].count("] compiled ") == 4
    assert said[1].count("from the remote action cache") == 4 and "] compiled " not in said[1]


def test_tls_settings_need_a_grpcs_service(small_link: Path, small_dtlto: DtltoLink,
                                           pki: Pki) -> None:  # fmt: skip
    result = run_cli(["distribute", "--remote=grpc://127.0.0.1:1", f"--remote-ca={pki.ca}",
                      small_dtlto.job_file], cwd=small_link)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "dist-lto distribute: error: --remote-ca needs a grpcs:// address, got 'grpc://127.0.0.1:1'"
    )
