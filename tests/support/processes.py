"""Watching the processes a tool leaves: by session, and through wrapper scripts that
start children of their own (as ccache or a shell script around clang do)."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

import pytest


def session(sid: int) -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command name) of every live process in session `sid`."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[3]) == sid:
            found[int(entry)] = (int(fields[1]), name)
    return found


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (not a zombie)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2] != "Z"


def wait_until(what: str, check: Callable[[], object], limit: float = 120.0) -> object:
    """Poll `check` until it returns something true; fail after `limit` s (a hang)."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    pytest.fail(f"{what}: still not so after {limit} s")


WRAPPER = """\
#!/bin/sh
# A wrapper that starts two children, one deaf to every stop signal but SIGKILL, and
# waits: it never runs the tool it wraps.
echo $$ >> {pids}
sh -c 'trap "" TERM INT HUP; exec sleep 300' &
echo $! >> {pids}
sleep 300 &
echo $! >> {pids}
: > {ready}
wait
"""


class Wrapper:
    """A wrapper script named `name` in `directory`; `pids` lists every process it and its
    children ran as, `ready` appears once they all run."""

    def __init__(self, directory: Path, name: str = "clang-wrapper") -> None:
        self.path = directory / name
        self.pids_file = directory / f"{name}.pids"
        self.ready = directory / f"{name}.ready"
        self.path.write_text(WRAPPER.format(pids=self.pids_file, ready=self.ready))
        self.path.chmod(self.path.stat().st_mode | stat.S_IXUSR)

    def pids(self) -> list[int]:
        if not self.pids_file.exists():
            return []
        return [int(line) for line in self.pids_file.read_text().split()]

    def all_gone(self) -> bool:
        return not any(alive(pid) for pid in self.pids())
