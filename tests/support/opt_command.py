"""`dist-lto opt` as a build action runs it: the package's entry point run by path with
`-S -E` (no site, no environment), one module per command."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OPT = [sys.executable, "-S", "-E", str(REPO / "tools" / "dist_lto" / "__main__.py"), "opt"]


def opt_command(module: str, out: Path | str, clang: str, *options: str) -> list[str]:
    """The command that optimises `module` with its index beside it (`<module>.thinlto.bc`,
    as LLD's index step writes it) into `out`; `options` go before `-- clang`."""
    return [*OPT, "--input", module, "--index", f"{module}.thinlto.bc", "--out", str(out),
            *options, "--", clang]  # fmt: skip
