"""The examples built through our Buck2 rules by the harness, with real clang/lld/rustc.

One build of `//examples/...` per session: every program twice, with distributed
ThinLTO (`NAME`) and in-process ThinLTO (`NAME-inprocess`).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from buck2 import BuildError, BuildResult, Harness, Label
from buck2.graph import Action
from buck2.local import REPO, harness_config

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


def label(text: str) -> Label:
    package, name = text.split(":")
    return Label("root", package, name)


@pytest.fixture(scope="session")
def examples(tmp_path_factory: pytest.TempPathFactory) -> BuildResult:
    config = harness_config()
    if "rust.rustc" not in config:
        pytest.fail("no rustc found (the Rust example needs one; see examples/rust/BUCK)")
    harness = Harness(REPO, tmp_path_factory.mktemp("buck-out"), config)
    return harness.build(["//examples/..."])


def run(result: BuildResult, target: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        result.run_args(label(target)), capture_output=True, text=True, timeout=60
    )


def opt_actions(result: BuildResult, target: str) -> list[Action]:
    return [
        a for a in result.actions if a.target == f"root//{target}" and a.category == "thin_lto_opt"
    ]


@pytest.mark.parametrize("target", sorted(EXPECTED))
def test_distributed_build_prints_the_expected_output(examples: BuildResult, target: str) -> None:
    proc = run(examples, target)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == EXPECTED[target]


@pytest.mark.parametrize("target", sorted(EXPECTED))
def test_in_process_build_behaves_the_same(examples: BuildResult, target: str) -> None:
    proc = run(examples, target + "-inprocess")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == run(examples, target).stdout == EXPECTED[target]


@pytest.mark.parametrize("target", sorted(EXPECTED))
def test_distributed_link_runs_opt_actions_and_in_process_none(
    examples: BuildResult, target: str
) -> None:
    assert opt_actions(examples, target)
    assert not opt_actions(examples, target + "-inprocess")
    links = {a.category for a in examples.actions if a.target == f"root//{target}-inprocess"}
    assert "cxx_link" in links and "thin_lto_plan" not in links


def test_every_action_has_a_category_and_an_identifier(examples: BuildResult) -> None:
    assert examples.actions
    for action in examples.actions:
        assert action.category, action
        assert action.identifier, action.describe()


def test_rust_bitcode_members_are_optimised_and_native_members_are_not(
    examples: BuildResult,
) -> None:
    inputs = [
        a.argv[a.argv.index("--input") + 1]
        for a in opt_actions(examples, "examples/rust:rust_from_c")
    ]
    rust_members = [i for i in inputs if "/dist_lto/archives/" in i]
    assert rust_members, inputs
    for member in rust_members:
        head = examples.path(member).read_bytes()[:4]
        assert head == b"BC\xc0\xde", member
    prepared = [
        a
        for a in examples.actions
        if a.category == "thin_lto_prepare" and a.target == "root//examples/rust:rust_from_c"
    ]
    assert len(prepared) == 1
    # std, core, compiler_builtins... are native members of the same archive: never an opt input.
    assert len(rust_members) < 10


def test_thin_archive_members_are_inputs_of_the_prepare_action(examples: BuildResult) -> None:
    (prepare,) = [
        a
        for a in examples.actions
        if a.category == "thin_lto_prepare" and a.target == "root//examples/cpp:shapes_report"
    ]
    members = [k for k in prepare.inputs if k.endswith(".o")]
    assert sorted(Path(m).name for m in members) == ["circle.o", "polygon.o", "registry.o"]


def _imports_file(result: BuildResult, action: Action) -> Path:
    """Where LLD wrote the `.imports` list of this action's module (docs/plan.md layout)."""
    module = action.argv[action.argv.index("--input") + 1]
    out_dir = action.target.split("//", 1)[1].replace(":", "/__") + "__"
    return result.path(f"buck-out/v2/gen/root/{out_dir}/dist_lto/index/{module}.imports")


def test_opt_inputs_are_exactly_module_index_imports_flags_and_tools(examples: BuildResult) -> None:
    checked = 0
    for target in EXPECTED:
        for action in opt_actions(examples, target):
            argv = action.argv
            module, index, flags = (
                argv[argv.index(o) + 1] for o in ("--input", "--index", "--args")
            )
            imports = _imports_file(examples, action).read_text().split()
            tools = [k for k in action.inputs if k.endswith("/dist_lto_pkg")]
            assert len(tools) == 1
            profiles = ["examples/c/wordstats.prof"] if target == "examples/c:wordstats" else []
            expected = {module, index, flags, *imports, *tools, *profiles}
            assert sorted(action.inputs) == sorted(expected)
            checked += 1 if imports else 0
    assert checked >= 3, "too few modules import anything for this test to mean much"


def test_removing_an_opt_actions_hidden_imports_fails_in_the_sandbox(
    examples: BuildResult, tmp_path: Path
) -> None:
    (main_opt,) = [
        a for a in opt_actions(examples, "examples/c:wordstats") if "main.o" in a.identifier
    ]
    assert _imports_file(examples, main_opt).read_text().split(), "main.o must import something"
    project = tmp_path / "project"
    for name in ("prelude", "tools/dist_lto", "examples/c"):
        shutil.copytree(REPO / name, project / name)
    for name in ("BUCK", ".buckconfig", "examples/defs.bzl"):
        shutil.copy(REPO / name, project / name)
    opt_bzl = project / "prelude/dist_lto/opt.bzl"
    source = opt_bzl.read_text()
    anchor = "hidden = imports + link.backend_inputs,"
    assert source.count(anchor) == 1
    opt_bzl.write_text(source.replace(anchor, "hidden = link.backend_inputs,"))
    harness = Harness(project, tmp_path / "out", harness_config())
    with pytest.raises(BuildError) as err:
        harness.build(["//examples/c:wordstats"])
    message = str(err.value)
    assert "thin_lto_opt" in message
    assert "Error loading imported file" in message
