"""A real headless browser for tests of the HTML report: Debian's `chromium`, and a PNG
reader (standard library only) to look at what it drew."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from collections import Counter
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser")


def chromium() -> str | None:
    """The browser's path, None when it is not installed (`.ci/setup` installs it)."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def screenshot(browser: str, page: Path, png: Path, width: int = 1280, height: int = 2400) -> None:
    """Render `page` (a local file; the browser gets no network) and save a PNG of it."""
    profile = png.parent / f".{png.name}.profile"
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={profile}", "--proxy-server=127.0.0.1:9",
         f"--window-size={width},{height}", f"--screenshot={png}", page.resolve().as_uri()],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "HOME": str(profile)},
    )  # fmt: skip
    shutil.rmtree(profile, ignore_errors=True)
    if done.returncode != 0 or not png.exists():
        raise RuntimeError(
            f"{browser} made no screenshot (status {done.returncode}): {done.stderr}"
        )


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def read_png(path: Path) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB bytes) of an 8-bit RGB or RGBA PNG, alpha dropped."""
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG")
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            if depth != 8 or colour not in (2, 6):
                raise ValueError(f"{path}: unsupported PNG (depth {depth}, colour type {colour})")
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                line[i] = (line[i] + _paeth(left, up, corner)) & 0xFF
        previous = line
        rows.append(
            bytes(line) if channels == 3 else bytes(b for j, b in enumerate(line) if j % 4 != 3)
        )
    return width, height, rows


def colours(path: Path) -> Counter[tuple[int, int, int]]:
    """How many pixels of each colour the PNG holds."""
    _, _, rows = read_png(path)
    counts: Counter[tuple[int, int, int]] = Counter()
    for row in rows:
        counts.update(zip(row[0::3], row[1::3], row[2::3], strict=True))
    return counts
