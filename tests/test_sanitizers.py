"""Sanitized programs through both distributed routes report what in-process ThinLTO does.

clang instruments ThinLTO bitcode when it compiles (ASan in its pre-link pipeline, UBSan
in code generation), so a backend needs no sanitizer flag of its own and the link's
`-fsanitize=` brings the runtime. Pinned with real clang/LLD 22: a heap overflow and a
shift out of range in one module, reached from another, through LLD's DTLTO with
`dist-lto distribute` and through `dist-lto plan` plus `dist-lto opt` per module.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.tools import Llvm, run_cli
from test_plan_lld import group, meta_doc, obj, write_meta

MAIN = """#include <stdlib.h>
int peek(int *p, int i);
int shift(int x, int by);
int main(int argc, char **argv) {
  int *p = malloc(4 * sizeof(int));
  int r = argv[1][0] == 'h' ? peek(p, argc + 3) : shift(1, argc + 40);
  free(p);
  return r & 1;
}
"""
OTHER = """int peek(int *p, int i) { return p[i]; }
int shift(int x, int by) { return x << by; }
"""
SANITIZERS = {
    # sanitizer: (argument that triggers it, what its report says)
    "address": ("heap", "AddressSanitizer: heap-buffer-overflow"),
    "undefined": ("shift", "runtime error: shift exponent 42 is too large"),
}


def build(llvm: Llvm, root: Path, sanitizer: str) -> list[str]:
    """Compile both modules; return the link's flags."""
    flags = ["-O2", "-g", "-flto=thin", f"-fsanitize={sanitizer}"]
    (root / "main.c").write_text(MAIN)
    (root / "other.c").write_text(OTHER)
    for name in ("main", "other"):
        subprocess.run(
            [llvm.clang, *flags, "-c", f"{name}.c", "-o", f"{name}.o"], cwd=root, check=True
        )
    return ["-fuse-ld=lld", "-O2", f"-fsanitize={sanitizer}"]


def report(root: Path, program: str, sanitizer: str) -> str:
    """What the program says on stderr when made to trip its sanitizer."""
    argument, _ = SANITIZERS[sanitizer]
    env = {"UBSAN_OPTIONS": "halt_on_error=1", "ASAN_OPTIONS": "detect_leaks=0"}
    proc = subprocess.run(
        [f"./{program}", argument], cwd=root, capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode != 0, proc.stderr
    return proc.stderr


@pytest.mark.parametrize("sanitizer", sorted(SANITIZERS))
def test_dtlto_link_reports_like_in_process(
    llvm: Llvm, tmp_path: Path, sanitizer: str, dist_lto_cmd: list[str]
) -> None:
    link = build(llvm, tmp_path, sanitizer)
    objects = ["main.o", "other.o"]
    subprocess.run([llvm.clang, *link, *objects, "-o", "inprocess"], cwd=tmp_path, check=True)
    distributor = dist_lto_cmd
    subprocess.run(
        [llvm.clang, *link, *objects, "-o", "distributed",
         f"-fthinlto-distributor={distributor[0]}",
         *(f"-Xthinlto-distributor={a}" for a in [*distributor[1:], "distribute", "--no-cache"])],
        cwd=tmp_path, check=True,
    )  # fmt: skip
    _, says = SANITIZERS[sanitizer]
    assert says in report(tmp_path, "inprocess", sanitizer)
    distributed = report(tmp_path, "distributed", sanitizer)
    assert says in distributed
    assert "other.c:1" in distributed or "other.c:2" in distributed


@pytest.mark.parametrize("sanitizer", sorted(SANITIZERS))
def test_planned_link_with_opt_per_module_reports_like_in_process(
    llvm: Llvm, tmp_path: Path, sanitizer: str
) -> None:
    link = build(llvm, tmp_path, sanitizer)
    linkables = [obj(i, f"{name}.o") for i, name in enumerate(["main", "other"])]
    write_meta(tmp_path, meta_doc(group(*linkables)))
    planned = run_cli(["plan", "meta.json", "--", llvm.clang, *link, "-o", "app"], cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    (tmp_path / "link.args").write_text("".join(f"{flag}\n" for flag in link))
    (tmp_path / "out" / "opt").mkdir()
    for item in linkables:
        ran = run_cli(
            ["opt", "--input", item["path"], "--index", item["index_output"], "--out",
             item["opt_output"], "--args", "link.args", "--", llvm.clang],
            cwd=tmp_path,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr
    subprocess.run(
        [llvm.clang, *link, "@out/final-link.args", "-o", "app"], cwd=tmp_path, check=True
    )
    _, says = SANITIZERS[sanitizer]
    assert says in report(tmp_path, "app", sanitizer)
