"""Small real links the tests share: what the fixtures in conftest.py build and hand out."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from support import workloads
from support.tools import Llvm


@dataclass(frozen=True)
class ThinIndex:
    """A program after the index step, run in `build.root` with objects spelled as in
    `build.objects` (`obj/x.o`), so every `obj/x.o` has `obj/x.o.thinlto.bc` and
    `obj/x.o.imports` beside it. `link_flags` are the clang-driver link flags the index
    step used (minus the index options); read-only: copy before changing."""

    build: workloads.Build
    link_flags: list[str]

    @property
    def root(self) -> Path:
        return self.build.root


SERIAL_DISTRIBUTOR = """\
import json
import subprocess
import sys

# Reference distributor in the style of LLVM's example: every job, one after another.
with open(sys.argv[-1]) as f:
    jobs = json.load(f)
for job in jobs["jobs"]:
    subprocess.run(jobs["common"]["args"] + job["args"], check=True)
"""


SMALL_PROGRAM = {
    "main.c": '#include <stdio.h>\nint twice(int);\nint shout(const char *);\n'
              'int main(int c, char **v) { printf("%d\\n", twice(c)); return shout(v[0]) < 0; }\n',
    "twice.c": "int add(int, int);\nint twice(int x) { return add(x, x); }\n",
    "add.c": "int add(int a, int b) { return a + b; }\n",
    "shout.c": '#include <string.h>\nint shout(const char *s) { return (int)strlen(s); }\n',
}  # fmt: skip


@dataclass(frozen=True)
class DtltoLink:
    """A small real program linked by LLD 22 through DTLTO (the serial distributor) with
    `--save-temps`, so the job file, the indexes and the archive members LLD extracted
    stay in `root`, the link's directory. `job_file` is relative to `root`; `link` is the
    clang command without distributor flags (objects `main.o shout.o libm.a`, where the
    regular archive holds `twice.o` and `add.o`). Read-only: copy `root` first."""

    root: Path
    job_file: str
    link: list[str]

    def clone(self, dest: Path) -> Path:
        """A copy of the link's directory at `dest` without the backends' objects, as a
        clean checkout of the same link on another machine would have it."""
        shutil.copytree(self.root, dest)
        for output in dest.glob("*.native.o"):
            output.unlink()
        return dest


def upstream_plan_link(tmp_path: Path, llvm: Llvm, clang: str = "") -> list[str]:
    """A two-object link in upstream's formats (meta `up.meta`); returns the
    `upstream plan` arguments that plan it into `out/` (with `clang` as the index
    command's compiler, when given)."""
    for name, text in (("main", "int f(void); int main(void){return f();}"),
                       ("f", "int f(void){return 1;}")):  # fmt: skip
        (tmp_path / f"{name}.c").write_text(text)
        subprocess.run([llvm.clang, "-flto=thin", "-O2", "-c", f"{name}.c"], cwd=tmp_path,
                       check=True)  # fmt: skip
    entries = ["main.o", "out/main.o.thinlto.bc", "out/main.plan", "0", "", "", "",
               "f.o", "out/f.o.thinlto.bc", "out/f.plan", "1", "", "", ""]  # fmt: skip
    (tmp_path / "up.meta").write_text("\n".join(entries) + "\n\n")
    (tmp_path / "x.thinlto_index_argsfile").write_text("main.o\nf.o\n")
    return ["upstream", "plan", "--meta", "up.meta", "--index", "idx", "--link-plan",
            "lp.json", "--final-link-index", "fli", "--", clang or llvm.clang, "-fuse-ld=lld",
            "@x.thinlto_index_argsfile", "-o", "prog"]  # fmt: skip
