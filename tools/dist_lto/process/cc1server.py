"""Backends run one after another in one long-lived clang of the worker's
(`cc1server.cpp`), as a linker's in-process ThinLTO runs them, instead of forked.

A forked compiler still pays for a fresh process's page faults (its code pages, a new
heap): ~20 ms of system time per backend here. The server is built from its source
against the compiler's own libclang-cpp and libLLVM, with the compiler itself, the first
time a compiler needs it; that takes the headers of the compiler's clang and LLVM
(Debian: libclang-NN-dev and llvm-NN-dev). Without them, or for a clang not linked
against those libraries, jobs are forked as before (`forkserver.py`).

Only a clean run is taken from the server: a job that fails, prints anything, or ends
the server is run again through a forked clang, so whatever the user sees about a job
is the compiler's own (`WorkerCompiler`).
"""

import os

from dist_lto import TYPE_CHECKING
from dist_lto.errors import DistLtoError
from dist_lto.installed import package_file
from dist_lto.llvm.toolchain import which
from dist_lto.process.children import describe_status, run_tool
from dist_lto.process.forkserver import (
    FD_VARIABLE,
    SERVER_FD,
    ForkServer,
    built_once,
    read_sources,
    unusable_reason,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from socket import socket

SOURCE = package_file("process", "cc1server.cpp")
_HEADER = os.path.join("include", "clang", "FrontendTool", "Utils.h")
_PROBE = 1 << 20
"""How much of the compiler's program is searched for the libraries it needs."""


class Toolchain:
    """What the server is built from: the compiler's own libraries and headers."""

    __slots__ = ("clang_cpp", "compiler", "llvm", "prefix")

    def __init__(self, compiler: str, prefix: str, clang_cpp: str, llvm: str) -> None:
        self.compiler = compiler
        self.prefix = prefix
        self.clang_cpp = clang_cpp
        self.llvm = llvm


def toolchain(compiler: str) -> "Toolchain | str":
    """The libraries and headers `compiler` was built with, or why there are none."""
    reason = unusable_reason([compiler])
    if reason is not None:
        return reason
    path = os.path.realpath(which(compiler) or compiler)
    prefix = os.path.dirname(os.path.dirname(path))
    try:
        with open(path, "rb") as f:
            program = f.read(_PROBE)
        names = os.listdir(os.path.join(prefix, "lib"))
    except OSError as err:
        return f"{err.filename}: {err.strerror}"
    libraries = []
    for stem in (b"libclang-cpp.so.", b"libLLVM.so."):
        at = program.find(stem)
        if at < 0:
            return f"{path} is not linked against {stem.decode()}*"
        name = program[at : program.index(b"\0", at)].decode(errors="replace")
        if name not in names:
            return f"{name} is not in {prefix}/lib"
        libraries.append(os.path.join(prefix, "lib", name))
    if not os.path.isfile(os.path.join(prefix, _HEADER)):
        return f"no clang headers in {prefix}/include (Debian: libclang-dev of this version)"
    return Toolchain(path, prefix, libraries[0], libraries[1])


def server_program(tools: Toolchain, root: str) -> str:
    """The server under `root`, built with the compiler if it is not there yet.

    Named after the hash of its source, the compiler and its libraries' identities
    (path, inode, size, modification time), so a compiler upgraded in place gets a new
    one; not their change time, which a new hard link also moves (`perf record` links
    every binary it profiles into its build-id cache), and a rebuild of the server
    then costs a build seconds. Written through a temporary and a rename. DistLtoError
    if it cannot be built.
    """
    import hashlib

    try:
        identity = [read_sources(SOURCE)]
        for path in (tools.compiler, tools.clang_cpp, tools.llvm):
            st = os.stat(path)
            identity.append(f"{path}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}".encode())
        digest = hashlib.sha256(b"\0\0".join(identity)).hexdigest()[:24]
        path = os.path.join(root, "cc1server", f"cc1server-{digest}")
        built_once(path, lambda tmp: _build(tools, tmp))
    except OSError as err:
        raise DistLtoError(f"{err.filename or SOURCE}: {err.strerror}") from None
    return path


def find_server(compiler: str, root: str) -> tuple[str | None, str]:
    """`compiler`'s compile server under `root`, built if need be: (its program, "") or
    (None, why `compiler` can have none). DistLtoError when it cannot be built."""
    tools = toolchain(compiler)
    if isinstance(tools, str):
        return None, tools
    return server_program(tools, root), ""


def _build(tools: Toolchain, output: str) -> None:
    lib = os.path.join(tools.prefix, "lib")
    command = [tools.compiler, "--driver-mode=g++", "-std=c++17", "-O2", "-fno-rtti",
               "-isystem", os.path.join(tools.prefix, "include"), "-o", output, SOURCE,
               tools.clang_cpp, tools.llvm, f"-Wl,-rpath,{lib}", "-lpthread"]  # fmt: skip
    status, stderr = run_tool(command)
    if status != 0:
        lines = stderr.decode(errors="replace").strip().splitlines()
        raise DistLtoError(
            f"cannot build {output}: {tools.compiler} {describe_status(status)}"
            + (f": {lines[-1]}" if lines else "")
        )


def llvm_options(argv: "Sequence[str]") -> tuple[str, ...]:
    """The LLVM options (`-mllvm X`, `-mllvm=X`) of a compiler command, in order: a
    server takes only jobs with the list it was started for (`cc1server.cpp`)."""
    found = []
    args = iter(argv)
    for arg in args:
        if arg == "-mllvm":
            found.append(next(args, ""))
        elif arg.startswith("-mllvm="):
            found.append(arg[len("-mllvm=") :])
    return tuple(found)


class Cc1Server(ForkServer):
    """One server of backends for one thread at a time; `run` as `ForkServer.run`, and
    JobDeclined for a job it leaves to a forked clang. It takes the jobs whose LLVM
    options are `options` (`llvm_options`)."""

    def __init__(
        self,
        compiler: str,
        program: str,
        env: "Mapping[str, str] | None" = None,
        options: tuple[str, ...] = (),
    ) -> None:
        self.options = options
        super().__init__(compiler, program, env)

    def _start(self, theirs: "socket", program: str, base_env: "Mapping[str, str]") -> None:
        compiler = os.path.realpath(which(self.compiler) or self.compiler)
        self._spawn([program, compiler, *self.options], {**base_env, FD_VARIABLE: str(SERVER_FD)},
                    theirs)  # fmt: skip
