"""The fuzz campaign (fuzz/fuzz.py) in small: hostile inputs for every tool, nothing found.

The full campaign (100,000 inputs, figures in docs/reliability.md) runs by hand; here a few
hundred inputs run through the same generators, sandbox and checks, and the checks
themselves are shown to catch what they look for.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import pytest
from support.tools import REPO

sys.path.insert(0, str(REPO / "fuzz"))  # what is tested here is the campaign, fuzz/fuzz.py
import fuzz_sandbox
from fuzz_cases import TOOLS, Case

import fuzz

pytestmark = pytest.mark.slow  # drives real Buck2 or whole real pipelines

SUITE_COUNTS = {"prepare": 160, "plan": 120, "opt": 60, "distribute": 60}


def test_a_small_campaign_finds_no_traceback_hang_escape_or_other_problem(tmp_path: Path) -> None:
    settings = fuzz.Settings(tmp_path, timeout=60, subprocess_share=0.02, keep=3, seed=7)
    tally = fuzz.campaign(SUITE_COUNTS, settings, workers=2)
    report = tally.table()
    assert tally.failures() == 0, (
        report
        + "\n"
        + "\n".join(p.read_text() for p in sorted((tmp_path / "findings").glob("*.json")))
    )
    for tool in TOOLS:
        assert tally.done[tool] == SUITE_COUNTS[tool], report
        # Neither everything rejected nor everything accepted: the inputs reach the tools.
        assert tally.status[tool]["0"] > 0 and tally.status[tool]["2"] > 0, report
    assert sum(tally.sub.values()) > 0, "no input ran as a real process"


# ---------------------------------------------------------------------------------
# The checks catch what they look for


def run_fake(tmp_path: Path, body: object, outputs: list[str],
             timeout: float = 20) -> list[tuple[str, str]]:  # fmt: skip
    """Run `body(argv)` the way the campaign runs a tool, in a sandbox holding one input
    file (`in/input.o`); return what the checks found."""
    root = tmp_path / "case"
    cwd = root / "s" / "a" / "b" / "w"
    (cwd / "in").mkdir(parents=True)
    (cwd / "out").mkdir()
    (cwd / "in" / "input.o").write_bytes(b"input")
    case = Case(tool="fake", argv=["fake"], files={}, outputs=outputs, clean_on_failure=outputs)
    before = fuzz_sandbox.snapshot(str(root))
    outcome = fuzz_sandbox.run_in_process(
        body, case.argv, str(cwd), dict(os.environ), str(tmp_path / "log"), timeout
    )  # type: ignore[arg-type]
    changes = fuzz_sandbox.changes(before, fuzz_sandbox.snapshot(str(root)))
    return fuzz.check(case, outcome, changes, str(cwd), str(root))


def kinds(problems: list[tuple[str, str]]) -> set[str]:
    return {kind for kind, _ in problems}


def test_the_checks_accept_a_tool_that_writes_only_its_declared_output(tmp_path: Path) -> None:
    def tool(argv: list[str]) -> int:
        Path("out/result.o").write_bytes(b"done")
        return 0

    assert run_fake(tmp_path, tool, ["out/result.o"]) == []


def test_the_checks_see_a_traceback_and_an_internal_error(tmp_path: Path) -> None:
    def crashes(argv: list[str]) -> int:
        raise RuntimeError("boom")

    def internal(argv: list[str]) -> int:
        print("dist-lto opt: internal error: KeyError: 'x'")
        return 1

    assert kinds(run_fake(tmp_path / "a", crashes, [])) >= {"traceback", "unexpected status"}
    assert "traceback" in kinds(run_fake(tmp_path / "b", internal, []))


def test_the_checks_see_a_hang(tmp_path: Path) -> None:
    def hangs(argv: list[str]) -> int:
        time.sleep(60)
        return 0

    assert kinds(run_fake(tmp_path, hangs, [], timeout=0.5)) == {"hang"}


@pytest.mark.parametrize(
    ("action", "kind"),
    [("create ../../../escaped.txt", "escape"), ("create in/new.o", "escape"),
     ("remove in/input.o", "escape"), ("clobber in/input.o", "clobbered input"),
     ("create out/.result.o.tmp-12-0123abcd", "leftover temporary")],
)  # fmt: skip
def test_the_checks_see_writes_outside_the_outputs_and_leftovers(
    tmp_path: Path, action: str, kind: str
) -> None:
    verb, path = action.split()

    def tool(argv: list[str]) -> int:
        if verb == "remove":
            os.unlink(path)
        else:
            Path(path).write_bytes(b"x")
        return 0

    outputs = ["in/input.o"] if verb == "clobber" else ["out/result.o"]
    assert kind in kinds(run_fake(tmp_path, tool, outputs))


def test_the_checks_see_a_failed_run_that_leaves_its_output(tmp_path: Path) -> None:
    def fails_late(argv: list[str]) -> int:
        Path("out/result.o").write_bytes(b"half")
        return 2

    assert kinds(run_fake(tmp_path, fails_late, ["out/result.o"])) == {"half-written output"}


@pytest.mark.parametrize("node", ["fifo", "device"])
def test_the_checks_see_a_device_or_fifo_output_replaced_but_not_one_written_through(
    tmp_path: Path, node: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An output drawn among devices and FIFOs: writing through a device keeps the node
    (nothing found); replacing it by a rename is a clobbered input."""

    def make(path: Path) -> None:
        if node == "fifo":
            os.mkfifo(path)
        else:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))

    def replaces(argv: list[str]) -> int:
        Path("out/.tmp").write_bytes(b"object")
        os.replace("out/.tmp", "in/node")
        return 0

    def writes_through(argv: list[str]) -> int:
        with open("in/node", "wb") as f:
            f.write(b"object")
        return 0

    original = fuzz_sandbox.snapshot  # run_fake makes the sandbox: add the node before

    def with_node(root: str) -> dict[str, fuzz_sandbox.Entry]:
        target = Path(root) / "s" / "a" / "b" / "w" / "in" / "node"
        if not os.path.lexists(target):
            make(target)
        return original(root)

    monkeypatch.setattr(fuzz_sandbox, "snapshot", with_node)
    assert "clobbered input" in kinds(run_fake(tmp_path / "r", replaces, ["in/node"]))
    if node == "device":
        assert run_fake(tmp_path / "w", writes_through, ["in/node"]) == []
