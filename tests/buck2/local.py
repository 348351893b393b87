"""This machine's answers to the `.buckconfig` questions that have no portable default.

`dist_lto.python` must be a Python with orjson and libarchive-c (the running
interpreter when it has them: the project's .venv); `rust.rustc` must be a real
rustc binary, not rustup's proxy (actions run with PATH=/usr/bin:/bin and no HOME,
where the proxy cannot find its toolchain).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUSTUP_PROXY = Path.home() / ".cargo" / "bin" / "rustc"


def python_with_tools() -> str:
    """An interpreter that can import orjson and libarchive (for prepare and plan)."""
    for candidate in (sys.executable, str(REPO / ".venv" / "bin" / "python")):
        if candidate and os.access(candidate, os.X_OK):
            probe = subprocess.run(
                [candidate, "-c", "import orjson, libarchive"], capture_output=True
            )
            if probe.returncode == 0:
                return candidate
    raise RuntimeError("no Python with orjson and libarchive-c: run `bash .ci/setup`")


def real_rustc() -> str | None:
    """The rustc binary behind rustup's proxy (or on PATH); None when there is none."""
    found = shutil.which("rustc") or (str(RUSTUP_PROXY) if RUSTUP_PROXY.exists() else None)
    if found is None:
        return None
    sysroot = subprocess.run([found, "--print", "sysroot"], capture_output=True, text=True)
    if sysroot.returncode != 0:
        return None
    real = Path(sysroot.stdout.strip()) / "bin" / "rustc"
    return str(real) if real.exists() else found


def harness_config() -> dict[str, str]:
    """`-c` overrides that make the examples build on this machine."""
    config = {"dist_lto.python": python_with_tools()}
    rustc = real_rustc()
    if rustc:
        config["rust.rustc"] = rustc
    return config
