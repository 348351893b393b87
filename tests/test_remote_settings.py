"""Remote settings that need no service: TLS files, where each setting comes from
(command line, DIST_LTO_* variables, the configuration file), the credential helper."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dist_lto.distribute.remote.credentials import (
    CredentialHelper,
    CredentialsFailed,
    parse_response,
)
from dist_lto.distribute.remote.settings import settings_from_options
from dist_lto.errors import BadInput

CERT = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"
DIST_LTO = [sys.executable, "-m", "dist_lto"]


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment without DIST_LTO_* settings and with a home of its own (so no
    configuration file of the machine's user is read)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIST_LTO_")}
    env.pop("XDG_CONFIG_HOME", None)
    env.pop("XDG_CACHE_HOME", None)
    (tmp_path / "home").mkdir(exist_ok=True)
    env["HOME"] = str(tmp_path / "home")
    env.update(extra)
    return env


def distribute(tmp_path: Path, args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DIST_LTO, "distribute", *args], cwd=tmp_path, text=True,
                          capture_output=True, env=clean_env(tmp_path, **env))  # fmt: skip


# ---------------------------------------------------------------------------------
# TLS files


def test_grpcs_reads_the_ca_and_client_pair(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_bytes(CERT)
    (tmp_path / "c.pem").write_bytes(CERT)
    (tmp_path / "c.key").write_bytes(KEY)
    s = settings_from_options("grpcs://re.example.com", None, [], None,
                              ca=str(tmp_path / "ca.pem"), client_cert=str(tmp_path / "c.pem"),
                              client_key=str(tmp_path / "c.key"))  # fmt: skip
    assert s.tls and s.target == "re.example.com:443"
    assert (s.ca, s.client_cert, s.client_key) == (CERT, CERT, KEY)


def test_tls_files_without_grpcs_or_half_a_pair_are_refused(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_bytes(CERT)
    with pytest.raises(BadInput, match=r"^--remote-ca needs a grpcs:// address"):
        settings_from_options("grpc://h:1", None, [], None, ca=str(tmp_path / "ca.pem"))
    with pytest.raises(BadInput, match="go together"):
        settings_from_options("grpcs://h", None, [], None, client_cert=str(tmp_path / "ca.pem"))


def test_a_file_that_is_not_pem_is_named(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_bytes(b"not a certificate")
    with pytest.raises(BadInput, match=r"^--remote-ca: .*ca\.pem: not a PEM certificate$"):
        settings_from_options("grpcs://h", None, [], None, ca=str(tmp_path / "ca.pem"))
    with pytest.raises(BadInput, match=r"^--remote-ca: .*missing\.pem: No such file"):
        settings_from_options("grpcs://h", None, [], None, ca=str(tmp_path / "missing.pem"))


def test_a_header_value_is_never_echoed_in_an_error() -> None:
    with pytest.raises(BadInput) as err:
        settings_from_options("grpc://h:1", None, ["x-token=s3cr3t\x01"], None)
    assert "s3cr3t" not in err.value.message


# ---------------------------------------------------------------------------------
# Where settings come from


def test_help_shows_the_precedence_and_every_variable(tmp_path: Path) -> None:
    out = distribute(tmp_path, ["--help"]).stdout
    assert "the command line first, then DIST_LTO_* environment variables" in out
    for name in (
        "DIST_LTO_JOBS",
        "DIST_LTO_REMOTE",
        "DIST_LTO_REMOTE_CACHE",
        "DIST_LTO_REMOTE_CA",
        "DIST_LTO_CREDENTIAL_HELPER",
        "remote.client_key",
    ):
        assert name in out  # fmt: skip


def test_environment_values_are_checked_and_named_by_their_variable(tmp_path: Path) -> None:
    result = distribute(tmp_path, ["job.json"], DIST_LTO_JOBS="many")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "dist-lto distribute: error: DIST_LTO_JOBS: expected a positive integer, got 'many'"
    )


def test_the_command_line_wins_over_the_environment(tmp_path: Path) -> None:
    result = distribute(tmp_path, ["--jobs", "2", "missing.json"], DIST_LTO_JOBS="many")
    assert result.returncode == 2
    assert "DIST_LTO_JOBS" not in result.stderr and "missing.json" in result.stderr


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "home" / ".config" / "dist-lto" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


def test_file_values_are_named_by_file_and_key(tmp_path: Path) -> None:
    path = write_config(tmp_path, 'cache.max_size = "lots"\n')
    result = distribute(tmp_path, ["job.json"])
    assert result.returncode == 2
    assert result.stderr.startswith(f"dist-lto distribute: error: {path}: cache.max_size: ")


def test_the_environment_wins_over_the_file(tmp_path: Path) -> None:
    write_config(tmp_path, '[remote]\nexecutor = "grpc://h"\n')
    result = distribute(tmp_path, ["job.json"], DIST_LTO_REMOTE="grpc://h:x")
    assert result.returncode == 2
    assert "DIST_LTO_REMOTE: port must be 1 to 65535, got 'x'" in result.stderr


def test_unknown_keys_and_bad_toml_are_one_line_errors(tmp_path: Path) -> None:
    path = write_config(tmp_path, '[remote]\nexecuter = "grpc://h:1"\n')
    result = distribute(tmp_path, ["job.json"])
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"dist-lto distribute: error: {path}: unknown setting 'remote.executer'"
        " (docs/configuration.md)"
    )
    path.write_text("jobs = [\n")
    result = distribute(tmp_path, ["job.json"])
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert f"{path}: not a valid TOML file" in result.stderr


def test_a_named_configuration_file_must_exist(tmp_path: Path) -> None:
    result = distribute(tmp_path, ["job.json"], DIST_LTO_CONFIG=str(tmp_path / "none.toml"))
    assert result.returncode == 2
    assert "none.toml: configuration file (DIST_LTO_CONFIG) does not exist" in result.stderr


def test_remote_settings_without_an_address_elsewhere_are_unused(tmp_path: Path) -> None:
    write_config(tmp_path, '[remote]\nca = "/nowhere/ca.pem"\n')
    result = distribute(tmp_path, ["job.json"])  # no remote: the CA is not even read
    assert "ca.pem" not in result.stderr and "job.json" in result.stderr
    result = distribute(tmp_path, ["--remote-ca", "x.pem", "job.json"])
    assert result.returncode == 2
    assert "--remote-ca needs --remote or --remote-cache" in result.stderr


def test_a_command_line_cache_dir_wins_over_a_disabled_cache_elsewhere(tmp_path: Path) -> None:
    from dist_lto import configuration
    from dist_lto.distribute.settings import Options

    opts = Options()
    opts.cache_dir = "here"
    origin = configuration.fill(
        opts, configuration.LOCAL, clean_env(tmp_path, DIST_LTO_NO_CACHE="1")
    )
    assert opts.no_cache is False and origin == {}


# ---------------------------------------------------------------------------------
# The credential helper


def helper_script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "helper"
    path.write_text(f"#!{sys.executable}\nimport json, sys\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_a_helper_is_asked_with_the_uri_and_its_headers_are_kept(tmp_path: Path) -> None:
    program = helper_script(tmp_path, (
        "request = json.load(sys.stdin)\n"
        "open(sys.argv[0] + '.calls', 'a').write(sys.argv[1] + ' ' + request['uri'] + '\\n')\n"
        "print(json.dumps({'headers': {'Authorization': ['Bearer tok-1'], 'x-a': ['1', '2']}}))"
    ))  # fmt: skip
    helper = CredentialHelper(program, "grpcs://re.example.com:8980")
    assert helper.headers() == (("authorization", "Bearer tok-1"), ("x-a", "1"), ("x-a", "2"))
    helper.headers()
    assert Path(program + ".calls").read_text() == "get grpcs://re.example.com:8980\n"
    assert "Bearer tok-1" in helper.secrets()


def test_headers_that_expire_are_asked_for_again(tmp_path: Path) -> None:
    program = helper_script(tmp_path, (
        "import datetime\n"
        "open(sys.argv[0] + '.calls', 'a').write('x')\n"
        "soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)\n"
        "print(json.dumps({'headers': {'a': ['b']}, 'expires': soon.isoformat()}))"
    ))  # fmt: skip
    helper = CredentialHelper(program, "grpc://h:1")
    helper.headers()
    time.sleep(0.05)
    helper.headers()  # within the refresh margin of its expiry: asked again
    assert Path(program + ".calls").read_text() == "xx"


def test_a_failing_helper_is_a_configuration_error_naming_it(tmp_path: Path) -> None:
    program = helper_script(tmp_path, "sys.stderr.write('no login for re.example.com\\n')\n"
                                      "sys.exit(3)")  # fmt: skip
    with pytest.raises(CredentialsFailed) as err:
        CredentialHelper(program, "grpc://h:1").headers()
    assert err.value.status == 2
    assert err.value.message == (
        f"credential helper {program}: exited with status 3: no login for re.example.com"
    )


@pytest.mark.parametrize(
    ("answer", "problem"),
    [(b"{", "its answer is not JSON"),
     (b'{"headers": {"a": "b"}}', "header 'a': expected a list of strings"),
     (b'{"headers": {"a": ["s3cr3t\\u0001"]}}', "a value of header 'a' is not printable ASCII"),
     (b'{"headers": {}, "expires": "tomorrow"}', "expires 'tomorrow' is not an RFC 3339 time")],
)  # fmt: skip
def test_a_malformed_answer_is_named_without_its_values(answer: bytes, problem: str) -> None:
    with pytest.raises(CredentialsFailed) as err:
        parse_response(answer, "credential helper h")
    assert err.value.message == f"credential helper h: {problem}"
    assert "s3cr3t" not in err.value.message


def test_redaction_removes_every_header_value_from_a_message() -> None:
    from dist_lto.distribute.remote.connection import Connection

    s = settings_from_options("grpc://127.0.0.1:1", None, ["authorization=Bearer s3cr3t"], None)
    connection = Connection(s)
    try:
        said = connection.redact("refused token 'Bearer s3cr3t' for x")
    finally:
        connection.close()
    assert said == "refused token '<redacted>' for x"
