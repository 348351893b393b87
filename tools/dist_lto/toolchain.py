"""Where the LLVM 22 tools are: Debian's llvm-22 layout unless told otherwise.

`DIST_LTO_LLVM_BIN` overrides the directory. Standard library only.
"""

import os

DEFAULT_LLVM_BIN = "/usr/lib/llvm-22/bin"


def llvm_bin() -> str:
    return os.environ.get("DIST_LTO_LLVM_BIN", DEFAULT_LLVM_BIN)


def tool(name: str) -> str:
    """Absolute path of LLVM tool `name` (`clang`, `ld.lld`, `llvm-ar`, ...)."""
    return os.path.join(llvm_bin(), name)
