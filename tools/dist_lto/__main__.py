"""`python3 -m dist_lto ...` and `python3 -S path/to/dist_lto/__main__.py ...` are `dist-lto`.

The second form runs this file directly, so it needs no installation and no
site-packages: `-S` skips the site scan that dominates Python's start-up, which
is how per-module actions such as `dist-lto opt` are meant to be started (see
docs/opt.md; running the directory instead also works but imports `runpy`).
"""

import os
import sys

# The package needs 3.11 (its syntax): an older Python gets this line, not a SyntaxError.
if sys.version_info < (3, 11):  # noqa: UP036 (run by whatever python3 a user has)
    sys.stderr.write(
        f"dist-lto: error: needs Python 3.11 or newer, not {sys.version.split()[0]}"
        f" ({sys.executable}); under Buck2, set .buckconfig's [dist_lto] python\n"
    )
    sys.exit(2)

if not __package__:
    # Run as a file or directory: the parent of this directory holds the package. This
    # directory itself must leave sys.path (where Python put it, unless -I), so that no
    # module here is importable under a second, top-level name.
    # The package Buck2's actions run holds the modules in a zip beside this directory
    # (bytecode.py).
    _here = os.path.dirname(os.path.abspath(__file__))
    _root = os.path.dirname(_here)
    if os.path.isfile(os.path.join(_root, "dist_lto.zip")):
        _root = os.path.join(_root, "dist_lto.zip")
    if sys.path and os.path.abspath(sys.path[0] or ".") == _here:
        sys.path[0] = _root
    else:
        sys.path.insert(0, _root)

from dist_lto.cli import main

status = main()
if sys.argv[1:2] == ["opt"]:
    # One run per module: interpreter finalization is pure overhead,
    # and `opt` has closed everything it wrote. Flush what it printed, then leave.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
sys.exit(status)
