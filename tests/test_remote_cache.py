"""`dist-lto distribute --remote-cache`: jobs compile here, results are shared through a
REAPI action cache and CAS, on real services on loopback: BuildBarn's storage, and
bazel-remote (a cache-only server built from the Go module proxy, tests/support/bazel_remote.py).

Two clean clones of Lua (other directories, empty local caches, other LLD processes, so
other file names) link one after the other: the first compiles every backend and
uploads it, the second compiles nothing. BuildBarn's workers never run anything: read
from their logs. A result in the remote cache that is not a complete object is refused
and compiled here instead: a cache never poisons a link.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from dist_lto.distribute.cache_key import command_identity
from dist_lto.distribute.remote.cache_only import RemoteCache
from dist_lto.distribute.remote.cas import digest_of
from dist_lto.distribute.remote.protos import re_pb2
from dist_lto.distribute.remote.results import key_action
from dist_lto.distribute.remote.settings import settings_from_options
from dist_lto.formats.jobfile import read_job_file
from support import bazel_remote, buildbarn, workloads
from support.links import DtltoLink
from support.pki import Pki
from support.tools import run_cli
from test_remote_engine import fresh_instance, link_remote, worker_record


def clone_link(engine: buildbarn.Engine, tmp_path: Path, name: str, instance: str,
               address: str = ""):  # fmt: skip
    """Lua built and linked in a directory and with a local cache of its own."""
    build = workloads.build("lua", tmp_path / name)
    return link_remote(engine, build, tmp_path / f"cache-{name}", instance,
                       flag="--remote-cache", address=address)  # fmt: skip


@pytest.fixture
def cache_server(tmp_path: Path) -> Iterator[bazel_remote.Server]:
    """A bazel-remote of the test's own (it has no instance namespaces)."""
    try:
        server = bazel_remote.start(tmp_path / "bazel-remote")
    except buildbarn.EngineError as err:
        pytest.fail(f"bazel-remote did not start (run `bash .ci/setup`): {err}")
    yield server
    server.stop()


@pytest.mark.slow
@pytest.mark.parametrize("service", ["buildbarn", "bazel-remote"])
def test_two_clean_clones_share_every_backend_through_the_action_cache(
    engine: buildbarn.Engine, tmp_path: Path, service: str, request: pytest.FixtureRequest
) -> None:
    instance = fresh_instance()
    address = request.getfixturevalue("cache_server").address if service != "buildbarn" else ""
    first = clone_link(engine, tmp_path, "one", instance, address)
    assert first.proc.returncode == 0, first.proc.stderr
    workloads.check_binary("lua", first.build.root / "lua")
    assert len(first.lines("] compiled ")) == len(first.outputs) == 33
    second = clone_link(engine, tmp_path, "two", instance, address)
    assert second.proc.returncode == 0, second.proc.stderr
    workloads.check_binary("lua", second.build.root / "lua")
    assert len(second.lines("from the remote action cache (ran on ")) == 33
    assert second.lines("] compiled ") == []
    assert worker_record(engine, instance).started == {}  # no worker ran anything
    objects = [sorted(link.build.root.glob("*.native.o")) for link in (first, second)]
    assert [p.read_bytes() for p in objects[0]] == [p.read_bytes() for p in objects[1]]


@pytest.mark.slow
def test_a_cache_only_server_behind_mutual_tls_shares_results(
    pki: Pki, small_dtlto: DtltoLink, tmp_path: Path
) -> None:
    server = bazel_remote.start(tmp_path / "bazel-remote", tls_dir=pki.ca.parent)
    tls = [
        f"--remote-cache={server.address}",
        f"--remote-ca={pki.ca}",
        f"--remote-client-cert={pki.client_cert}",
        f"--remote-client-key={pki.client_key}",
    ]
    try:
        said = []
        for name in ("one", "two"):
            root = small_dtlto.clone(tmp_path / name)
            result = run_cli(
                ["distribute", *tls, "--no-cache", "--verbose", small_dtlto.job_file], cwd=root
            )
            assert result.returncode == 0, result.stderr
            said.append(result.stderr)
        assert said[0].count("] compiled ") == 4
        assert said[1].count("from the remote action cache") == 4
        refused = run_cli(
            ["distribute", *tls[:2], "--no-cache", small_dtlto.job_file], cwd=tmp_path / "two"
        )
        assert refused.returncode == 2  # no client certificate
        assert refused.stderr == (
            f"dist-lto distribute: error: {server.address}: GetCapabilities: the service"
            " refused our credentials: UNAUTHENTICATED: could not verify peer certificate\n"
        )
    finally:
        server.stop()


@pytest.mark.slow
def test_a_cached_result_that_is_no_object_is_refused_and_compiled_here(
    engine: buildbarn.Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    instance = fresh_instance()
    first = clone_link(engine, tmp_path, "one", instance)
    assert first.proc.returncode == 0, first.proc.stderr
    # Replace every result the first link filed by one whose object is text.
    (job_file,) = first.build.root.glob("lua.*.dist-file.json")
    monkeypatch.chdir(first.build.root)  # the job file's paths are relative to it
    files = read_job_file(job_file.name)
    settings = settings_from_options(engine.address, instance, [], None, cache_only=True)
    identity = command_identity(files.args, str(tmp_path / "tools"))
    cache = RemoteCache(files, settings, "cache-only\0" + identity)
    garbage = b"not an object\n"
    cache.store.upload({(digest_of(garbage).hash, len(garbage)): garbage}, {})
    try:
        for job in files.jobs:
            result = re_pb2.ActionResult(exit_code=0)
            result.output_files.add(path="0", digest=digest_of(garbage))
            key = cache.keys.key(job)
            assert key is not None
            assert cache.file_result(key_action(key, cache.platform), result, "test")
    finally:
        cache.close()
    second = clone_link(engine, tmp_path, "two", instance)
    assert second.proc.returncode == 0, second.proc.stderr
    workloads.check_binary("lua", second.build.root / "lua")
    assert second.lines("from the remote action cache") == []
    assert "warning: 33 damaged cached results not used, the jobs ran again" in second.proc.stderr


def test_an_unreachable_remote_cache_warns_and_the_jobs_compile_here(
    small_dtlto: DtltoLink, tmp_path: Path
) -> None:
    root = small_dtlto.clone(tmp_path / "link")
    proc = run_cli(["distribute", "--remote-cache=grpc://127.0.0.1:1", "--no-cache",
                    small_dtlto.job_file], cwd=root)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "warning: remote cache not used: grpc://127.0.0.1:1: GetCapabilities: cannot reach" \
        in proc.stderr  # fmt: skip
    assert len(list(root.glob("*.native.o"))) == 4
