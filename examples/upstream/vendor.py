"""Copy what the `dist_lto` cell needs from this repository into third-party/dist-lto.

A user's repository would hold ours there as a git submodule; Buck2 accepts no cell
outside the project (and no symbolic link leaving it), so this example copies instead.
Run it again after changing the tools.
"""

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CELL = HERE / "third-party" / "dist-lto"


def vendor(cell: Path = CELL) -> Path:
    staging = cell.with_name(cell.name + ".new")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    shutil.copy2(REPO / ".buckconfig", staging / ".buckconfig")
    shutil.copytree(REPO / "upstream", staging / "upstream", symlinks=True)
    # The distributed link's phases and the package rule: upstream/ loads them.
    shutil.copytree(REPO / "prelude" / "dist_lto", staging / "prelude" / "dist_lto")
    (staging / "platforms").mkdir()
    shutil.copy2(REPO / "platforms" / "defs.bzl", staging / "platforms" / "defs.bzl")
    shutil.copytree(
        REPO / "tools" / "dist_lto",
        staging / "tools" / "dist_lto",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    shutil.rmtree(cell, ignore_errors=True)
    staging.rename(cell)
    return cell


if __name__ == "__main__":
    print(vendor())
    sys.exit(0)
