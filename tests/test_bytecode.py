"""The package as Buck2's actions get it (`dist_lto/bytecode.py`): its modules in one zip,
bytecode for what the subcommands Buck2 runs import, held to what those commands import
when they run for real, and the files that are not modules beside it."""

from __future__ import annotations

import hashlib
import json
import os
import py_compile
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from dist_lto import bytecode
from dist_lto.distribute import result_cache
from support.links import SMALL_PROGRAM
from support.tools import Llvm

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "tools" / "dist_lto"
SOURCES = sorted(PACKAGE.rglob("*.py"))
OTHER_FILES = ["process/cc1server.cpp", "process/forkserver.c", "process/jobsocket.h"]
"""What the toolchain's `dist_lto_srcs` adds to the modules (BUCK)."""


def build(
    out: Path, cache: Path | None = None, package: Path = PACKAGE
) -> subprocess.CompletedProcess[str]:
    """The `python_compile` action's command, on `package`'s sources (this checkout's),
    with `cache` as XDG_CACHE_HOME (None: no cache directory at all)."""
    files = sorted(package.rglob("*.py")) + [package / rel for rel in OTHER_FILES]
    pairs = [f"{p.relative_to(package.parent)}={p}" for p in files]
    env = {"PATH": os.environ["PATH"]} | ({"XDG_CACHE_HOME": str(cache)} if cache else {})
    return subprocess.run([sys.executable, "-S", "-E", str(package / "bytecode.py"), str(out),
                           *pairs], capture_output=True, text=True, env=env)  # fmt: skip


_FROM_ZIP = "import sys; sys.path.insert(0, sys.argv[1]); exec(sys.argv[2])"
"""`python -c _FROM_ZIP ZIP CODE`: CODE run with the package imported from ZIP."""


def members(out: Path) -> list[str]:
    with zipfile.ZipFile(out / bytecode.ZIP) as archive:
        return archive.namelist()


def compiled(out: Path) -> set[str]:
    """The modules of the built package that have bytecode."""
    return {bytecode.module_of(name[:-1]) for name in members(out) if name.endswith(".pyc")}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bytecode") / "pkg"
    proc = build(out, cache=None)
    assert (proc.returncode, proc.stderr) == (0, "")
    return out


def test_import_statements_of_every_form_are_followed() -> None:
    modules = {"dist_lto", "dist_lto.a", "dist_lto.a.b", "dist_lto.c", "dist_lto.d",
               "dist_lto.e", "dist_lto.f", "dist_lto.g"}  # fmt: skip
    source = (
        "from dist_lto.a import b, NAME  # a comment, dist_lto.g\n"
        "import dist_lto.c\n"
        "def f():\n"
        "    from dist_lto import (\n"
        "        d,\n"
        "        e,\n"
        "    )\n"
        "x = 'import dist_lto.f'\n"
    )
    assert bytecode.imported(source, modules) == {
        "dist_lto", "dist_lto.a", "dist_lto.a.b", "dist_lto.c", "dist_lto.d", "dist_lto.e"
    }  # fmt: skip


def test_every_module_is_in_the_zip_and_only_what_actions_import_is_compiled(
    built: Path,
) -> None:
    beside = sorted(str(p.relative_to(built)) for p in built.rglob("*") if p.is_file())
    assert beside == sorted(
        [bytecode.ZIP, bytecode.LAUNCHER] + [f"dist_lto/{r}" for r in OTHER_FILES]
    )
    # Each module once: its bytecode, or its source.
    names = members(built)
    modules = [str(p.relative_to(PACKAGE.parent)) for p in SOURCES]
    assert sorted(n.removesuffix("c") for n in names) == sorted(set(modules) - {bytecode.LAUNCHER})
    have = compiled(built)
    assert set(bytecode.ENTRY_MODULES) - {"dist_lto.__main__"} <= have
    assert "dist_lto.report" not in have and "dist_lto.distribute.remote.cas" not in have
    # A module without bytecode still imports (compiled as it loads).
    proc = subprocess.run([sys.executable, "-S", "-E", "-B", "-c", _FROM_ZIP,
                           str(built / bytecode.ZIP), "import dist_lto.report.html"],
                          capture_output=True, text=True)  # fmt: skip
    assert (proc.returncode, proc.stderr) == (0, "")


def test_a_module_that_does_not_compile_fails_naming_it_and_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "opt.py"
    bad.write_text("def f(:\n")
    out = tmp_path / "pkg"
    proc = subprocess.run([sys.executable, "-S", "-E", str(PACKAGE / "bytecode.py"), str(out),
                           f"dist_lto/__main__.py={PACKAGE / '__main__.py'}",
                           f"dist_lto/commands/opt.py={bad}"],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.startswith("dist_lto/commands/opt.py:1: ") and proc.stderr.count("\n") == 1
    assert not out.exists()


def test_bytecode_is_what_py_compile_writes_with_an_unchecked_hash(tmp_path: Path) -> None:
    source = PACKAGE / "opt_request.py"
    made = tmp_path / "opt_request.pyc"
    py_compile.compile(str(source), str(made), dfile="dist_lto/opt_request.py", doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)  # fmt: skip
    assert bytecode.bytecode(source.read_bytes(), "dist_lto/opt_request.py") == made.read_bytes()


_WHERE = (
    "import sys, json\n"
    "from dist_lto import installed\n"
    "from dist_lto.process import cc1server, forkserver\n"
    "print(json.dumps([sys.path[0], installed.MAIN, cc1server.SOURCE, forkserver.HEADER,\n"
    "                  cc1server.__spec__.origin]))\n"
)


def test_the_launcher_runs_the_package_from_the_zip_and_finds_its_other_files(built: Path) -> None:
    proc = subprocess.run([sys.executable, "-S", "-E", str(built / bytecode.LAUNCHER), "--version"],
                          capture_output=True, text=True)  # fmt: skip
    assert (proc.returncode, proc.stderr) == (0, "")
    # What the launcher puts on sys.path; the other files the package finds from there.
    proc = subprocess.run([sys.executable, "-S", "-E", "-c", _FROM_ZIP, str(built / bytecode.ZIP),
                           _WHERE], capture_output=True, text=True)  # fmt: skip
    root, main, source, header, origin = json.loads(proc.stdout)
    assert root == str(built / bytecode.ZIP)
    assert origin == str(built / bytecode.ZIP / "dist_lto/process/cc1server.pyc")
    assert (main, source, header) == (
        str(built / bytecode.LAUNCHER),
        str(built / "dist_lto/process/cc1server.cpp"),
        str(built / "dist_lto/process/jobsocket.h"),
    )


def test_the_package_is_the_same_bytes_every_time(built: Path, tmp_path: Path) -> None:
    again = tmp_path / "pkg"
    assert build(again, cache=None).returncode == 0
    assert same_files(built, again)


def same_files(one: Path, other: Path) -> bool:
    files = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file())
    if files != sorted(p.relative_to(other) for p in other.rglob("*") if p.is_file()):
        return False
    return all((one / rel).read_bytes() == (other / rel).read_bytes() for rel in files)


def kept(cache: Path) -> list[Path]:
    return sorted((cache / "dist-lto" / "bytecode").iterdir())


def copy_of_package(dest: Path) -> Path:
    shutil.copytree(PACKAGE, dest / "dist_lto", ignore=shutil.ignore_patterns("__pycache__"))
    return dest / "dist_lto"


def test_a_package_made_once_is_taken_from_the_cache_and_a_damaged_entry_made_again(
    built: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    assert build(tmp_path / "first", cache).returncode == 0
    (entry,) = kept(cache)
    # What the entry holds is what a build takes, without compiling.
    other = b"a zip of other bytes"
    entry.write_bytes(hashlib.sha256(other).digest() + other)
    assert build(tmp_path / "second", cache).returncode == 0
    assert (tmp_path / "second" / bytecode.ZIP).read_bytes() == other
    # A damaged entry (cut short) is not taken: the package is made and kept again.
    whole = hashlib.sha256((built / bytecode.ZIP).read_bytes()).digest()
    entry.write_bytes(whole + (built / bytecode.ZIP).read_bytes()[:100])
    assert build(tmp_path / "third", cache).returncode == 0
    assert same_files(built, tmp_path / "third")
    assert kept(cache) == [entry]
    assert entry.read_bytes() == whole + (built / bytecode.ZIP).read_bytes()


def test_a_changed_source_is_a_new_entry_and_the_least_recently_used_go(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    package = copy_of_package(tmp_path / "src")
    marked = None
    for i in range(bytecode.KEPT + 2):
        source = (PACKAGE / "opt_request.py").read_bytes() + f"\nVERSION = {i}\n".encode()
        (package / "opt_request.py").write_bytes(source)
        assert build(tmp_path / f"out{i}", cache, package).returncode == 0
        with zipfile.ZipFile(tmp_path / f"out{i}" / bytecode.ZIP) as archive:
            code = archive.read("dist_lto/opt_request.pyc")
        assert code == bytecode.bytecode(source, "dist_lto/opt_request.py")
        assert len(kept(cache)) == min(i + 1, bytecode.KEPT)
        if i >= bytecode.KEPT:
            assert marked not in kept(cache)
        # Whichever was used least recently goes first.
        marked = kept(cache)[0]
        os.utime(marked, (1, 1))


@pytest.mark.parametrize(
    "env",
    [{"XDG_CACHE_HOME": "/x"}, {"XDG_CACHE_HOME": "rel", "HOME": "/"}, {"HOME": "/"},
     {"HOME": "/no/such/dir"}, {}],
)  # fmt: skip
def test_the_cache_is_where_the_packages_other_caches_are(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("XDG_CACHE_HOME", "HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert bytecode.user_cache_dir() == result_cache.user_cache_dir()


def test_a_cache_entry_serves_where_it_cannot_be_marked_as_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = b"the zip"
    (tmp_path / "k.zip").write_bytes(hashlib.sha256(made).digest() + made)

    def refused(*_args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "utime", refused)  # a cache this user may read, not change
    assert bytecode.cached(str(tmp_path), "k", 100) == made
    assert bytecode.cached(str(tmp_path), "k", 3) is None  # larger than a zip may be


def test_a_cache_entry_that_is_not_a_regular_file_is_not_read(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert build(tmp_path / "first", cache).returncode == 0
    (entry,) = kept(cache)
    entry.unlink()
    os.mkfifo(entry)  # opening it to read would wait for a writer forever
    proc = build(tmp_path / "second", cache)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert same_files(tmp_path / "first", tmp_path / "second")


def test_without_a_cache_directory_nothing_is_kept_and_the_package_is_made(
    built: Path, tmp_path: Path
) -> None:
    unusable = tmp_path / "unusable"
    unusable.mkdir()
    (unusable / "dist-lto").write_text("a file where the cache's directory would be\n")
    for cache in (None, unusable):
        out = tmp_path / f"pkg-{cache is None}"
        proc = build(out, cache)
        assert (proc.returncode, proc.stderr) == (0, "")
        assert same_files(built, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pkg-False", "pkg-True", "unusable"]


_LOADED = (
    "import json, sys\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "from dist_lto.cli import run\n"
    "status = run(sys.argv[2], sys.argv[3:])\n"
    "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'dist_lto')\n"
    "sys.stdout.write(json.dumps([status, loaded]))\n"
)


def loaded_by(built: Path, cwd: Path, argv: list[str]) -> set[str]:
    """The package's modules that `dist-lto ARGV` loaded, run from the built package."""
    proc = subprocess.run([sys.executable, "-B", "-c", _LOADED, str(built / bytecode.ZIP), *argv],
                          cwd=cwd, capture_output=True, text=True)  # fmt: skip
    status, loaded = json.loads(proc.stdout)
    assert status == 0, proc.stderr
    return set(loaded)


def test_what_buck2s_commands_import_when_they_run_has_bytecode(
    built: Path, tmp_path: Path, llvm: Llvm
) -> None:
    for name, text in SMALL_PROGRAM.items():
        (tmp_path / name).write_text(text)
        subprocess.run([llvm.clang, "-O2", "-flto=thin", "-c", name], cwd=tmp_path, check=True)
    objects = [name.replace(".c", ".o") for name in SMALL_PROGRAM]
    subprocess.run([llvm.ar, "rcs", "libsmall.a", *objects[1:]], cwd=tmp_path, check=True)
    meta = {"version": 1, "index_dir": "out/index", "link_plan_output": "out/link-plan.json",
            "final_link_args_output": "out/final.args", "groups": [{"linkables": [
                {"kind": "object", "index": i, "path": o,
                 "index_output": f"out/index/{o}.thinlto.bc", "plan_output": f"out/{i}.json",
                 "opt_output": f"out/opt/{i}.o"} for i, o in enumerate(objects)]}]}  # fmt: skip
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    (tmp_path / "link.args").write_text("-O2\n")
    runs = [
        ["prepare", "--archive", "libsmall.a", "--objects-out", "prep/objects",
         "--manifest-out", "prep/manifest.json"],
        ["plan", "meta.json", "--", llvm.clang, "-fuse-ld=lld", "-O2"],
        ["opt", "--input", "main.o", "--index", "out/index/main.o.thinlto.bc",
         "--out", "main.opt.o", "--args", "link.args", "--", llvm.clang],
    ]  # fmt: skip
    loaded = set().union(*(loaded_by(built, tmp_path, argv) for argv in runs))
    ran = {"dist_lto.planning.planner", "dist_lto.opt_request", "dist_lto.archive.prepare"}
    assert ran <= loaded
    assert loaded <= compiled(built)
