"""The generated workload (bench/gen_workload.py): the same program for the same seed and
N, shaped like real code, and printing the checksum it promises when built with real
clang and LLD, in process and distributed."""

from __future__ import annotations

import collections
import filecmp
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.tools import REPO, Llvm

sys.path.insert(0, str(REPO / "bench"))  # what is tested here is the benchmark's generator
import gen_workload as gw


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_same_seed_and_size_write_the_same_files_and_checksum(tmp_path: Path) -> None:
    for name in ("a", "b"):
        for project in gw.PROJECTS:
            gw.write_project(gw.generate(7, 300), tmp_path / name / project, project)
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")
    assert gw.generate(7, 300).checksum() == gw.generate(7, 300).checksum()
    assert gw.generate(7, 300).checksum() != gw.generate(8, 300).checksum()
    other = tmp_path / "c"
    gw.write_project(gw.generate(8, 300), other, "ours")
    assert not filecmp.cmp(tmp_path / "a/ours/scale/app/main.c", other / "scale/app/main.c")


@pytest.mark.parametrize("n", [80, 2000, 10000])
def test_the_program_has_n_modules_in_libraries_of_20_to_100_with_every_kind(n: int) -> None:
    w = gw.generate(1, n)
    sizes = [len(lib.sources) for lib in w.libraries]
    assert sum(sizes) + 1 == n  # and main.c
    assert all(20 <= s <= 100 for s in sizes)
    kinds = collections.Counter(lib.kind for lib in w.libraries)
    assert set(kinds) == set(gw.LIBRARY_KINDS)
    assert kinds["regular"] >= max(kinds["thin"], kinds["objects"])
    assert all(lib.deps[:1] == (0,) for lib in w.libraries[1:])
    assert all(d < lib.index for lib in w.libraries for d in lib.deps)


def test_hubs_are_called_almost_everywhere_and_most_modules_are_leaves() -> None:
    w = gw.generate(1, 2000)
    modules = list(w.modules.values())
    roles = collections.Counter(m.role for m in modules)
    assert 2 <= roles["hub"] <= 5 and roles["big"] == 1
    assert roles["leaf"] > roles["inner"] > roles["hub"]
    callers = collections.Counter(h for m in modules if m.role != "hub" for h in set(m.hubs))
    hub_callers = sum(callers.values())
    assert hub_callers >= len(modules) - roles["hub"]  # every other module calls a hub
    assert all(m.calls == () for m in modules if m.role == "leaf")
    assert all(m.calls for m in modules if m.role == "inner" and m.library > 0)
    # callees come from the module's own library (earlier) or from the libraries it uses
    for m in modules:
        lib = w.libraries[m.library]
        for callee in m.calls:
            assert w.modules[callee].library in (m.library, *lib.deps)


def test_the_big_module_dwarfs_the_others() -> None:
    w = gw.generate(1, 2000)
    sizes = sorted((len(gw.module_text(w, m)), m.role) for m in w.modules.values())
    (biggest, role), (second, _) = sizes[-1], sizes[-2]
    assert role == "big" and biggest > 20 * second


def test_buck_files_name_each_library_kind_as_each_prelude_spells_it(tmp_path: Path) -> None:
    w = gw.generate(1, 300)
    kinds = {lib.kind: lib for lib in w.libraries}
    ours = gw.write_project(w, tmp_path / "ours", "ours")
    up = gw.write_project(w, tmp_path / "upstream", "upstream")
    thin, objects = kinds["thin"].name, kinds["objects"].name
    assert 'archive = "thin"' in (ours / thin / "BUCK").read_text()
    assert "use_archive" not in (ours / objects / "BUCK").read_text()
    assert "//platforms:thin_archives" in (up / thin / "BUCK").read_text()
    assert "use_archive = False" in (up / objects / "BUCK").read_text()
    assert "dist_lto_cxx_binary" in (up / "app" / "BUCK").read_text()
    assert "dist_lto = True" in (ours / "app" / "BUCK").read_text()


def test_an_edit_changes_one_leaf_source_only(tmp_path: Path) -> None:
    w = gw.generate(1, 300)
    pkg = gw.write_project(w, tmp_path, "ours")
    before = _tree(pkg)
    gw.edit(pkg / w.edited, 1)
    after = _tree(pkg)
    assert [k for k in before if before[k] != after[k]] == [w.edited]
    assert w.modules[Path(w.edited).stem].role == "leaf"


def _compile(llvm: Llvm, pkg: Path, w: gw.Workload) -> list[str]:
    """Compile every module to ThinLTO bitcode; archive each library as its kind asks.
    Returns the link inputs, main first."""
    includes = [f"-I{pkg / lib.name}" for lib in w.libraries]
    jobs = [(pkg / "app" / "main.c", pkg / "app" / "main.o")]
    for lib in w.libraries:
        jobs += [(pkg / lib.name / s, pkg / lib.name / (s[:-2] + ".o")) for s in lib.sources]
    procs: list[subprocess.Popen[bytes]] = []
    for src, obj in jobs:
        cmd = [llvm.clang, "-O2", "-flto=thin", *includes, "-c", str(src), "-o", str(obj)]
        procs.append(subprocess.Popen(cmd))
        if len(procs) >= (os.cpu_count() or 2):
            assert procs.pop(0).wait() == 0
    assert all(p.wait() == 0 for p in procs)
    inputs = ["app/main.o"]
    for lib in w.libraries:
        objs = [f"{lib.name}/{s[:-2]}.o" for s in lib.sources]
        if lib.kind == "objects":
            inputs += ["-Wl,--start-lib", *objs, "-Wl,--end-lib"]
            continue
        archive = f"{lib.name}/lib{lib.name}.a"
        thin = ["--thin"] if lib.kind == "thin" else []
        subprocess.run([llvm.ar, "qcs", *thin, archive, *objs], cwd=pkg, check=True)
        inputs.append(archive)
    return inputs


@pytest.mark.slow
def test_a_small_workload_prints_its_checksum_in_process_and_distributed(
    tmp_path: Path, llvm: Llvm
) -> None:
    w = gw.generate(3, 80)
    pkg = gw.write_project(w, tmp_path, "ours")
    inputs = _compile(llvm, pkg, w)
    dist_lto = str(Path(sys.executable).parent / "dist-lto")
    links = {
        "inprocess": [],
        "distributed": [f"-fthinlto-distributor={dist_lto}", "-Xthinlto-distributor=distribute"],
    }
    expected = f"checksum {w.checksum():016x}\n"
    for name, extra in links.items():
        link = [llvm.clang, "-flto=thin", "-fuse-ld=lld", "-O2", *inputs, *extra, "-o", name]
        subprocess.run(link, cwd=pkg, check=True)
        run = subprocess.run([str(pkg / name)], capture_output=True, text=True, check=True)
        assert run.stdout == expected, name
