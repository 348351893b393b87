"""Build the examples with real Buck2 and our rules, run them, and print what happened.

    .venv/bin/python examples/demo.py [TARGET_PATTERN ...]

Buck2 is `$DIST_LTO_BUCK2`, else the one `.ci/setup` installs into `.cache/buck2/bin`,
else `buck2` on PATH. The build runs in the repository with its own isolation dir
(`demo`, so a daemon of yours is left alone) and this machine's Python and rustc passed
with `-c`. `NAME` links with distributed ThinLTO and `NAME-inprocess` with LLD's
in-process ThinLTO; the two must print the same.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from support.real_buck2 import Buck2  # noqa: E402


def main(argv: list[str]) -> int:
    patterns = argv or ["//examples/..."]
    buck2 = Buck2(REPO, isolation_dir="demo")
    print(f"building {' '.join(patterns)} with {buck2.binary}")
    start = time.monotonic()
    try:
        outputs = buck2.outputs(*patterns)
    except AssertionError as err:
        print(f"demo: {err}", file=sys.stderr)
        return 1
    seconds = time.monotonic() - start
    ran = buck2.what_ran()
    opt = Counter(r.target for r in ran if r.category == "thin_lto_opt")
    where = Counter(r.executor for r in ran)
    print(f"built in {seconds:.1f} s: {len(ran)} actions ({dict(where)})")

    programs = {
        label: path
        for label, path in outputs.items()
        if path.is_file() and os.access(path, os.X_OK) and path.suffix != ".a"
    }
    results = {}
    for label, path in sorted(programs.items()):
        proc = subprocess.run([str(path)], capture_output=True, text=True, timeout=60)
        results[label] = (proc.returncode, proc.stdout.strip().replace("\n", " | "))
    width = max(len(label) for label in results)
    print(f"\n{'target':<{width}}  {'opt actions':>11}  result")
    mismatched = failed = 0
    for label, (status, output) in results.items():
        twin = results.get(label.removesuffix("-inprocess"))
        note = ""
        if label.endswith("-inprocess") and twin is not None:
            same = twin[1] == output
            mismatched += not same
            note = " (same as distributed)" if same else " (DIFFERS from distributed)"
        failed += status != 0
        verdict = "ok" if status == 0 else f"FAILED ({status})"
        print(f"{label:<{width}}  {opt[label]:>11}  {verdict}{note}: {output}")
    print(f"\n{len(results)} programs, {failed} failed,", end=" ")
    print(f"{mismatched} in-process/distributed mismatches")
    buck2.kill()
    return 1 if failed or mismatched else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
