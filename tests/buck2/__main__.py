"""`PYTHONPATH=tests python -m buck2 build [-c SECTION.KEY=VALUE] PATTERN...` without Buck2.

Builds the patterns through the harness (this machine's Python and rustc are filled
in unless given) and prints each target's default outputs, as `buck2 build
--show-output` does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .harness import BuildError, Harness
from .local import REPO, harness_config


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m buck2", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["build"])
    parser.add_argument("patterns", nargs="+", metavar="PATTERN")
    parser.add_argument("-c", "--config", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument(
        "--project", type=Path, default=REPO, help="project root (default: this repo)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="output root (default: PROJECT/buck-out)"
    )
    args = parser.parse_args(argv)
    config = harness_config()
    for item in args.config:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"-c {item}: expected SECTION.KEY=VALUE")
        config[key] = value
    out = args.out or args.project
    try:
        result = Harness(args.project, out, config).build(args.patterns)
    except BuildError as err:
        print(f"build failed: {err}", file=sys.stderr)
        return 1
    for label in result.labels:
        for path in result.outputs(label):
            print(label, path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
