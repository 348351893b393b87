"""Where the package lies on disk, whichever way it was installed.

A source tree or site-packages holds `dist_lto/` with every file in it. The package
Buck2's actions run (`bytecode.py`) holds its Python modules in `dist_lto.zip`, with a
`dist_lto/` directory beside it for the rest: `__main__.py`, which starts the tool,
and the C sources of the servers the tools build. The tools use this module to find
those files, and to start the package again in another process. Standard library
only.
"""

import os

_HERE = os.path.dirname(os.path.abspath(__file__))
_ARCHIVE: str | None = getattr(__spec__.loader, "archive", None)  # a zipimporter's zip

IMPORT_ROOT = _ARCHIVE if _ARCHIVE else os.path.dirname(_HERE)
"""The `sys.path` entry the package was imported from: a directory, or the zip."""

FILES = os.path.join(os.path.dirname(_ARCHIVE), "dist_lto") if _ARCHIVE else _HERE
"""The directory holding the package's files that are not modules in a zip."""

MAIN = os.path.join(FILES, "__main__.py")
"""What `python3 -S -E MAIN ARGS` runs as `dist-lto ARGS`."""


def package_file(*parts: str) -> str:
    """The path of a file of the package that is not a module (a C source)."""
    return os.path.join(FILES, *parts)
