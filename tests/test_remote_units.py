"""The parts of `--remote` that need no engine: option parsing and input trees."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from dist_lto.distribute.remote import connection
from dist_lto.distribute.remote.cas import FileDigests, build_tree, relative_parts
from dist_lto.distribute.remote.protos import re_pb2
from dist_lto.distribute.remote.settings import (
    DEFAULT_PLATFORM,
    RemoteSettings,
    parse_address,
    parse_header,
    parse_instance,
    settings_from_options,
)
from dist_lto.errors import BadInput
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.budget import examples
from support.tools import run_cli

hosts = st.one_of(
    st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,20}[a-z0-9])?", fullmatch=True),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda ip: f"[{ip}]"),
)


@given(hosts, st.integers(1, 65535))
def test_grpc_addresses_become_grpc_targets(host: str, port: int) -> None:
    assert parse_address(f"grpc://{host}:{port}") == f"{host}:{port}"
    assert parse_address(f"grpcs://{host}:{port}") == f"{host}:{port}"
    assert parse_address(f"grpcs://{host}") == f"{host}:443"


@given(st.text(max_size=40))
@settings(max_examples=examples(300))
def test_any_other_address_is_bad_input_never_a_crash(text: str) -> None:
    try:
        target = parse_address(text)
    except BadInput as err:
        assert err.message.startswith("--remote: ")
        assert "\n" not in err.message
    else:
        scheme = "grpcs://" if text.startswith("grpcs://") else "grpc://"
        assert text.startswith(scheme)
        rest = text.removeprefix(scheme)
        assert target == rest or (scheme == "grpcs://" and target == rest + ":443")


@pytest.mark.parametrize(
    "text",
    ["127.0.0.1:8980", "https://h:1", "http://h:1", "grpc://h", "grpc://h:0", "grpc://h:65536",
     "grpc://:80", "grpc://h:8x", "grpc://a b:1"],
)  # fmt: skip
def test_addresses_we_cannot_use_are_named_in_the_error(text: str) -> None:
    with pytest.raises(BadInput, match=r"^--remote: .*" + repr(text)[1:-1].replace(".", r"\.")):
        parse_address(text)


@given(st.text(max_size=30), st.text(max_size=30))
@settings(max_examples=examples(300))
def test_headers_are_valid_grpc_metadata_or_bad_input(key: str, value: str) -> None:
    text = f"{key}={value}"
    try:
        k, v = parse_header(text)
    except BadInput as err:
        assert err.message.startswith("--remote-header: ")
    else:
        given_key, _, given_value = text.partition("=")  # the first '=' separates
        assert k == given_key.lower() and k and not k.startswith("grpc-")
        assert not k.endswith("-bin")
        assert set(k) <= set("abcdefghijklmnopqrstuvwxyz0123456789-_.")
        assert v == given_value and v.isascii() and v.isprintable()


def test_header_value_with_a_control_character_is_refused() -> None:
    with pytest.raises(BadInput, match="has a control character"):
        parse_header("x-token=a\x01b")


def test_header_without_equals_or_with_a_reserved_key_is_refused() -> None:
    for text in ("authorization", "=x", "grpc-timeout=1", "x-bin=abc", "a b=1"):
        with pytest.raises(BadInput, match=r"^--remote-header: "):
            parse_header(text)
    assert parse_header("Authorization=Bearer t=1") == ("authorization", "Bearer t=1")


@given(st.lists(st.text(min_size=0, max_size=8), min_size=1, max_size=4).map("/".join))
def test_instance_names_keep_their_segments_or_are_bad_input(text: str) -> None:
    try:
        assert parse_instance(text) == text
    except BadInput as err:
        assert err.message.startswith("--instance: ")
        assert text and (
            any(not seg or seg in ("blobs", "uploads", "operations") or not seg.isprintable()
                or " " in seg for seg in text.split("/"))
            or any(seg in ("actions", "actionResults", "capabilities", "compressed-blobs")
                   for seg in text.split("/"))
        )  # fmt: skip


def test_platform_properties_are_sorted_and_replace_the_default() -> None:
    default = settings_from_options("grpc://h:1", None, [], None)
    assert default.platform == DEFAULT_PLATFORM and default.instance == ""
    chosen = settings_from_options("grpc://h:1", "a/b", ["K=v"], ["z=1", "a=2", "z=3"])
    assert chosen.platform == (("a", "2"), ("z", "3"))
    assert chosen.headers == (("k", "v"),) and chosen.instance == "a/b"


# ---------------------------------------------------------------------------------
# Input trees


def _tree_files(tree_blobs: dict, digest: re_pb2.Digest, prefix: str = "") -> dict[str, str]:
    """path -> content hash of every file under the Directory with `digest`."""
    directory = re_pb2.Directory.FromString(tree_blobs[(digest.hash, digest.size_bytes)])
    for entries in (directory.files, directory.directories):
        assert [e.name for e in entries] == sorted(e.name for e in entries)  # REAPI's order
    out = {prefix + f.name: f.digest.hash for f in directory.files}
    for d in directory.directories:
        out.update(_tree_files(tree_blobs, d.digest, prefix + d.name + "/"))
    return out


@pytest.fixture
def link_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    here = tmp_path / "proj" / "link"
    (here / "obj").mkdir(parents=True)
    (tmp_path / "proj" / "prof").mkdir()
    (here / "obj" / "a.o").write_bytes(b"a")
    (here / "obj" / "b.o").write_bytes(b"bb")
    (here / "a.o.thinlto.bc").write_bytes(b"index")
    (tmp_path / "proj" / "prof" / "p.prof").write_bytes(b"profile")
    monkeypatch.chdir(here)
    return here


def test_input_tree_mirrors_the_paths_the_job_names(link_dir: Path) -> None:
    tree = build_tree(["obj/a.o", "a.o.thinlto.bc", "obj/b.o"], FileDigests())
    assert tree.working_directory == ""
    files = _tree_files(tree.blobs, tree.root)
    assert sorted(files) == ["a.o.thinlto.bc", "obj/a.o", "obj/b.o"]


def test_inputs_above_the_link_directory_move_the_root_up(link_dir: Path) -> None:
    tree = build_tree(["obj/a.o", "../prof/p.prof", "./obj/../obj/b.o"], FileDigests())
    assert tree.working_directory == "link"
    assert sorted(_tree_files(tree.blobs, tree.root)) == [
        "link/obj/a.o", "link/obj/b.o", "prof/p.prof"
    ]  # fmt: skip


@given(st.permutations(["obj/a.o", "a.o.thinlto.bc", "obj/b.o", "../prof/p.prof"]))
@settings(
    max_examples=examples(24),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_the_input_root_digest_does_not_depend_on_input_order(
    link_dir: Path, order: list[str]
) -> None:
    reference = build_tree(
        ["obj/a.o", "a.o.thinlto.bc", "obj/b.o", "../prof/p.prof"], FileDigests()
    )
    assert build_tree(order, FileDigests()).root == reference.root


def test_absolute_or_unreadable_inputs_are_bad_input(link_dir: Path) -> None:
    with pytest.raises(BadInput, match="absolute path; remote execution needs paths relative"):
        build_tree([str(link_dir / "obj" / "a.o")], FileDigests())
    with pytest.raises(BadInput, match=r"^obj/missing\.o: cannot read input"):
        build_tree(["obj/missing.o"], FileDigests())
    assert relative_parts("./x/../y.o", "input") == ["y.o"]


# ---------------------------------------------------------------------------------
# The command line


def test_remote_options_without_remote_are_bad_input(tmp_path: Path) -> None:
    proc = run_cli(["distribute", "--instance=x", "jobs.json"], cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == (
        "dist-lto distribute: error: --instance needs --remote or --remote-cache\n"
    )


def test_a_bad_remote_address_is_bad_input_before_anything_runs(tmp_path: Path) -> None:
    proc = run_cli(["distribute", "--remote=http://h:1", "jobs.json"], cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("dist-lto distribute: error: --remote: unsupported scheme")
    assert len(proc.stderr.splitlines()) == 1


def test_help_documents_the_remote_options() -> None:
    proc = run_cli(["distribute", "--help"])
    assert proc.returncode == 0
    for option in ("--remote URL", "--remote-cache URL", "--instance NAME", "--remote-header K=V",
                   "--platform K=V", "--remote-ca PEM", "--remote-client-cert PEM",
                   "--remote-client-key PEM", "--credential-helper PROGRAM",
                   "--remote-timeout DURATION", "--remote-action-timeout DURATION"):  # fmt: skip
        assert option in proc.stdout


class _Refusal(grpc.RpcError):
    """A failed gRPC call as the stubs raise it."""

    def __init__(self, code: grpc.StatusCode, details: str = "the engine says no") -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


@pytest.mark.parametrize(
    ("failures", "calls", "pauses"),
    [([grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED], 3, [0.25, 0.5]),
     ([grpc.StatusCode.INVALID_ARGUMENT], 1, []),
     ([grpc.StatusCode.FAILED_PRECONDITION], 1, []),
     ([grpc.StatusCode.UNAVAILABLE] * 9, 4, [0.25, 0.5, 1.0])],
)  # fmt: skip
def test_transient_statuses_are_tried_again_after_growing_pauses_and_no_other(
    monkeypatch: pytest.MonkeyPatch,
    failures: list[grpc.StatusCode],
    calls: int,
    pauses: list[float],
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(connection.time, "sleep", slept.append)
    remote = connection.Connection(
        RemoteSettings(address="grpc://127.0.0.1:9", target="127.0.0.1:9")
    )
    made: list[int] = []

    def call() -> str:
        made.append(1)
        if len(made) <= len(failures):
            raise _Refusal(failures[len(made) - 1])
        return "answer"

    if calls > len(failures):
        assert remote.call("Execute", call) == "answer"
    else:
        with pytest.raises(connection.RemoteFailed, match=r"Execute: .*the engine says no"):
            remote.call("Execute", call)
    assert (len(made), slept) == (calls, pauses)
    remote.channel.close()
