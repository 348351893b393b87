"""The examples built by real Buck2 with every action on the BuildBarn engine, through
Buck2's own remote-execution client, as `examples/remote.buckconfig` tells a user.

BuildBarn gives each action an input root holding only what the action declared, so a
remote build that succeeds shows that our actions declare everything they read; a
scratch copy of the rules whose opt action leaves one import out of its inputs shows
the converse: that build fails.
"""

from __future__ import annotations

import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import buildbarn
from support.pki import Pki
from support.real_buck2 import REPO, Buck2, scratch_project
from test_buck2_examples import EXPECTED

pytestmark = pytest.mark.slow  # drives real Buck2 or whole real pipelines

DROPPED = "wordstats/0:main.o"
"""The opt action whose first import the negative test leaves out (main.o imports from
the stats archive; had it no import, the build would succeed and the test fail)."""


def remote_config(engine: buildbarn.Engine) -> str:
    """`examples/remote.buckconfig` pointed at `engine`, with an instance name of its own
    so that no other test's action-cache entries are found."""
    text = (REPO / "examples" / "remote.buckconfig").read_text()
    text = text.replace("grpc://127.0.0.1:8980", engine.address)
    return text + f"\n[buck2_re_client]\ninstance_name = {uuid.uuid4().hex[:12]}\n"


def remote_project(dest: Path, engine: buildbarn.Engine) -> Buck2:
    project = scratch_project(dest, examples=True)
    # Buck2 reads its remote-execution client's settings when its daemon starts, from
    # the project's config files (not from `-c`): the place a user puts them too.
    (project / ".buckconfig.local").write_text(remote_config(engine))
    return Buck2(project)


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory, engine: buildbarn.Engine) -> Iterator[Buck2]:
    buck2 = remote_project(tmp_path_factory.mktemp("remote"), engine)
    yield buck2
    buck2.kill()


@pytest.fixture(scope="module")
def remote_build(remote: Buck2) -> tuple[dict[str, Path], list]:
    outputs = remote.outputs("//examples/...")
    return outputs, remote.what_ran()


def test_every_action_runs_on_the_engine(remote_build: tuple[dict[str, Path], list]) -> None:
    _, ran = remote_build
    executors = Counter(r.executor for r in ran)
    assert set(executors) == {"Re"}, executors
    categories = Counter(r.category for r in ran)
    # Every kind of action of a distributed link ran remotely, the opt actions included,
    # and the prepare actions of the archives whose objects the rules cannot see (the
    # Rust staticlib, the prebuilt libraries).
    for category in ("thin_lto_plan", "thin_lto_opt", "thin_lto_link"):
        assert categories[category] >= 5, categories
    assert categories["thin_lto_prepare"] >= 1, categories
    assert categories["thin_lto_opt"] >= 15, categories


@pytest.mark.parametrize("target", sorted(EXPECTED))
def test_remotely_built_programs_print_what_in_process_builds_print(
    remote_build: tuple[dict[str, Path], list], target: str
) -> None:
    outputs, _ = remote_build
    for name in (target, target + "-inprocess"):
        proc = subprocess.run(
            [str(outputs[f"root//{name}"])], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == EXPECTED[target], name


def test_a_clean_rebuild_takes_every_action_from_the_remote_cache(remote: Buck2) -> None:
    remote("clean", config=False)
    remote.outputs("//examples/c:wordstats")
    ran = remote.what_ran()
    assert len([r for r in ran if r.category == "thin_lto_opt"]) == 3
    assert {r.executor for r in ran} == {"Cache"}, Counter((r.category, r.executor) for r in ran)


def drop_first_import(project: Path, identifier: str) -> None:
    """Edit the scratch project's opt rule so that the opt action `identifier` loses its
    first import from its inputs (what a rule that forgot one would declare)."""
    opt_bzl = project / "prelude" / "dist_lto" / "opt.bzl"
    text = opt_bzl.read_text()
    declared = "        hidden = imports + link.backend_inputs,\n"
    assert text.count(declared) == 1, "prelude/dist_lto/opt.bzl: the opt action's inputs moved"
    dropped = f'        hidden = (imports[1:] if identifier == "{identifier}" else imports)'
    opt_bzl.write_text(text.replace(declared, f"{dropped} + link.backend_inputs,\n"))


def test_an_opt_action_missing_one_import_fails_remotely_and_links_nothing(
    tmp_path: Path, engine: buildbarn.Engine, remote_build: tuple[dict[str, Path], list]
) -> None:
    _, ran = remote_build
    assert [r for r in ran if r.identifier == DROPPED]
    buck2 = remote_project(tmp_path, engine)
    drop_first_import(buck2.project, DROPPED)
    try:
        proc = buck2.build("//examples/c:wordstats", check=False)
        assert proc.returncode != 0
        assert f"thin_lto_opt {DROPPED}" in proc.stderr, proc.stderr[-3000:]
        assert "Error loading imported file" in proc.stderr, proc.stderr[-3000:]
        assert not list((tmp_path / "buck-out").glob("**/__wordstats__/wordstats"))
    finally:
        buck2.kill()


def test_a_build_on_an_engine_behind_tls_with_a_client_certificate_and_a_token(
    tmp_path: Path, tls_engine: buildbarn.Engine, pki: Pki
) -> None:
    """Buck2's own RE client: `tls_ca_certs`, `tls_client_cert` (certificate and key in
    one file) and a bearer token in `http_headers`, expanded from the daemon's
    environment so that no file holds it."""
    # Buck2 takes a TLS service's address without a scheme: `tls = true` says how.
    bare = tls_engine.address.removeprefix("grpcs://")
    config = (
        remote_config(tls_engine)
        .replace(tls_engine.address, bare)
        .replace(
            "tls = false",
            f"tls = true\ntls_ca_certs = {pki.ca}\ntls_client_cert = {pki.client_pair}\n"
            "http_headers = Authorization: Bearer $DIST_LTO_RE_TOKEN",
        )
    )
    project = scratch_project(tmp_path, examples=True)
    (project / ".buckconfig.local").write_text(config)
    buck2 = Buck2(project, env={"DIST_LTO_RE_TOKEN": pki.token})
    try:
        outputs = buck2.outputs("//examples/c:wordstats")
        ran = buck2.what_ran()
        assert {r.executor for r in ran} == {"Re"}, Counter(r.executor for r in ran)
        assert len([r for r in ran if r.category == "thin_lto_opt"]) == 3
        proc = subprocess.run([str(outputs["root//examples/c:wordstats"])], capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        assert proc.stdout == EXPECTED["examples/c:wordstats"]
    finally:
        buck2.kill()
