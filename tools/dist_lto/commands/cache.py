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
from dist_lto.errors import BadInput

PROG = "dist-lto cache"
DESCRIPTION = """\
Look at and trim the result cache that `dist-lto distribute` (and `dist-lto link`)
keep: one entry per backend job, keyed by the compiler, its arguments and the contents
of its inputs (docs/distribute.md). Safe while links run: entries vanish whole."""
EPILOG = """\
The directory is --cache-dir, else $XDG_CACHE_HOME/dist-lto, else ~/.cache/dist-lto.
Hits and misses are counted by every link that uses the cache (one line appended to
v2/usage per link). Exit status: 0; 2 for bad input (an unknown key, a bad size)."""

_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    """`3600`, `90m`, `12h`, `30d`, `2w` -> seconds; ValueError otherwise."""
    number, unit = text, "s"
    if text and text[-1].lower() in _AGE_UNITS:
        number, unit = text[:-1], text[-1].lower()
    if not (number.isascii() and number.isdigit()):
        raise ValueError(f"not an age: {text!r} (use seconds or an s, m, h, d, w suffix)")
    return int(number) * _AGE_UNITS[unit]


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


def build_parser() -> argparse.ArgumentParser:
    where = "the cache (default: $XDG_CACHE_HOME/dist-lto, else ~/.cache/dist-lto)"
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
        help="delete least recently used entries until the rest fit (bytes, or K/M/G/T)",
    )
    prune.add_argument(
        "--max-age",
        metavar="AGE",
        help="delete entries unused for longer (seconds, or an s/m/h/d/w suffix)",
    )
    actions.add_parser("clear", parents=[common], help="delete every entry and the counts")
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
    cache = ResultCache(opts.cache_dir or default_cache_dir())
    if opts.action == "stats":
        return _stats(cache, opts.json)
    if opts.action == "list":
        return _list(cache, opts.json)
    if opts.action == "show":
        return _show(cache, opts.key)
    if opts.action == "prune":
        return _prune(cache, opts.max_size, opts.max_age)
    removed = cache.clear()
    print(f"removed {removed} entries from {cache.root}")
    return 0


def _stats(cache: ResultCache, as_json: bool) -> int:
    entries = cache.listing()
    usage = cache.usage()
    size = sum(entry.size for entry in entries)
    asked = usage.hits + usage.misses
    doc = {
        "directory": cache.root,
        "entries": len(entries),
        "size": size,
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
    lines = [
        ("directory", cache.root),
        ("entries", str(len(entries))),
        ("size", human_size(size)),
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


def _prune(cache: ResultCache, max_size: str | None, max_age: str | None) -> int:
    if max_size is None and max_age is None:
        raise BadInput("prune: give --max-size, --max-age or both")
    age = None
    try:
        if max_size is not None:
            cache.max_size = parse_size(max_size)
        else:
            cache.max_size = 1 << 62
        if max_age is not None:
            age = parse_age(max_age)
    except ValueError as err:
        raise BadInput(f"prune: {err}") from None
    removed = cache.prune(max_age=age)
    left = cache.listing()
    print(
        f"pruned {removed} entries; {len(left)} left,"
        f" {human_size(sum(e.size for e in left))}, in {cache.root}"
    )
    return 0
