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


def which(program: str) -> str | None:
    """The executable `program` names: itself when it has a `/`, else found on PATH."""
    if "/" in program:
        return program if os.access(program, os.X_OK) else None
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(directory or ".", program)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None
