"""The examples built by real Buck2 with our rules, locally, and the programs run.

One build of `//examples/...` per module, in a copy of the project and its own Buck2
daemon: every program twice, with distributed ThinLTO (`NAME`) and in-process ThinLTO
(`NAME-inprocess`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.real_buck2 import Buck2, Ran, scratch_project

pytestmark = pytest.mark.slow  # drives real Buck2 or whole real pipelines

EXPECTED = {
    "examples/c:wordstats": "words=12 mean=5.667 stddev=2.809 hash=1b7c3ed2\n",
    "examples/cpp:shapes_report": (
        "6-gon           2.598\n4-gon           4.000\n"
        "circle(1.50)    7.069\ntotal          13.667\n"
    ),
    "examples/mixed:checksums": "crc32=414fa339 sum=165\n",
    "examples/whole:plugins": "alpha(7) = 14\nbeta(7) = 50\ngamma(7) = 93\n",
    "examples/rust:rust_from_c": "fnv1a=4ed53343b0bec535 distinct=5\n",
}
"""What each program prints: computed independently (by hand, or by the C compiler's
own arithmetic for the floating-point ones) and pinned."""


@dataclass(frozen=True)
class Built:
    buck2: Buck2
    outputs: dict[str, Path]
    ran: list[Ran]

    def run(self, target: str) -> subprocess.CompletedProcess[str]:
        exe = self.outputs[f"root//{target}"]
        return subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)

    def actions(self, target: str, category: str) -> list[Ran]:
        return [r for r in self.ran if r.target == f"root//{target}" and r.category == category]


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    project = scratch_project(tmp_path_factory.mktemp("examples"), examples=True)
    buck2 = Buck2(project)
    if "rust.rustc" not in buck2.config:
        pytest.fail("no rustc found (the Rust example needs one; see examples/rust/BUCK)")
    try:
        outputs = buck2.outputs("//examples/...")
        yield Built(buck2, outputs, buck2.what_ran())
    finally:
        buck2.kill()


@pytest.mark.parametrize("target", sorted(EXPECTED))
def test_distributed_build_prints_the_expected_output(examples: Built, target: str) -> None:
    proc = examples.run(target)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == EXPECTED[target]


@pytest.mark.parametrize("target", sorted(EXPECTED))
def test_in_process_build_behaves_the_same(examples: Built, target: str) -> None:
    proc = examples.run(target + "-inprocess")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == examples.run(target).stdout == EXPECTED[target]


@pytest.mark.parametrize("target", sorted(EXPECTED))
def test_distributed_link_runs_opt_actions_and_in_process_none(
    examples: Built, target: str
) -> None:
    assert examples.actions(target, "thin_lto_opt")
    assert len(examples.actions(target, "thin_lto_plan")) == 1
    assert len(examples.actions(target, "thin_lto_link")) == 1
    assert not examples.actions(target + "-inprocess", "thin_lto_opt")
    assert not examples.actions(target + "-inprocess", "thin_lto_plan")
    assert len(examples.actions(target + "-inprocess", "cxx_link")) == 1


def test_every_action_ran_locally(examples: Built) -> None:
    assert examples.ran
    # The opt actions locally go through the opt worker (each link's largest module's
    # too, though it takes no slot: docs/buck2.md); everything else runs as a command.
    assert {r.executor for r in examples.ran} == {"Local", "Worker"}
    opts = [r for r in examples.ran if r.category == "thin_lto_opt"]
    assert {r.executor for r in opts} == {"Worker"}


def _opt_input(action: Ran) -> str:
    return action.argv[action.argv.index("--input") + 1]


def test_rust_bitcode_members_are_optimised_and_native_members_are_not(
    examples: Built,
) -> None:
    opts = examples.actions("examples/rust:rust_from_c", "thin_lto_opt")
    # The staticlib prepares its archive itself, once for every link that needs it.
    assert len(examples.actions("examples/rust:textkit", "thin_lto_prepare")) == 1
    assert not examples.actions("examples/rust:rust_from_c", "thin_lto_prepare")
    rust_members = [_opt_input(a) for a in opts if "/dist_lto_prepared/" in _opt_input(a)]
    assert rust_members, [a.identifier for a in opts]
    for member in rust_members:
        assert (examples.buck2.project / member).read_bytes()[:4] == b"BC\xc0\xde", member
    # std, core, compiler_builtins... are native members of the same archive: never an
    # opt input, and far more numerous than the crate's own codegen units.
    assert len(rust_members) < 10


def test_opt_actions_read_the_module_their_identifier_names(examples: Built) -> None:
    for target in EXPECTED:
        for action in examples.actions(target, "thin_lto_opt"):
            module = _opt_input(action)
            name = action.identifier.rsplit(":", 1)[-1].split("@")[0]
            assert module.endswith("/" + name), (action.identifier, module)
