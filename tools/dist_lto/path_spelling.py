"""How paths are spelled: LLD and the backends match modules by spelling, byte for byte.

A "plain" path is relative and already normal (no empty, `.` or `..` parts), so it
equals its own `normpath`. Checking a whole list at once, with substring searches over
the joined paths, keeps the planner's checks at C speed for 100,000 paths.
"""

from __future__ import annotations

import posixpath


def _plain_parts(joined: str) -> bool:
    """No empty, `.` or `..` part in any of the newline-separated paths in `joined`."""
    parts = "\n" + joined.replace("/", "\n") + "\n"
    return "\n\n" not in parts and "\n.\n" not in parts and "\n..\n" not in parts


def is_plain(path: str) -> bool:
    """True when `path` is relative and normal: `posixpath.normpath(path) == path`."""
    return "\n" not in path and _plain_parts(path)


def all_plain(paths: list[str]) -> bool:
    """`is_plain` for every path, with a few C-speed scans of the joined paths."""
    if not paths:
        return True
    joined = "\n".join(paths)
    return joined.count("\n") == len(paths) - 1 and _plain_parts(joined)


def norm(path: str) -> str:
    return path if is_plain(path) else posixpath.normpath(path)


def climb(path: str) -> int:
    """How many levels `path` reaches above its starting directory (`a/../../x` -> 1)."""
    depth = lowest = 0
    for part in path.split("/"):
        if part == "..":
            depth -= 1
            lowest = min(lowest, depth)
        elif part and part != ".":
            depth += 1
    return -lowest
