"""The result cache stays inside itself: symbolic links planted among its entries, shards
and temporaries (pointing at a directory of files outside, or at a file outside) are
never read through, written through nor deleted through, by lookups, stores, prunes
(the distributor's own and `dist-lto cache prune`) or `dist-lto cache clear`."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from dist_lto.distribute.result_cache import ResultCache
from support.links import DtltoLink
from support.tools import Llvm, run_cli

KEY = "ab" + "1" * 62
OTHER = "cd" + "2" * 62


@pytest.fixture
def obj(tmp_path: Path, llvm: Llvm) -> Path:
    """A real ELF object, as a backend writes one."""
    (tmp_path / "m.c").write_text("int m(int x) { return x + 1; }\n")
    subprocess.run([llvm.clang, "-O2", "-c", "m.c", "-o", "m.o"], cwd=tmp_path, check=True)
    return tmp_path / "m.o"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory of someone's files outside the cache."""
    where = tmp_path / "precious"
    where.mkdir()
    for name in ("0", "sums", "notes.txt"):
        (where / name).write_text(f"keep {name}\n")
    old = time.time() - 7 * 24 * 3600
    for path in where.iterdir():
        os.utime(path, (old, old))
    return where


def snapshot(directory: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in directory.iterdir()}


def stored(tmp_path: Path, obj: Path) -> ResultCache:
    cache = ResultCache(str(tmp_path / "cache"), max_size=0)
    cache.create()
    cache.store(KEY, [str(obj)])
    return cache


@pytest.mark.parametrize("planted", ["entry", "shard", "tmp", "layout"])
def test_prune_and_clear_never_delete_through_a_symlink(
    tmp_path: Path, obj: Path, outside: Path, planted: str
) -> None:
    cache = stored(tmp_path, obj)
    root = tmp_path / "cache" / "v2"
    if planted == "entry":
        (root / "entries" / "cd").mkdir()
        (root / "entries" / "cd" / OTHER).symlink_to(outside)
    elif planted == "shard":
        (root / "entries" / "cd").symlink_to(outside)
    elif planted == "tmp":
        os.rename(root / "tmp", tmp_path / "old-tmp")
        (root / "tmp").symlink_to(outside)
    else:
        os.rename(root, tmp_path / "old-v2")
        root.symlink_to(outside)
    before = snapshot(outside)
    cache.prune(max_age=0)
    assert snapshot(outside) == before
    done = run_cli(["cache", "prune", "--max-size=0", f"--cache-dir={cache.root}"])
    assert done.returncode in (0, 2), done.stderr
    done = run_cli(["cache", "clear", f"--cache-dir={cache.root}"])
    assert done.returncode in (0, 2), done.stderr
    assert "Traceback" not in done.stderr
    cache.clear()
    assert snapshot(outside) == before


def test_an_entry_whose_file_links_outside_is_a_miss_and_evicted_never_copied(
    tmp_path: Path, obj: Path, outside: Path, llvm: Llvm
) -> None:
    cache = stored(tmp_path, obj)
    entry = Path(cache.entry(KEY))
    # What a planted link would hand out: another real object, bytes and sums matching.
    (outside / "m2.c").write_text("int m2(int x) { return x * 2; }\n")
    subprocess.run([llvm.clang, "-O2", "-c", "m2.c", "-o", "m2.o"], cwd=outside, check=True)
    (entry / "0").unlink()
    (entry / "0").symlink_to(outside / "m2.o")
    out = tmp_path / "out.o"
    assert cache.restore(KEY, [str(out)]) is False
    assert not out.exists()
    assert not entry.exists()
    assert [problem for _, problem in cache.evicted] == ["a file of it is a symbolic link"]
    assert (outside / "m2.o").exists()


def test_an_entry_that_is_a_symlink_is_evicted_as_a_link_and_its_target_kept(
    tmp_path: Path, obj: Path, outside: Path
) -> None:
    cache = stored(tmp_path, obj)
    entry = Path(cache.entry(KEY))
    for name in os.listdir(entry):
        (entry / name).unlink()
    entry.rmdir()
    entry.symlink_to(outside)
    before = snapshot(outside)
    out = tmp_path / "out.o"
    assert cache.restore(KEY, [str(out)]) is False
    assert not out.exists() and not os.path.lexists(entry)
    assert snapshot(outside) == before


def test_a_store_never_writes_through_a_symlinked_shard(
    tmp_path: Path, obj: Path, outside: Path
) -> None:
    cache = ResultCache(str(tmp_path / "cache"))
    cache.create()
    (tmp_path / "cache" / "v2" / "entries" / "ab").symlink_to(outside)
    before = snapshot(outside)
    cache.store(KEY, [str(obj)])
    assert snapshot(outside) == before
    assert os.listdir(tmp_path / "cache" / "v2" / "tmp") == []
    assert cache.restore(KEY, [str(tmp_path / "out.o")]) is False


def test_a_cache_whose_own_directories_are_links_is_not_used(tmp_path: Path, outside: Path) -> None:
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "v2").symlink_to(outside)
    with pytest.raises(OSError, match="not a directory of the cache's own"):
        ResultCache(str(tmp_path / "cache")).create()


def without_home(tmp_path: Path, home: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HOME", "XDG_CACHE_HOME") and not k.startswith("DIST_LTO_")}  # fmt: skip
    if home is not None:
        env["HOME"] = home
    return env


@pytest.mark.parametrize("home", [None, "/nonexistent-dist-lto-home"], ids=["unset", "missing"])
def test_without_a_home_the_default_cache_is_an_error_and_nothing_is_created(
    small_dtlto: DtltoLink, tmp_path: Path, home: str | None
) -> None:
    """The password database gives users without a home `/nonexistent`; as root, a cache
    under it would have been created there."""
    import shutil
    import sys

    work = tmp_path / "link"
    shutil.copytree(small_dtlto.root, work)
    env = without_home(tmp_path, home)
    dist_lto = [sys.executable, "-m", "dist_lto"]
    refused = subprocess.run([*dist_lto, "distribute", small_dtlto.job_file], cwd=work, env=env,
                             capture_output=True, text=True)  # fmt: skip
    why = "HOME is not set" if home is None else f"HOME ({home}) is not a directory"
    assert (refused.returncode, refused.stderr) == (2, (
        f"dist-lto distribute: error: no default cache directory: {why}, nor XDG_CACHE_HOME:"
        " give --cache-dir DIR (or DIST_LTO_CACHE_DIR), or --no-cache\n"))  # fmt: skip
    stats = subprocess.run([*dist_lto, "cache", "stats"], cwd=work, env=env, capture_output=True,
                           text=True)  # fmt: skip
    assert stats.returncode == 2 and "no default cache directory" in stats.stderr
    assert len(stats.stderr.splitlines()) == 1
    done = subprocess.run([*dist_lto, "distribute", "--no-cache", small_dtlto.job_file],
                          cwd=work, env=env, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not os.path.exists("/nonexistent-dist-lto-home")
    assert not (work / ".cache").exists() and not (work / "v2").exists()
