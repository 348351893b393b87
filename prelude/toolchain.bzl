# The LLVM toolchain and the dist-lto tools, as one toolchain target (root//:llvm).
#
# Tool paths are plain strings from .buckconfig (`[llvm] bin`, `[dist_lto] python`,
# `[dist_lto] opt_python`, `[rust] rustc`): they name programs installed on every
# machine that runs actions (a remote worker's image included). The dist-lto Python
# package is different: its sources are artifacts, passed to every action that runs
# it, so a remote worker needs nothing of ours installed.

# The package action and the runner are shared with the tools for Buck2's upstream
# prelude (upstream/defs.bzl).
load("//dist_lto:package.bzl", "compile_dist_lto_package")
load("//dist_lto:tools.bzl", "DistLtoRunnerInfo", "DistLtoTools", "dist_lto_runner", "tools_from_runner")

LlvmToolchainInfo = provider(
    doc = "How to run clang, lld, llvm-ar, rustc and the dist-lto tools.",
    fields = {
        "clang": provider_field(str),
        "clangxx": provider_field(str),
        "ar": provider_field(str),
        "rustc": provider_field(str),
        # How to run the dist-lto tools (`[dist_lto] python`, `opt_python`, `opt_worker`,
        # `opt_reuse_dir`, `opt_compile_server`, `opt_batch_bytes`, `opt_queue`,
        # `opt_run_ahead`, with `[build] threads` as `opt_jobs`).
        "dist_lto": provider_field(DistLtoRunnerInfo),
        # Flags every compile gets, before the target's own.
        "compiler_flags": provider_field(list[str]),
        # Flags every link gets (the driver's, e.g. -fuse-ld=lld, -O2).
        "linker_flags": provider_field(list[str]),
    },
)

def _llvm_toolchain_impl(ctx: AnalysisContext) -> list[Provider]:
    bin = ctx.attrs.llvm_bin
    pkg = compile_dist_lto_package(ctx, ctx.attrs.opt_python, ctx.attrs.dist_lto_srcs, "llvm_toolchain: dist_lto_srcs")
    runner = dist_lto_runner(ctx.attrs.python, ctx.attrs.opt_python, pkg, ctx.attrs.opt_worker, ctx.attrs.opt_reuse_dir, ctx.attrs.opt_compile_server, ctx.attrs.opt_batch_bytes, opt_queue = ctx.attrs.opt_queue, opt_jobs = ctx.attrs.opt_jobs, opt_run_ahead = ctx.attrs.opt_run_ahead)
    return [
        DefaultInfo(default_output = pkg),
        LlvmToolchainInfo(
            clang = bin + "/clang",
            clangxx = bin + "/clang++",
            ar = bin + "/llvm-ar",
            rustc = ctx.attrs.rustc,
            dist_lto = runner,
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
        "opt_reuse_dir": attrs.string(default = ""),
        "opt_compile_server": attrs.bool(default = True),
        "opt_batch_bytes": attrs.int(default = 0),
        "opt_queue": attrs.bool(default = False),
        "opt_jobs": attrs.int(default = 0),
        "opt_run_ahead": attrs.bool(default = True),
    },
)

def dist_lto_tools(toolchain: LlvmToolchainInfo) -> DistLtoTools:
    """What the distributed link's phases (prelude/dist_lto/) run, from this toolchain."""
    return tools_from_runner(toolchain.dist_lto, toolchain.clang)

TOOLCHAIN = "root//:llvm"
"""The toolchain target every rule uses (a private attribute default)."""
