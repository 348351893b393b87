"""`dist-lto cache`: stats, list, show, prune and clear over a cache real links filled."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from dist_lto import __version__
from dist_lto.commands.cache import parse_age
from dist_lto.distribute import cache_key, result_cache
from support.tools import REPO, Llvm, run_cli

CAPTURED = REPO / "examples" / "captured"
OUTPUTS = ["out/opt/0.o", "out/archive-opt/0/objects/util.o", "out/archive-opt/1/0/text.o"]


def linked_twice(tmp_path: Path, llvm: Llvm, dist_lto_cmd: list[str]) -> Path:
    """A cache filled by the captured example's three backends, then hit by a relink."""
    root = tmp_path / "captured"
    shutil.copytree(CAPTURED, root)
    cache = tmp_path / "cache"
    for _ in range(2):
        for output in OUTPUTS:
            (root / output).unlink(missing_ok=True)
        done = subprocess.run([*dist_lto_cmd, "link", f"--cache-dir={cache}", "--quiet",
                               "meta.json", "--", llvm.clang, "-fuse-ld=lld", "-O2", "-o", "app"],
                              cwd=root, capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0, done.stderr
    return cache


def cache_cli(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(["cache", *args, f"--cache-dir={cache}"])


def entries(cache: Path) -> list[Path]:
    return sorted((cache / "v2" / "entries").glob("*/*"))


def test_stats_count_the_entries_and_every_links_hits_and_misses(
    tmp_path: Path, llvm: Llvm, dist_lto_cmd: list[str]
) -> None:
    cache = linked_twice(tmp_path, llvm, dist_lto_cmd)
    done = cache_cli(cache, "stats", "--json")
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    size = sum(p.stat().st_size for e in entries(cache) for p in e.iterdir() if p.name != "sums")
    assert {k: stats[k] for k in ("entries", "size", "links", "hits", "misses", "stores")} == {
        "entries": 3, "size": size, "links": 2, "hits": 3, "misses": 3, "stores": 3,
    }  # fmt: skip
    text = cache_cli(cache, "stats").stdout.splitlines()
    assert f"directory         {cache}" in text
    assert "hits              3 (50.0% of lookups)" in text


def test_list_and_show_name_every_entry_and_its_outputs_sums(
    tmp_path: Path, llvm: Llvm, dist_lto_cmd: list[str]
) -> None:
    cache = linked_twice(tmp_path, llvm, dist_lto_cmd)
    listed = cache_cli(cache, "list").stdout.splitlines()
    assert sorted(line.split()[0] for line in listed) == sorted(e.name for e in entries(cache))
    entry = entries(cache)[0]
    shown = cache_cli(cache, "show", entry.name[:12])
    assert shown.returncode == 0, shown.stderr
    output = entry / "0"
    digest = hashlib.sha256(output.read_bytes()).hexdigest()
    assert (f"output 0  {output}  {output.stat().st_size} bytes  sha256 {digest}"
            in shown.stdout.splitlines())  # fmt: skip
    assert f"key       {entry.name}" in shown.stdout.splitlines()


@pytest.mark.parametrize(
    ("key", "message"),
    [("ffffffffffff", "no entry whose key starts with ffffffffffff"),
     ("xyz", "'xyz': a key is hex digits (give at least two)")],
)  # fmt: skip
def test_show_of_an_unknown_key_is_bad_input(key: str, message: str, tmp_path: Path) -> None:
    done = cache_cli(tmp_path / "cache", "show", key)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("dist-lto cache: error: ") and line.endswith(message)


def test_prune_by_age_then_by_size(tmp_path: Path, llvm: Llvm, dist_lto_cmd: list[str]) -> None:
    cache = linked_twice(tmp_path, llvm, dist_lto_cmd)
    old, *recent = entries(cache)
    ten_days_ago = time.time() - 10 * 86400
    os.utime(old, (ten_days_ago, ten_days_ago))
    done = cache_cli(cache, "prune", "--max-age=7d")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("pruned 1 entries; 2 left,")
    assert entries(cache) == recent
    done = cache_cli(cache, "prune", "--max-size=0")
    assert done.stdout.startswith("pruned 2 entries; 0 left,")
    assert entries(cache) == []
    assert not list((cache / "v2" / "tmp").iterdir())


@pytest.mark.parametrize(
    ("args", "message"),
    [([], "prune: give --max-size, --max-age or both"),
     (["--max-age=3 days"], "prune: not an age: '3 days'"),
     (["--max-size=lots"], "prune: not a size: 'lots'")],
)  # fmt: skip
def test_prune_needs_a_limit_it_understands(args: list[str], message: str, tmp_path: Path) -> None:
    done = cache_cli(tmp_path / "cache", "prune", *args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_clear_empties_the_cache_and_its_counts(
    tmp_path: Path, llvm: Llvm, dist_lto_cmd: list[str]
) -> None:
    cache = linked_twice(tmp_path, llvm, dist_lto_cmd)
    done = cache_cli(cache, "clear")
    assert (done.returncode, done.stdout) == (0, f"removed 3 entries from {cache}\n")
    assert entries(cache) == []
    stats = json.loads(cache_cli(cache, "stats", "--json").stdout)
    assert (stats["entries"], stats["links"], stats["hits"]) == (0, 0, 0)


def test_a_torn_usage_line_is_skipped_not_fatal(tmp_path: Path) -> None:
    cache = result_cache.ResultCache(str(tmp_path / "cache"))
    cache.create()
    cache.record_use(2, 1, 1)
    with open(tmp_path / "cache" / "v2" / "usage", "ab") as f:
        f.write(b"3 4\n7 x 1\n")
    cache.record_use(0, 5, 5)
    usage = cache.usage()
    assert (usage.links, usage.hits, usage.misses, usage.stores) == (2, 2, 6, 6)


def test_the_tools_version_is_part_of_every_result_cache_key() -> None:
    assert cache_key.KEY_SCHEME.endswith(b"\0" + __version__.encode() + b"\0")


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90m", 5400), ("12h", 43200),
                                               ("30d", 2592000), ("2w", 1209600)])  # fmt: skip
def test_ages_take_the_usual_units(text: str, seconds: int) -> None:
    assert parse_age(text) == seconds


def test_a_long_usage_log_is_summed_into_one_line_by_prune(tmp_path: Path) -> None:
    cache = result_cache.ResultCache(str(tmp_path / "cache"))
    cache.create()
    links = result_cache.USAGE_COMPACT_AT // len(b"1 2 3\n") + 1
    (tmp_path / "cache" / "v2" / "usage").write_bytes(b"1 2 3\n" * links)
    cache.prune()
    assert (tmp_path / "cache" / "v2" / "usage").read_bytes() == (
        f"{links} {2 * links} {3 * links} {links}\n".encode()
    )
    usage = cache.usage()
    assert (usage.links, usage.hits, usage.misses, usage.stores) == (
        links,
        links,
        2 * links,
        3 * links,
    )


def test_the_cache_directory_may_come_before_the_action(
    tmp_path: Path, llvm: Llvm, dist_lto_cmd: list[str]
) -> None:
    cache = linked_twice(tmp_path, llvm, dist_lto_cmd)
    done = run_cli(["cache", f"--cache-dir={cache}", "list"])
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 3


def test_a_reader_that_stops_early_is_not_an_error(
    tmp_path: Path, llvm: Llvm, dist_lto_cmd: list[str]
) -> None:
    cache = linked_twice(tmp_path, llvm, dist_lto_cmd)
    listing = subprocess.Popen([*dist_lto_cmd, "cache", "list", f"--cache-dir={cache}"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert listing.stdout is not None
    listing.stdout.close()  # as `| head -0` would
    _, stderr = listing.communicate(timeout=60)
    assert (listing.returncode, stderr) == (0, b"")
