"""`dist-lto upstream plan` splits its objects over processes as `dist-lto plan` does,
and writes byte for byte what one process writes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from support.tools import Llvm, run_cli

MODULES = 24


def _link(tmp_path: Path, llvm: Llvm) -> tuple[Path, list[str]]:
    """A link in upstream's formats: objects that import from each other, a native object,
    and three objects between --start-lib and --end-lib (one never loaded); returns
    its directory and the `upstream plan` arguments."""
    root = tmp_path / "link"
    root.mkdir()
    sources = {"main": "int f0(int); int g(int); int main(int c, char **v){return f0(c) + g(c);}"}
    for i in range(MODULES):
        callee = f"f{i + 1}(x)" if i + 1 < MODULES else "x"
        sources[f"m{i}"] = f"int f{i + 1}(int); int f{i}(int x){{return {callee} * 3 + {i};}}"
    sources["lazy_g"] = "int h(int); int g(int x){return h(x) + 1;}"
    sources["lazy_h"] = "int h(int x){return x * 7;}"
    sources["lazy_unused"] = "int unused(int x){return x - 1;}"
    for name, text in sources.items():
        (root / f"{name}.c").write_text(text)
    procs = [subprocess.Popen([llvm.clang, "-flto=thin", "-O2", "-c", f"{name}.c"], cwd=root)
             for name in sources]  # fmt: skip
    assert all(p.wait() == 0 for p in procs)
    (root / "native.c").write_text("int native_value(void){return 4;}")
    subprocess.run([llvm.clang, "-O2", "-c", "native.c"], cwd=root, check=True)
    plain = ["main", *(f"m{i}" for i in range(MODULES)), "native"]
    lazy = ["lazy_g", "lazy_h", "lazy_unused"]
    entries: list[str] = []
    for index, name in enumerate(plain + lazy):
        entries += [f"{name}.o", f"out/{name}.o.thinlto.bc", f"out/{name}.plan", str(index),
                    "", "", ""]  # fmt: skip
    (root / "up.meta").write_text("\n".join(entries) + "\n\n")
    line = [f"{n}.o" for n in plain] + ["--start-lib", *(f"{n}.o" for n in lazy), "--end-lib"]
    (root / "x.thinlto_index_argsfile").write_text("\n".join(line) + "\n")
    args = ["upstream", "plan", "--meta", "up.meta", "--index", "idx", "--link-plan", "lp.json",
            "--final-link-index", "fli", "--", llvm.clang, "-fuse-ld=lld",
            "@x.thinlto_index_argsfile", "-o", "prog"]  # fmt: skip
    return root, args


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_plans_from_several_processes_equal_one_process_plans(tmp_path: Path, llvm: Llvm) -> None:
    root, args = _link(tmp_path, llvm)
    runs = {}
    for jobs in ("1", "3"):
        copy = tmp_path / f"jobs{jobs}"
        shutil.copytree(root, copy)
        done = run_cli([*args[:2], "--jobs", jobs, *args[2:]], cwd=copy)
        assert done.returncode == 0, done.stderr
        runs[jobs] = _files(copy)
    assert runs["1"] == runs["3"]
    plans = [name for name in runs["1"] if name.endswith(".plan")]
    assert len(plans) == MODULES + 5  # main, the modules, native, the three lazy objects
    assert b'"imports":[' in runs["1"]["out/m3.plan"].replace(b" ", b"")
    assert runs["1"]["out/lazy_unused.plan"] == runs["3"]["out/lazy_unused.plan"]


def test_a_plan_that_cannot_be_written_in_a_share_leaves_no_plan_as_in_one_process(
    tmp_path: Path, llvm: Llvm
) -> None:
    """One object's plan lies under a regular file: found while a later share writes,
    reported as one process reports it, and every plan written is removed again."""
    root, args = _link(tmp_path, llvm)
    meta = (root / "up.meta").read_text().replace("out/m20.plan", "blocker/m20.plan")
    (root / "up.meta").write_text(meta)
    (root / "blocker").write_text("a file, not a directory")
    results = {}
    for jobs in ("1", "3"):
        copy = tmp_path / f"bad{jobs}"
        shutil.copytree(root, copy)
        done = run_cli([*args[:2], "--jobs", jobs, *args[2:]], cwd=copy)
        results[jobs] = (done.returncode, done.stderr)
        assert not list(copy.rglob("*.plan"))
    assert results["1"] == results["3"]
    assert results["1"][0] == 2 and "blocker: cannot write" in results["1"][1]
