"""Durations (`durations.py`) and the remote timeouts that read them: `--remote-timeout`
is each remote call's deadline, as Bazel's `--remote_timeout`; `--remote-action-timeout`
is how long an action may run on a worker. Both take units from every source."""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path

import pytest
from dist_lto.distribute.remote import connection
from dist_lto.distribute.remote.settings import DEFAULT_RPC_TIMEOUT, settings_from_options
from dist_lto.distribute.settings import Options, Settings
from dist_lto.durations import parse_duration
from dist_lto.errors import BadInput
from hypothesis import given, settings
from hypothesis import strategies as st
from support.budget import examples


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("0.05", 0.05), ("500ms", 0.5), ("60s", 60), ("5m", 300), ("1.5h", 5400),
     ("12h", 43200), ("30d", 2592000), ("2w", 1209600), (" 10M ", 600)],
)  # fmt: skip
def test_durations_take_plain_seconds_and_units(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "soon", "3 days", "-1", "1e3", "5y", "1..2", "."])
def test_a_malformed_duration_is_rejected_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match=f"not a duration: {text!r}"):
        parse_duration(text)


@settings(max_examples=examples(200))
@given(st.integers(0, 10**6), st.sampled_from(["", "ms", "s", "m", "h", "d", "w"]))
def test_every_number_with_a_unit_parses(number: int, unit: str) -> None:
    factor = {"": 1, "ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[unit]
    assert parse_duration(f"{number}{unit}") == pytest.approx(number * factor)


@settings(max_examples=examples(300))
@given(st.text(max_size=12))
def test_duration_parsing_fails_only_with_value_error(text: str) -> None:
    with contextlib.suppress(ValueError):
        assert parse_duration(text) >= 0


def remote_settings_of(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, config: str, **variables: str
) -> Settings:
    """`distribute`'s settings for `--remote=grpc://h:1`, from these variables and a
    configuration file holding `config`."""
    for name in ("DIST_LTO_REMOTE_TIMEOUT", "DIST_LTO_REMOTE_ACTION_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "config.toml"
    path.write_text(config)
    monkeypatch.setenv("DIST_LTO_CONFIG", str(path))
    opts = Options()
    opts.remote = "grpc://h:1"
    return Settings(opts)


def test_the_remote_timeouts_take_units_from_variables_and_the_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    unset = remote_settings_of(monkeypatch, tmp_path, "")
    assert unset.remote is not None
    assert (unset.remote.rpc_timeout, unset.remote.action_timeout) == (DEFAULT_RPC_TIMEOUT, 0)
    config = '[remote]\ntimeout = "2m"\naction_timeout = 900\n'
    from_file = remote_settings_of(monkeypatch, tmp_path, config)
    assert from_file.remote is not None
    assert (from_file.remote.rpc_timeout, from_file.remote.action_timeout) == (120, 900)
    from_env = remote_settings_of(monkeypatch, tmp_path, config, DIST_LTO_REMOTE_TIMEOUT="30s",
                                  DIST_LTO_REMOTE_ACTION_TIMEOUT="1h")  # fmt: skip
    assert from_env.remote is not None
    assert (from_env.remote.rpc_timeout, from_env.remote.action_timeout) == (30, 3600)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [("DIST_LTO_REMOTE_TIMEOUT", "soon", "DIST_LTO_REMOTE_TIMEOUT: not a duration: 'soon'"),
     ("DIST_LTO_REMOTE_ACTION_TIMEOUT", "0s",
      "DIST_LTO_REMOTE_ACTION_TIMEOUT: expected a positive duration, got '0s'")],
)  # fmt: skip
def test_a_bad_timeout_is_bad_input_naming_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str, value: str, message: str
) -> None:
    with pytest.raises(BadInput) as raised:
        remote_settings_of(monkeypatch, tmp_path, "", **{variable: value})
    assert raised.value.message.startswith(message)


def test_the_command_line_timeouts_are_named_by_their_options() -> None:
    with pytest.raises(BadInput, match="--remote-timeout: not a duration: 'a minute'"):
        settings_from_options("grpc://h:1", None, [], None, timeout="a minute")
    chosen = settings_from_options("grpc://h:1", None, [], None, timeout="5m",
                                   action_timeout="250ms")  # fmt: skip
    assert (chosen.rpc_timeout, chosen.action_timeout) == (300, 0.25)


def test_remote_timeout_is_the_deadline_of_each_call_to_a_silent_service() -> None:
    """A service that accepts the connection and never answers: every call ends at the
    deadline, and the link fails after its tries rather than waiting a minute each."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # the kernel completes connections; nobody reads them
    port = silent.getsockname()[1]
    remote = connection.Connection(
        settings_from_options(f"grpc://127.0.0.1:{port}", None, [], None, timeout="300ms")
    )
    started = time.monotonic()
    try:
        with pytest.raises(connection.RemoteFailed, match="DEADLINE_EXCEEDED") as failed:
            remote.server_capabilities()
    finally:
        remote.close()
        silent.close()
    took = time.monotonic() - started
    attempts = remote.settings.attempts
    pauses = sum(connection.FIRST_PAUSE * 2**i for i in range(attempts - 1))
    assert f"after {attempts} attempts" in failed.value.message
    assert attempts * 0.3 + pauses - 0.1 < took < attempts * 0.3 + pauses + 5
