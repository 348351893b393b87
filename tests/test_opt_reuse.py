"""The opt worker's reuse store (`--reuse-dir`) on a real program: after an edit that
changes a module others import from but not what they import, their backends get the
last run's object, byte for byte what clang writes; after any other edit, clang runs.
Each phase is a new worker over the same store, as Buck2 starts one per command."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from dist_lto.worker.client import WorkerClient
from dist_lto.worker.reuse import Store
from support.opt_command import OPT
from support.tools import Llvm

PROGRAM = {
    "main.c": '#include <stdio.h>\nint twice(int);\nint add(int, int);\n'
              'int main(int c, char **v) { printf("%d\\n", twice(c) + add(c, 2)); return 0; }\n',
    "twice.c": "int add(int, int);\nint twice(int x) { return add(x, x); }\n",
    "lib.c": "int add(int a, int b) { return a + b; }\n",
}  # fmt: skip
MODULES = [name.replace(".c", ".o") for name in PROGRAM]
UNRELATED = "int lib_extra(int x);\nint lib_extra(int x) { return x * 3 + 1; }\n"


class Build:
    """The program in `root`: compile, index, and run every backend through a worker."""

    def __init__(self, root: Path, llvm: Llvm) -> None:
        self.root = root
        self.llvm = llvm
        for name, text in PROGRAM.items():
            (root / name).write_text(text)
        (root / "link.args").write_text("-flto=thin\n-fuse-ld=lld\n-O2\n")
        self.compile(*PROGRAM)

    def compile(self, *names: str) -> None:
        for name in names:
            subprocess.run([self.llvm.clang, "-O2", "-flto=thin", "-c", name], cwd=self.root,
                           check=True)  # fmt: skip
        subprocess.run([self.llvm.clang, "-flto=thin", "-fuse-ld=lld", "-O2", *MODULES, "-o",
                        "prog", "-Wl,--thinlto-index-only"], cwd=self.root, check=True)  # fmt: skip

    def argv(self, module: str, out: str, *extra: str) -> list[str]:
        return ["--input", module, "--index", f"{module}.thinlto.bc", "--out", out,
                "--args", "link.args", "--", self.llvm.clang, *extra]  # fmt: skip

    def backends(self, store: str = "store", *extra: str) -> dict[str, bool]:
        """Each module's backend through a new worker: whether its object was reused.
        Every object, and what the worker prints, must equal what `dist-lto opt` does."""
        client = WorkerClient(str(self.root / "w.sock"), str(self.root), "--reuse-dir", store)
        replies = {}
        try:
            for module in MODULES:
                replies[module] = client.execute(self.argv(module, f"{module}.opt.o", *extra))
        finally:
            client.close()
        log = client.proc.stderr.read().decode() if client.proc.stderr else ""
        for module in MODULES:
            done = subprocess.run([*OPT, *self.argv(module, f"{module}.ref.o", *extra)],
                                  cwd=self.root, capture_output=True, text=True)  # fmt: skip
            assert done.returncode == 0, done.stderr
            assert (replies[module].exit_code, replies[module].stderr) == (0, done.stderr)
            ours = (self.root / f"{module}.opt.o").read_bytes()
            assert ours == (self.root / f"{module}.ref.o").read_bytes(), module
        return {m: f"{m}.opt.o: the object of its last run, reused" in log for m in MODULES}

    def edit(self, name: str, text: str) -> None:
        (self.root / name).write_text(text)
        self.compile(name)


@pytest.fixture
def build(tmp_path: Path, llvm: Llvm) -> Build:
    b = Build(tmp_path, llvm)
    assert b.backends() == dict.fromkeys(MODULES, False)  # an empty store: clang runs
    return b


def test_an_edit_that_changes_nothing_imported_reuses_the_importers_objects(
    build: Build,
) -> None:
    build.edit("lib.c", PROGRAM["lib.c"] + UNRELATED)
    # main.o and twice.o import add() from lib.o, whose hash changed: reused.
    assert build.backends() == {"main.o": True, "twice.o": True, "lib.o": False}
    build.edit("lib.c", PROGRAM["lib.c"] + UNRELATED.replace("3", "5"))
    assert build.backends() == {"main.o": True, "twice.o": True, "lib.o": False}


def test_an_edit_to_an_imported_function_runs_its_importers(build: Build) -> None:
    before = (build.root / "twice.o.opt.o").read_bytes()
    build.edit("lib.c", "int add(int a, int b) { return a + b + 1; }\n")
    assert build.backends() == dict.fromkeys(MODULES, False)
    assert (build.root / "twice.o.opt.o").read_bytes() != before


def test_a_damaged_stored_object_is_never_reused(build: Build) -> None:
    for stored in (build.root / "store/v1/objects").iterdir():
        data = bytearray(stored.read_bytes())
        data[-1] ^= 1
        stored.unlink()  # a hard link of the output: replace, not write through
        stored.write_bytes(bytes(data))
    build.edit("lib.c", PROGRAM["lib.c"] + UNRELATED)
    assert build.backends() == dict.fromkeys(MODULES, False)


def test_a_stored_module_that_changed_is_never_used(build: Build) -> None:
    # The last run's modules are read back to ask what they exported; one rewritten
    # since (another build of it) no longer carries its hash: clang runs.
    lib_hash = next(
        p for p in (build.root / "store/v1/modules").iterdir() if p.samefile(build.root / "lib.o")
    )
    build.edit("lib.c", PROGRAM["lib.c"] + UNRELATED)
    lib_hash.unlink()
    lib_hash.write_bytes((build.root / "lib.o").read_bytes())
    assert build.backends() == dict.fromkeys(MODULES, False)


def test_without_a_store_every_backend_runs(build: Build, tmp_path: Path) -> None:
    build.edit("lib.c", PROGRAM["lib.c"] + UNRELATED)
    assert build.backends(store=str(tmp_path / "elsewhere")) == dict.fromkeys(MODULES, False)


def test_a_reused_object_comes_with_the_warnings_clang_printed(build: Build) -> None:
    unused = "-L/nowhere"  # clang: warning: argument unused during compilation
    assert build.backends("store", unused) == dict.fromkeys(MODULES, False)
    build.edit("lib.c", PROGRAM["lib.c"] + UNRELATED)
    # backends() compares each reply's stderr with the command's, the warning in both.
    assert build.backends("store", unused) == {"main.o": True, "twice.o": True, "lib.o": False}


def test_pruning_keeps_what_the_slots_name_and_removes_the_rest(build: Build) -> None:
    build.edit("lib.c", PROGRAM["lib.c"] + UNRELATED)
    build.backends()
    root = build.root / "store/v1"
    before = {p.relative_to(root) for p in root.glob("*/*")}
    removed = Store(str(build.root / "store"), print).prune(time.time() + 1)
    after = {p.relative_to(root) for p in root.glob("*/*")}
    assert removed == len(before - after) > 0
    # Gone: the first build of lib.o and the first indexes, which no slot names now
    # (lib.o's object is the same: the new function is dead and stripped).
    assert {p.parts[0] for p in before - after} == {"modules", "indexes"}
    build.edit("lib.c", PROGRAM["lib.c"] + UNRELATED.replace("3", "7"))
    assert build.backends() == {"main.o": True, "twice.o": True, "lib.o": False}


def test_modules_named_by_absolute_paths_are_never_reused(build: Build) -> None:
    # The last run's modules could not be laid out again where the index names them:
    # such a backend keeps nothing.
    absolute = [str(build.root / m) for m in MODULES]
    subprocess.run([build.llvm.clang, "-flto=thin", "-fuse-ld=lld", "-O2", *absolute, "-o",
                    "prog", "-Wl,--thinlto-index-only"], cwd=build.root, check=True)  # fmt: skip
    client = WorkerClient(str(build.root / "w.sock"), str(build.root), "--reuse-dir", "s2")
    try:
        for module in absolute:
            reply = client.execute(build.argv(module, f"{module}.abs.o"))
            assert (reply.exit_code, reply.stderr) == (0, "")
    finally:
        client.close()
    assert (build.root / "main.o.abs.o").read_bytes()[:4] == b"\x7fELF"
    assert not (build.root / "s2").exists()


def test_a_stale_index_is_refused_through_the_store_as_by_the_command(build: Build) -> None:
    # lib.c compiled again without the index step: the indexes name the old lib.o.
    (build.root / "lib.c").write_text(PROGRAM["lib.c"] + UNRELATED)
    subprocess.run([build.llvm.clang, "-O2", "-flto=thin", "-c", "lib.c"], cwd=build.root,
                   check=True)  # fmt: skip
    argv = build.argv("twice.o", "twice.o.opt.o")
    client = WorkerClient(str(build.root / "w.sock"), str(build.root), "--reuse-dir", "store")
    try:
        reply = client.execute(argv)
    finally:
        client.close()
    done = subprocess.run([*OPT, *argv], cwd=build.root, capture_output=True, text=True)
    assert done.returncode == 2 and "the index is stale" in done.stderr, done.stderr
    assert (reply.exit_code, reply.stderr) == (done.returncode, done.stderr)
