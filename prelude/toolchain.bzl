# The LLVM toolchain and the dist-lto tools, as one toolchain target (root//:llvm).
#
# Tool paths are plain strings from .buckconfig (`[llvm] bin`, `[dist_lto] python`,
# `[dist_lto] opt_python`, `[rust] rustc`): they name programs installed on every
# machine that runs actions (a remote worker's image included). The dist-lto Python
# package is different: its sources are artifacts, passed to every action that runs
# it, so a remote worker needs nothing of ours installed.

# The package action and `dist_lto_command` are shared with the tools for Buck2's
# upstream prelude (upstream/defs.bzl).
load("//dist_lto:package.bzl", "compile_dist_lto_package", _dist_lto_command = "dist_lto_command")
load("//dist_lto:tools.bzl", "DistLtoTools")

dist_lto_command = _dist_lto_command

LlvmToolchainInfo = provider(
    doc = "How to run clang, lld, llvm-ar, rustc and the dist-lto tools.",
    fields = {
        "clang": provider_field(str),
        "clangxx": provider_field(str),
        "ar": provider_field(str),
        "rustc": provider_field(str),
        # Python 3.11+ with orjson and libarchive-c: runs `prepare` and `plan`.
        "python": provider_field(str),
        # Python 3.11+, standard library only: runs `opt` with -S (fast start-up).
        "opt_python": provider_field(str),
        # A directory holding the `dist_lto` package and its compiled bytecode.
        "dist_lto_pkg": provider_field(Artifact),
        # The persistent worker that runs opt actions executed locally (`dist-lto
        # opt-worker`, started with `python`, which needs grpcio); None: every opt action
        # starts `dist-lto opt` (`[dist_lto] opt_worker = false`). See `opt_executable`.
        "opt_worker": provider_field(WorkerInfo | None, default = None),
        # Flags every compile gets, before the target's own.
        "compiler_flags": provider_field(list[str]),
        # Flags every link gets (the driver's, e.g. -fuse-ld=lld, -O2).
        "linker_flags": provider_field(list[str]),
    },
)

def _llvm_toolchain_impl(ctx: AnalysisContext) -> list[Provider]:
    bin = ctx.attrs.llvm_bin
    pkg = compile_dist_lto_package(ctx, ctx.attrs.opt_python, ctx.attrs.dist_lto_srcs, "llvm_toolchain: dist_lto_srcs")

    # Made here, once: every action naming this WorkerInfo shares one worker process. No
    # concurrency of its own: Buck2 sends it as many requests as it has local slots.
    opt_worker = WorkerInfo(exe = dist_lto_command(ctx.attrs.python, pkg, "opt-worker")) if ctx.attrs.opt_worker else None
    return [
        DefaultInfo(default_output = pkg),
        LlvmToolchainInfo(
            clang = bin + "/clang",
            clangxx = bin + "/clang++",
            ar = bin + "/llvm-ar",
            rustc = ctx.attrs.rustc,
            python = ctx.attrs.python,
            opt_python = ctx.attrs.opt_python,
            dist_lto_pkg = pkg,
            opt_worker = opt_worker,
            compiler_flags = ctx.attrs.compiler_flags,
            linker_flags = ctx.attrs.linker_flags,
        ),
    ]

llvm_toolchain = rule(
    impl = _llvm_toolchain_impl,
    is_toolchain_rule = True,
    attrs = {
        "llvm_bin": attrs.string(default = "/usr/lib/llvm-22/bin"),
        "rustc": attrs.string(default = "rustc"),
        "python": attrs.string(default = "python3"),
        "opt_python": attrs.string(default = "/usr/bin/python3"),
        "dist_lto_srcs": attrs.list(attrs.source()),
        "compiler_flags": attrs.list(attrs.string(), default = ["-O2"]),
        "linker_flags": attrs.list(attrs.string(), default = ["-fuse-ld=lld", "-O2"]),
        "opt_worker": attrs.bool(default = True),
    },
)

def dist_lto_tools(toolchain: LlvmToolchainInfo) -> DistLtoTools:
    """What the distributed link's phases (prelude/dist_lto/) run, from this toolchain."""
    return DistLtoTools(
        python = toolchain.python,
        opt_python = toolchain.opt_python,
        dist_lto_pkg = toolchain.dist_lto_pkg,
        opt_worker = toolchain.opt_worker,
        clang = toolchain.clang,
    )

TOOLCHAIN = "root//:llvm"
"""The toolchain target every rule uses (a private attribute default)."""
