#!/usr/bin/env python3
"""How far a one-source edit reaches into the backends, and how many of them it changes.

The edit is bench/buck2.py's (one more exported function in Lua's `lstring.c`, zstd's
`entropy_common.c`). For each workload: compile, run LLD's index step, run every
backend (the command `dist-lto opt --print-command` prints); make the edit, compile
the edited unit again, index again, run every backend again. A build system reruns
a backend whose inputs changed: its index file, its module, or a module it imports
from. This counts those, and how many of them wrote the same object as before the
edit (what an input finer than a whole imported module would have spared).

Every backend also runs through the opt worker with a reuse store (`dist-lto
opt-worker --reuse-dir`), before the edit and after it, as Buck2 would run them; its
objects must equal the commands'.

Prints, per workload, `edit-reach/WORKLOAD: R of N backends have changed inputs,
S of them wrote the same object, the worker reused U`.

Usage: .venv/bin/python bench/edit_reach.py [--workloads lua,zstd]
"""

from __future__ import annotations

import argparse
import hashlib
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from buck2 import EDITED  # noqa: E402
from dist_lto.worker.client import WorkerClient  # noqa: E402
from support import workloads  # noqa: E402
from support.opt_command import OPT  # noqa: E402

EDIT = (
    "\nint dist_lto_bench_edit_1(int x);\nint dist_lto_bench_edit_1(int x) { return x * 1 + 1; }\n"
)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Link:
    """A workload's objects after the index step, in a directory of their own."""

    def __init__(self, name: str, work: Path) -> None:
        self.build = workloads.build(name, work / name)
        self.root = self.build.root
        self.flags = ["-flto=thin", "-fuse-ld=lld", "-O2", *self.build.link_flags]
        (self.root / "link.args").write_text("".join(f"{f}\n" for f in self.flags))
        self.ran: dict[str, str] = {}
        """Each module the last `backends` ran, and its object."""

    def index(self) -> None:
        subprocess.run([workloads.CLANG, *self.flags, *self.build.objects, "-o", "prog",
                        "-Wl,--thinlto-index-only", "-Wl,--thinlto-emit-imports-files"],
                       cwd=self.root, check=True)  # fmt: skip

    def backends(self, tag: str) -> dict[str, tuple[str, str, list[str]]]:
        """Each backend's object digest, index digest and imported modules."""
        found = {}
        for obj in self.build.objects:
            index = self.root / f"{obj}.thinlto.bc"
            if not index.exists():
                continue
            out = f"{obj}.{tag}.o"
            printed = subprocess.run(
                [*OPT, "--input", obj, "--index", f"{obj}.thinlto.bc", "--out", out,
                 "--args", "link.args", "--print-command", "--", workloads.CLANG],
                cwd=self.root, check=True, capture_output=True, text=True,
            ).stdout  # fmt: skip
            subprocess.run(shlex.split(printed), cwd=self.root, check=True)
            self.ran[obj] = out
            imports = (self.root / f"{obj}.imports").read_text().split()
            found[obj] = (digest(self.root / out), digest(index), imports)
        return found

    def through_worker(self) -> set[str]:
        """Every backend through a new worker over the link's reuse store, each object
        checked against the command's of the same inputs (`backends` ran them); the
        modules whose objects the worker reused."""
        client = WorkerClient(str(self.root / "w.sock"), str(self.root), "--reuse-dir", "reuse")
        try:
            for obj in self.ran:
                argv = ["--input", obj, "--index", f"{obj}.thinlto.bc", "--out", f"{obj}.w.o",
                        "--args", "link.args", "--", workloads.CLANG]  # fmt: skip
                reply = client.execute(argv)
                if reply.exit_code != 0:
                    raise RuntimeError(f"{obj}: {reply.stderr}")
        finally:
            client.close()
        log = client.proc.stderr.read().decode() if client.proc.stderr else ""
        for obj, out in self.ran.items():
            if digest(self.root / f"{obj}.w.o") != digest(self.root / out):
                raise AssertionError(f"{obj}: the worker's object differs from the command's")
        return {obj for obj in self.ran if f"{obj}.w.o: the object of its last run, reused" in log}

    def edit(self, name: str) -> str:
        """Compile the edited unit over its object (the shared source tree stays as it is)."""
        main, lib, _ = workloads.units(name, workloads.source_dir(name))
        unit = next(u for u in main + lib if u.source.endswith(EDITED[name]))
        source = Path(unit.source)
        obj = next(o for o in self.build.objects if Path(o).stem == source.stem)
        text = (source.read_text() + EDIT).encode()
        subprocess.run([workloads.CLANG, "-O2", "-flto=thin", *unit.flags, "-iquote",
                        str(source.parent), "-x", "c", "-", "-c", "-o", obj],
                       cwd=self.root, check=True, input=text)  # fmt: skip
        return obj


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="lua,zstd")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-edit-reach-") as tmp:
        for name in args.workloads.split(","):
            link = Link(name, Path(tmp))
            link.index()
            before = link.backends("before")
            link.through_worker()
            edited = link.edit(name)
            link.index()
            after = link.backends("after")
            reused = link.through_worker()
            changed = [o for o, (_, index, imports) in after.items()
                       if o == edited or edited in imports or index != before[o][1]]  # fmt: skip
            same = [o for o in changed if after[o][0] == before[o][0]]
            print(f"# {name}: {edited} edited; {sum(edited in i for _, _, i in after.values())}"
                  " backends import from it")  # fmt: skip
            print(f"edit-reach/{name}: {len(changed)} of {len(after)} backends have changed"
                  f" inputs, {len(same)} of them wrote the same object, the worker reused"
                  f" {len(reused & set(changed))}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
