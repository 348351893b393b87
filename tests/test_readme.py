"""README.md's quick starts run as written on a machine `.ci/setup` prepared: each `sh`
block under a "Quick start" heading, pasted into bash from a clone of the repository,
with Debian's PATH (where LLVM 22's compiler is `clang-22`) and `dist-lto` only where
the README installs it (`.venv`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import real_buck2
from support.tools import REPO, Llvm

DEBIAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""A fresh Debian 12 root shell's PATH: no `clang`, no `dist-lto`."""

DTLTO, BUCK2, REPLAY = (
    "Quick start: LLD's DTLTO with any build system",
    "Quick start: Buck2",
    "Quick start: replay a captured link",
)


def quick_starts(readme: str) -> dict[str, list[str]]:
    """The `sh` blocks of each `## Quick start...` section, by heading."""
    found: dict[str, list[str]] = {}
    for section in re.split(r"^## ", readme, flags=re.M)[1:]:
        heading, _, body = section.partition("\n")
        if heading.startswith("Quick start"):
            found[heading] = re.findall(r"^```sh\n(.*?)^```", body, flags=re.M | re.S)
    return found


def clone(tmp_path: Path) -> Path:
    """What a clone holds after `.ci/setup` for these blocks: the examples and the venv
    (this test's interpreter's, which has the package installed)."""
    root = tmp_path / "dist-lto"
    shutil.copytree(REPO / "examples", root / "examples", ignore=shutil.ignore_patterns("buck-out"))
    (root / ".venv").symlink_to(Path(sys.prefix))
    return root


def paste(
    block: str, root: Path, tmp_path: Path, *, strict: bool = True
) -> subprocess.CompletedProcess[str]:
    """`block` as a user pasting it into bash at the clone's root (`strict`: stopping at
    the first failing command, as the test must)."""
    (tmp_path / "home").mkdir(exist_ok=True)  # a user's home exists
    env = {"PATH": DEBIAN_PATH, "HOME": str(tmp_path / "home"), "LANG": "C.UTF-8"}
    bash = ["bash", "-e", "-c"] if strict else ["bash", "-c"]
    return subprocess.run([*bash, block], cwd=root, env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip


def wordstats_in_process(tmp_path: Path, llvm: Llvm) -> str:
    """What examples/c prints when linked with in-process ThinLTO."""
    program = tmp_path / "in-process"
    sources = sorted(str(p) for p in (REPO / "examples" / "c").glob("*.c"))
    subprocess.run([llvm.clang, "-flto=thin", "-fuse-ld=lld", "-O2", *sources, "-lm", "-o",
                    program], check=True)  # fmt: skip
    return subprocess.run([program], capture_output=True, text=True, check=True).stdout


def test_the_readme_has_the_quick_starts_this_test_runs() -> None:
    blocks = quick_starts((REPO / "README.md").read_text())
    assert {heading: len(found) for heading, found in blocks.items()} == {
        DTLTO: 1,
        BUCK2: 1,
        REPLAY: 1,
    }


def test_clang_is_not_on_a_fresh_debian_path() -> None:
    """What the README's PATH line is for: Debian's packages name the compiler clang-22."""
    assert shutil.which("clang", path=DEBIAN_PATH) is None
    assert shutil.which("clang-22", path=DEBIAN_PATH) is not None
    assert shutil.which("dist-lto", path=DEBIAN_PATH) is None


@pytest.mark.slow
def test_the_dtlto_quick_start_distributes_and_the_program_runs(tmp_path: Path, llvm: Llvm) -> None:
    (block,) = quick_starts((REPO / "README.md").read_text())[DTLTO]
    done = paste(block, clone(tmp_path), tmp_path)
    assert done.returncode == 0, done.stderr
    expected = wordstats_in_process(tmp_path, llvm)
    assert done.stdout == expected and expected.startswith("words=")
    (summary,) = [line for line in done.stderr.splitlines()
                  if line.startswith("dist-lto distribute: prog: ")]  # fmt: skip
    assert re.match(r"dist-lto distribute: prog: 3 jobs, 0 cached, 0 failed, ", summary)


@pytest.mark.slow
def test_without_dist_lto_on_path_the_quick_start_link_refuses_to_run(tmp_path: Path) -> None:
    """clang given `-fthinlto-distributor=` with nothing after it links in-process and
    exits 0; the block's guard stops the link instead, even in a shell that goes on after
    a failing command."""
    (block,) = quick_starts((REPO / "README.md").read_text())[DTLTO]
    root = clone(tmp_path)
    (root / ".venv").unlink()  # a clone whose .ci/setup has not run
    done = paste(block, root, tmp_path, strict=False)
    assert done.returncode != 0
    assert "dist-lto is not on PATH" in done.stderr
    assert not (root / "build" / "wordstats" / "prog").exists()
    assert "words=" not in done.stdout


@pytest.mark.slow
def test_the_replay_quick_start_plans_inspects_and_links(tmp_path: Path) -> None:
    (block,) = quick_starts((REPO / "README.md").read_text())[REPLAY]
    root = clone(tmp_path)
    done = paste(block, root, tmp_path)
    assert done.returncode == 0, done.stderr
    captured = root / "examples" / "captured"
    assert (captured / "report.html").stat().st_size > 0
    assert (captured / "out" / "final-link.args").exists()
    app = subprocess.run([captured / "app", "a", "b"], capture_output=True, text=True)
    assert app.returncode == 0 and done.stdout.endswith(app.stdout)
    assert os.access(captured / "app", os.X_OK)


@pytest.mark.slow
def test_the_buck2_quick_start_builds_every_example_and_runs_one(
    tmp_path: Path, llvm: Llvm
) -> None:
    """In a copy of the project (the block appends to `.buckconfig.local`), with the
    user's rustup on PATH as the block's `rustc --print sysroot` needs."""
    (block,) = quick_starts((REPO / "README.md").read_text())[BUCK2]
    root = real_buck2.scratch_project(tmp_path / "dist-lto", examples=True)
    (root / ".venv").symlink_to(Path(sys.prefix))
    (root / ".cache").symlink_to((REPO / ".cache").resolve())
    env = {"PATH": f"{DEBIAN_PATH}:{Path.home() / '.cargo' / 'bin'}", "HOME": str(Path.home()),
           "LANG": "C.UTF-8", "BUCK2_NO_INTERACTIVE_CONSOLE": "1"}  # fmt: skip
    try:
        done = subprocess.run(["bash", "-e", "-c", block], cwd=root, env=env,
                              capture_output=True, text=True, timeout=3600)  # fmt: skip
    finally:
        subprocess.run([real_buck2.find_buck2(), "kill"], cwd=root, capture_output=True)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout == wordstats_in_process(tmp_path, llvm)
