"""`dist-lto cache`: stats, list, show, prune and clear over a cache real links filled."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dist_lto import __version__
from dist_lto.commands.cache import human_size
from dist_lto.distribute import cache_key, result_cache
from support.tools import REPO, Llvm, run_cli

CAPTURED = REPO / "examples" / "captured"
OUTPUTS = ["out/opt/0.o", "out/archive-opt/0/objects/util.o", "out/archive-opt/1/0/text.o"]


def linked_twice(
    tmp_path: Path, llvm: Llvm, dist_lto_cmd: list[str], env: dict[str, str] | None = None
) -> Path:
    """A cache filled by the captured example's three backends, then hit by a relink:
    in `tmp_path/cache` (--cache-dir), or, given `env`, wherever its settings say."""
    root = tmp_path / "captured"
    shutil.copytree(CAPTURED, root)
    cache = tmp_path / "cache"
    where = [] if env else [f"--cache-dir={cache}"]
    for _ in range(2):
        for output in OUTPUTS:
            (root / output).unlink(missing_ok=True)
        done = subprocess.run([*dist_lto_cmd, "link", *where, "--quiet", "meta.json", "--",
                               llvm.clang, "-fuse-ld=lld", "-O2", "-o", "app"],
                              cwd=root, capture_output=True, text=True, env=env)  # fmt: skip
        assert done.returncode == 0, done.stderr
    return cache


def configured(tmp_path: Path, **variables: str) -> dict[str, str]:
    """An environment with a private XDG cache and a configuration file whose cache is
    `tmp_path/configured` (limit 1G), plus `variables`."""
    config = tmp_path / "config.toml"
    config.write_text(f'[cache]\ndir = "{tmp_path / "configured"}"\nmax_size = "1G"\n')
    return {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg"),
            "DIST_LTO_CONFIG": str(config), **variables}  # fmt: skip


def cache_env(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dist_lto", "cache", *args],
                          capture_output=True, text=True, env=env)  # fmt: skip


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
    assert f"directory         {cache}  (--cache-dir)" in text
    assert "size limit        2.0 GiB  (default)" in text
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
    assert done.stdout.startswith("pruned 1 entries to --max-age 7d; 2 left,")
    assert entries(cache) == recent
    done = cache_cli(cache, "prune", "--max-size=0")
    assert done.stdout.startswith("pruned 2 entries to --max-size 0 B; 0 left,")
    assert entries(cache) == []
    assert not list((cache / "v2" / "tmp").iterdir())


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--max-age=3 days"], "prune: not a duration: '3 days'"),
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


def test_the_cache_command_reads_the_directory_and_limit_links_use(
    tmp_path: Path, llvm: Llvm, dist_lto_cmd: list[str]
) -> None:
    env = configured(tmp_path)
    linked_twice(tmp_path, llvm, dist_lto_cmd, env)
    filled = tmp_path / "configured"
    assert len(entries(filled)) == 3
    assert not (tmp_path / "xdg" / "dist-lto" / "v2" / "entries").exists()
    stats = json.loads(cache_env(env, "stats", "--json").stdout)
    config = f"{env['DIST_LTO_CONFIG']}: "
    assert {k: stats[k] for k in ("directory", "directory_from", "entries", "max_size",
                                  "max_size_from", "hits")} == {
        "directory": str(filled), "directory_from": config + "cache.dir", "entries": 3,
        "max_size": 1 << 30, "max_size_from": config + "cache.max_size", "hits": 3,
    }  # fmt: skip
    text = cache_env(env, "stats").stdout.splitlines()
    assert f"size limit        1.0 GiB  ({config}cache.max_size)" in text


def test_variables_win_over_the_file_and_the_command_line_over_both(tmp_path: Path) -> None:
    env = configured(tmp_path, DIST_LTO_CACHE_DIR=str(tmp_path / "variable"),
                     DIST_LTO_CACHE_MAX_SIZE="3M")  # fmt: skip
    stats = json.loads(cache_env(env, "stats", "--json").stdout)
    assert (stats["directory"], stats["directory_from"], stats["max_size"]) == (
        str(tmp_path / "variable"),
        "DIST_LTO_CACHE_DIR",
        3 << 20,
    )
    flag = json.loads(cache_env(env, "stats", "--json", f"--cache-dir={tmp_path}/flag").stdout)
    assert (flag["directory"], flag["directory_from"]) == (str(tmp_path / "flag"), "--cache-dir")


def test_a_bad_configured_limit_is_bad_input_naming_its_origin(tmp_path: Path) -> None:
    done = cache_env(configured(tmp_path, DIST_LTO_CACHE_MAX_SIZE="lots"), "stats")
    assert done.returncode == 2
    assert done.stderr == ("dist-lto cache: error: DIST_LTO_CACHE_MAX_SIZE: not a size:"
                           " 'lots' (use bytes or a K, M, G, T suffix)\n")  # fmt: skip


def test_prune_without_limits_prunes_to_the_configured_size(
    tmp_path: Path, llvm: Llvm, dist_lto_cmd: list[str]
) -> None:
    env = configured(tmp_path)
    linked_twice(tmp_path, llvm, dist_lto_cmd, env)
    kept = cache_env(env, "prune")
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout.startswith("pruned 0 entries to the limit 1.0 GiB (")
    filled = tmp_path / "configured"
    biggest = max(sum(p.stat().st_size for p in e.iterdir() if p.name != "sums")
                  for e in entries(filled))  # fmt: skip
    tight = cache_env({**env, "DIST_LTO_CACHE_MAX_SIZE": str(biggest)}, "prune")
    assert tight.stdout.startswith(
        f"pruned 2 entries to the limit {human_size(biggest)} (DIST_LTO_CACHE_MAX_SIZE); 1 left"
    )
    assert len(entries(filled)) == 1


def test_zero_sets_the_counts_to_zero_and_keeps_the_entries(
    tmp_path: Path, llvm: Llvm, dist_lto_cmd: list[str]
) -> None:
    cache = linked_twice(tmp_path, llvm, dist_lto_cmd)
    done = cache_cli(cache, "zero")
    assert (done.returncode, done.stdout) == (0, f"counts set to zero in {cache}\n")
    stats = json.loads(cache_cli(cache, "stats", "--json").stdout)
    assert {k: stats[k] for k in ("entries", "links", "hits", "misses", "stores")} == {
        "entries": 3,
        "links": 0,
        "hits": 0,
        "misses": 0,
        "stores": 0,
    }
    root = tmp_path / "captured"
    for output in OUTPUTS:
        (root / output).unlink()
    relink = subprocess.run([*dist_lto_cmd, "link", f"--cache-dir={cache}", "--quiet",
                             "meta.json", "--", llvm.clang, "-fuse-ld=lld", "-O2", "-o", "app"],
                            cwd=root, capture_output=True, text=True)  # fmt: skip
    assert relink.returncode == 0, relink.stderr
    stats = json.loads(cache_cli(cache, "stats", "--json").stdout)
    assert (stats["links"], stats["hits"], stats["misses"]) == (1, 3, 0)


def test_the_fork_server_library_lives_in_the_configured_cache_directory(
    tmp_path: Path, llvm: Llvm, dist_lto_cmd: list[str]
) -> None:
    env = configured(tmp_path)
    linked_twice(tmp_path, llvm, dist_lto_cmd, env)
    assert len(list((tmp_path / "configured" / "forkserver").glob("forkserver-*.so"))) == 1
    assert not (tmp_path / "xdg" / "dist-lto" / "forkserver").exists()
