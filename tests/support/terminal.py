"""Running a command on a pseudo-terminal, as a user at a terminal would."""

from __future__ import annotations

import os
import pty
import select
import subprocess
from collections.abc import Mapping
from pathlib import Path


def run_on_terminal(
    argv: list[str], cwd: Path, env: Mapping[str, str] | None = None
) -> tuple[int, str]:
    """Run `argv` with stderr (and stdout) on a pseudo-terminal: (status, what it showed)."""
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=secondary,
                            stderr=secondary, env=env)  # fmt: skip
    os.close(secondary)
    shown = b""
    while True:
        ready, _, _ = select.select([primary], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # EIO: the terminal's other side closed
            break
        if not chunk:
            break
        shown += chunk
    os.close(primary)
    return proc.wait(timeout=60), shown.decode()
