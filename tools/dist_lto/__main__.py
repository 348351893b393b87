"""`python3 -m dist_lto ...` and `python3 -S path/to/dist_lto ...` are the same as `dist-lto`.

The second form runs the package directory itself, so it needs no installation
and no site-packages: `-S` skips the site scan that dominates Python's start-up,
which is how per-module actions such as `dist-lto opt` are meant to be started.
"""

import os
import sys

if not __package__:
    # Run as a directory: sys.path[0] is this directory; its parent holds the package.
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from dist_lto.cli import main

sys.exit(main())
