"""`dist-lto upstream copy --to OUT --from MEMBER`: bind a native archive member's
optimised-object output to a copy of the member (upstream's `copy` tool).

Hard-linked when possible; written under a temporary name and renamed, so a failed
copy leaves nothing at `--to`.
"""

import argparse
import os
import shutil

from dist_lto.errors import BadInput
from dist_lto.fsutil import atomic_output


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="dist-lto upstream copy")
    parser.add_argument("--to", required=True)
    parser.add_argument("--from", dest="source", required=True)
    args = parser.parse_args(argv)
    if not os.path.isfile(args.source):
        raise BadInput(f"{args.source}: no such archive member to copy")
    os.makedirs(os.path.dirname(args.to) or ".", exist_ok=True)
    with atomic_output(args.to) as tmp:
        try:
            os.link(args.source, tmp)
        except OSError:
            shutil.copyfile(args.source, tmp)
    return 0
