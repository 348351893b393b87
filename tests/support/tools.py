"""The real tools the tests drive: LLVM 22's and our own command, as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
"""The repository's root."""


@dataclass(frozen=True)
class Llvm:
    clang: str
    clangxx: str
    lld: str
    ar: str
    nm: str
    objdump: str
    readelf: str


def run_cli(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m dist_lto ARGS` as a user would, capturing text output."""
    return subprocess.run(
        [sys.executable, "-m", "dist_lto", *args], cwd=cwd, capture_output=True, text=True
    )
