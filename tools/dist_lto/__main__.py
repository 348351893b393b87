"""`python3 -m dist_lto ...` is the same as the `dist-lto` command."""

import sys

from dist_lto.cli import main

sys.exit(main())
