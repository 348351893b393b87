"""A project `buck2 init` makes, with this repository as its `dist_lto` cell, changed
exactly as docs/upstream-buck2.md's "A new project" says (its blocks, read from the
doc): real Buck2 builds and runs a program with upstream's distributed ThinLTO and our
tools, and parses the whole cell."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support import real_buck2
from support.tools import REPO, Llvm

DOC = REPO / "docs" / "upstream-buck2.md"
EXAMPLE = REPO / "examples" / "c"


def doc_blocks() -> list[tuple[str, str]]:
    """(language, text) of each fenced block of the doc's "A new project" section."""
    section = DOC.read_text().split("## A new project (`buck2 init`)\n")[1].split("\n## ")[0]
    return re.findall(r"^```(\w+)\n(.*?)^```", section, flags=re.M | re.S)


def test_the_doc_gives_a_config_a_toolchains_file_and_a_program() -> None:
    languages = [language for language, _ in doc_blocks()]
    assert languages == ["ini", "python", "python"]


@pytest.fixture
def init_project(tmp_path: Path) -> Path:
    """`buck2 init`, then the doc's three changes, the cell being this repository."""
    project = tmp_path / "app"
    project.mkdir()
    binary = real_buck2.find_buck2()
    subprocess.run([binary, "init"], cwd=project, check=True, capture_output=True, timeout=300)
    assert "system_demo_toolchains()" in (project / "toolchains" / "BUCK").read_text()
    real_buck2.repository_as_cell(project / "third-party" / "dist-lto")
    (config, _), (toolchains, _), (program, _) = [(text, lang) for lang, text in doc_blocks()]
    python = real_buck2.python_with_tools()
    with open(project / ".buckconfig", "a") as f:
        f.write("\n" + config.replace("/path/to/venv/bin/python", python))
    (project / "toolchains" / "BUCK").write_text(toolchains)
    (project / "BUCK").write_text(program)
    for source in ("main.c", "stats.c", "text.c", "stats.h"):
        shutil.copy(EXAMPLE / source, project / source)
    return project


@pytest.mark.slow
def test_a_buck2_init_project_distributes_with_the_docs_lines(
    init_project: Path, llvm: Llvm, tmp_path: Path
) -> None:
    buck2 = real_buck2.Buck2(init_project, config={})
    try:
        listed = buck2("targets", "dist_lto//...")
        assert "dist_lto//upstream:opt" in listed.stdout.splitlines()
        assert "dist_lto//platforms:remote" in listed.stdout.splitlines()

        done = buck2("run", "//:wordstats")
        ran = buck2.what_ran()
        opt = [r.identifier for r in ran if r.category.startswith("thin_lto_opt")]
        assert sorted(name.rsplit("/", 1)[-1] for name in opt) == [
            "main.c.o", "stats.c.o", "text.c.o"]  # fmt: skip

        program = tmp_path / "in-process"
        sources = [str(EXAMPLE / s) for s in ("main.c", "stats.c", "text.c")]
        subprocess.run([llvm.clang, "-flto=thin", "-fuse-ld=lld", "-O2", *sources, "-lm",
                        "-o", program], check=True)  # fmt: skip
        expected = subprocess.run([program], capture_output=True, text=True, check=True)
        assert done.stdout == expected.stdout

        # Dep files: a header only text.c includes reruns only text.c's compile; Buck2
        # answers stats.c's from its dep file (without dep files, every compile of the
        # library, which can see the header, runs again).
        (init_project / "note.h").write_text("#define NOTE 1\n")
        text_c = (init_project / "text.c").read_text()
        (init_project / "text.c").write_text('#include "note.h"\n' + text_c)
        program_buck = (init_project / "BUCK").read_text()
        with_note = program_buck.replace(
            'exported_headers = ["stats.h"],',
            'exported_headers = ["stats.h"], headers = ["note.h"],',
        )
        assert with_note != program_buck
        (init_project / "BUCK").write_text(with_note)
        buck2.build("//:wordstats")
        (init_project / "note.h").write_text("#define NOTE 2\n")
        buck2.build("//:wordstats")
        compiles = {r.identifier: r.executor for r in buck2.what_ran() if r.category == "c_compile"}
        assert compiles == {"stats.c": "LocalDepFileCache", "text.c": "Local"}
    finally:
        buck2.kill()


def test_this_repository_as_its_own_root_cell_lists_every_target(tmp_path: Path) -> None:
    """`buck2 targets //...` in a checkout: `upstream/` loads the shared phases through
    its `phases` link, since here `prelude/` is a cell of its own."""
    buck2 = real_buck2.Buck2(real_buck2.repository_as_cell(tmp_path / "repo"))
    try:
        listed = buck2("targets", "//...").stdout.splitlines()
    finally:
        buck2.kill()
    assert "root//upstream:toolset" in listed
    assert "root//examples/c:wordstats" in listed
