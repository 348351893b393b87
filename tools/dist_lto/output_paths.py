"""No output may be one of the command's inputs, and no two outputs one path.

Checked before a command starts any work, so a refused run changes nothing: an output
that names an input would replace it, and two outputs at one path would leave one of
them wrong. Paths are compared resolved (`os.path.realpath`), as a file system sees
them: `a/../b`, `./b` and a symbolic link to `b` are all `b`. (`dist-lto opt` keeps a
check of its own, without this module's imports.)
"""

import os

from dist_lto import TYPE_CHECKING
from dist_lto.errors import BadInput

if TYPE_CHECKING:
    from collections.abc import Iterable


def refuse_overlaps(
    outputs: "Iterable[tuple[str, str]]", inputs: "Iterable[tuple[str, str]]"
) -> None:
    """Raise BadInput when an output names an input or another output. Both are
    (description, path) pairs; the message names the output's path, what it is and
    what it collides with."""
    seen: dict[str, tuple[str, str]] = {}
    for what, path in inputs:
        if path:
            seen.setdefault(os.path.realpath(path), (what, path))
    for what, path in outputs:
        if not path:
            continue
        real = os.path.realpath(path)
        other = seen.get(real)
        if other is not None:
            raise BadInput(
                f"{path}: {what} names the same file as {other[0]} {other[1]!r};"
                " nothing was written"
            )
        seen[real] = (what, path)
