"""`dist-lto cache`: look at and trim the distributor's result cache.

The cache is `distribute/result_cache.py`'s (layout v2); this module only reads its
entries and usage log and calls its deletion, which is safe while links run.
"""

import argparse
import os
import sys
import time

import orjson

from dist_lto.distribute.result_cache import (
    SUMS,
    Entry,
    ResultCache,
    default_cache_dir,
    parse_size,
    read_sums,
)
from dist_lto.durations import parse_duration
from dist_lto.errors import BadInput

PROG = "dist-lto cache"
DESCRIPTION = """\
Look at and trim the result cache that `dist-lto distribute` (and `dist-lto link`)
keep: one entry per backend job, keyed by the compiler, its arguments and the contents
of its inputs (docs/distribute.md). Safe while links run: entries vanish whole."""
EPILOG = """\
The directory and the size limit are read as `distribute` and `link` read them:
--cache-dir, else DIST_LTO_CACHE_DIR, else the configuration file's cache.dir, else
$XDG_CACHE_HOME/dist-lto or ~/.cache/dist-lto; the limit from DIST_LTO_CACHE_MAX_SIZE,
else cache.max_size, else 2G (docs/configuration.md). Hits and misses are counted by
every link that uses the cache (one line appended to v2/usage per link). Exit status:
0; 2 for bad input (an unknown key, a bad size, a bad configuration)."""


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


class Place:
    """The cache's directory and size limit, each with where it came from."""

    __slots__ = ("directory", "directory_from", "max_size", "max_size_from")

    def __init__(self, opts: argparse.Namespace) -> None:
        from dist_lto import configuration
        from dist_lto.distribute.settings import cache_max_size

        opts.cache_max_size = None
        origin = configuration.fill(opts, configuration.CACHE)
        self.directory = opts.cache_dir or default_cache_dir()
        self.directory_from = origin.get("cache_dir", "--cache-dir" if opts.cache_dir else "")
        self.max_size = cache_max_size(opts.cache_max_size, origin)
        self.max_size_from = origin.get("cache_max_size", "")


def _from(origin: str) -> str:
    return origin or "default"


def build_parser() -> argparse.ArgumentParser:
    where = "the cache (default: DIST_LTO_CACHE_DIR, the configuration file's cache.dir,"
    where += " else $XDG_CACHE_HOME/dist-lto or ~/.cache/dist-lto)"
    common = argparse.ArgumentParser(add_help=False)
    # Before or after ACTION; SUPPRESS keeps an action's default from hiding the first.
    common.add_argument("--cache-dir", metavar="DIR", default=argparse.SUPPRESS, help=where)
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--cache-dir", metavar="DIR", help=where)
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    stats = actions.add_parser(
        "stats", parents=[common], help="entries, size, and the hits and misses of links"
    )
    stats.add_argument("--json", action="store_true", help="as one JSON object")
    listing = actions.add_parser(
        "list", parents=[common], help="every entry, most recently used first"
    )
    listing.add_argument("--json", action="store_true", help="as a JSON array")
    show = actions.add_parser("show", parents=[common], help="one entry and its outputs' sums")
    show.add_argument("key", metavar="KEY", help="the entry's key, or a unique prefix of it")
    prune = actions.add_parser(
        "prune", parents=[common], help="delete entries: least recently used, or unused"
    )
    prune.add_argument(
        "--max-size",
        metavar="SIZE",
        help="delete least recently used entries until the rest fit (bytes, or K/M/G/T;"
        " default: the configured limit, as links prune to)",
    )
    prune.add_argument(
        "--max-age",
        metavar="AGE",
        help="delete entries unused for longer (seconds, or a ms/s/m/h/d/w suffix)",
    )
    actions.add_parser("clear", parents=[common], help="delete every entry and the counts")
    actions.add_parser(
        "zero", parents=[common], help="set the links, hits, misses and stores to zero"
    )
    return parser


def main(argv: list[str]) -> int:
    try:
        status = _main(argv)
        sys.stdout.flush()
    except BrokenPipeError:  # `dist-lto cache list | head`: the reader has seen enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return status


def _main(argv: list[str]) -> int:
    opts = build_parser().parse_args(argv)
    place = Place(opts)
    cache = ResultCache(place.directory, place.max_size)
    if opts.action == "stats":
        return _stats(cache, place, opts.json)
    if opts.action == "list":
        return _list(cache, opts.json)
    if opts.action == "show":
        return _show(cache, opts.key)
    if opts.action == "prune":
        return _prune(cache, place, opts.max_size, opts.max_age)
    if opts.action == "zero":
        cache.zero_usage()
        print(f"counts set to zero in {cache.root}")
        return 0
    removed = cache.clear()
    print(f"removed {removed} entries from {cache.root}")
    return 0


def _stats(cache: ResultCache, place: Place, as_json: bool) -> int:
    entries = cache.listing()
    usage = cache.usage()
    size = sum(entry.size for entry in entries)
    asked = usage.hits + usage.misses
    doc = {
        "directory": cache.root,
        "directory_from": _from(place.directory_from),
        "entries": len(entries),
        "size": size,
        "max_size": place.max_size,
        "max_size_from": _from(place.max_size_from),
        "links": usage.links,
        "hits": usage.hits,
        "misses": usage.misses,
        "stores": usage.stores,
        "oldest_use": entries[0].last_use if entries else None,
        "newest_use": entries[-1].last_use if entries else None,
    }
    if as_json:
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    rate = f" ({100 * usage.hits / asked:.1f}% of lookups)" if asked else ""
    used = f" ({100 * size / place.max_size:.0f}% of the limit)" if place.max_size else ""
    lines = [
        ("directory", f"{cache.root}  ({_from(place.directory_from)})"),
        ("entries", str(len(entries))),
        ("size", f"{human_size(size)}{used}"),
        ("size limit", f"{human_size(place.max_size)}  ({_from(place.max_size_from)})"),
        ("links", str(usage.links)),
        ("hits", f"{usage.hits}{rate}"),
        ("misses", str(usage.misses)),
        ("stored", str(usage.stores)),
    ]
    if entries:
        lines.append(("least recent use", _when(entries[0].last_use)))
        lines.append(("most recent use", _when(entries[-1].last_use)))
    for name, value in lines:
        print(f"{name:<17} {value}")
    return 0


def _describe(entry: Entry) -> dict[str, object]:
    return {"key": entry.key, "size": entry.size, "outputs": entry.outputs,
            "last_use": entry.last_use, "path": entry.path}  # fmt: skip


def _list(cache: ResultCache, as_json: bool) -> int:
    entries = list(reversed(cache.listing()))
    if as_json:
        data = orjson.dumps([_describe(e) for e in entries], option=orjson.OPT_INDENT_2)
        sys.stdout.write(data.decode() + "\n")
        return 0
    for entry in entries:
        print(f"{entry.key}  {human_size(entry.size):>10}  {_when(entry.last_use)}")
    return 0


def _show(cache: ResultCache, prefix: str) -> int:
    if len(prefix) < 2 or not all(c in "0123456789abcdefABCDEF" for c in prefix):
        raise BadInput(f"{prefix!r}: a key is hex digits (give at least two)")
    found = cache.find(prefix)
    if not found:
        raise BadInput(f"{cache.root}: no entry whose key starts with {prefix}")
    if len(found) > 1:
        raise BadInput(f"{cache.root}: {len(found)} entries' keys start with {prefix}: give more")
    (entry,) = found
    print(f"key       {entry.key}")
    print(f"path      {entry.path}")
    print(f"size      {human_size(entry.size)}")
    print(f"last use  {_when(entry.last_use)}")
    try:
        sums = read_sums(entry.path)
    except OSError:
        sums = None
    if sums is None:
        print(f"{SUMS}      missing or malformed: the next link that looks it up evicts it")
        return 0
    for i, (size, digest) in enumerate(sums):
        print(f"output {i}  {os.path.join(entry.path, str(i))}  {size} bytes  sha256 {digest}")
    return 0


def _prune(cache: ResultCache, place: Place, max_size: str | None, max_age: str | None) -> int:
    """To --max-size and --max-age; with neither, to the configured limit."""
    age = None
    limit = f"the limit {human_size(place.max_size)} ({_from(place.max_size_from)})"
    try:
        if max_size is not None:
            cache.max_size = parse_size(max_size)
            limit = f"--max-size {human_size(cache.max_size)}"
        elif max_age is not None:
            cache.max_size = 1 << 62
        if max_age is not None:
            age = parse_duration(max_age)
            limit = f"--max-age {max_age}" + (f", {limit}" if max_size is not None else "")
    except ValueError as err:
        raise BadInput(f"prune: {err}") from None
    removed = cache.prune(max_age=age)
    left = cache.listing()
    print(
        f"pruned {removed} entries to {limit}; {len(left)} left,"
        f" {human_size(sum(e.size for e in left))}, in {cache.root}"
    )
    return 0
