"""`dist-lto upstream copy --to OUT --from MEMBER`: bind a native archive member's
optimised-object output to a copy of the member (upstream's `copy` tool).

Hard-linked when possible (to the file a symbolic link names, never to the link, whose
relative target would dangle beside the output); written under a temporary name and
renamed, so a failed copy leaves nothing at `--to`. An output that is the member itself
(the same path, or a link to it) is refused: writing through it would empty the source.
"""

import argparse
import os
import shutil
import stat

from dist_lto.errors import BadInput
from dist_lto.fsutil import atomic_output


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="dist-lto upstream copy")
    parser.add_argument("--to", required=True)
    parser.add_argument("--from", dest="source", required=True)
    args = parser.parse_args(argv)
    source, to = args.source, args.to
    try:
        member = os.stat(source)
    except (OSError, ValueError):
        raise BadInput(f"{source}: no such archive member to copy") from None
    if not stat.S_ISREG(member.st_mode):
        raise BadInput(f"{source}: not a regular file: no archive member to copy")
    if to.endswith("/") or os.path.isdir(to):
        raise BadInput(f"{to}: is a directory, not a file to write")
    try:
        existing = os.stat(to)
    except (OSError, ValueError):
        existing = None
    if existing is not None and os.path.samestat(existing, member):
        if os.path.islink(to) or os.path.abspath(to) == os.path.abspath(source):
            raise BadInput(f"{to}: is the member it would copy ({source}): name another output")
        return 0  # a hard link to the member already: the copy is in place
    os.makedirs(os.path.dirname(to) or ".", exist_ok=True)
    with atomic_output(to) as tmp:
        try:
            os.link(os.path.realpath(source), tmp)  # link(2) would not follow a symlink
        except OSError:
            shutil.copyfile(source, tmp)
    return 0
