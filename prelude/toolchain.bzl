# The LLVM toolchain and the dist-lto tools, as one toolchain target (root//:llvm).
#
# Tool paths are plain strings from .buckconfig (`[llvm] bin`, `[dist_lto] python`,
# `[dist_lto] opt_python`, `[rust] rustc`): they name programs installed on every
# machine that runs actions (a remote worker's image included). The dist-lto Python
# package is different: its sources are artifacts, passed to every action that runs
# it, so a remote worker needs nothing of ours installed.

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
        # A directory holding the `dist_lto` package (a symlink tree of its sources).
        "dist_lto_pkg": provider_field(Artifact),
        # Flags every compile gets, before the target's own.
        "compiler_flags": provider_field(list[str]),
        # Flags every link gets (the driver's, e.g. -fuse-ld=lld, -O2).
        "linker_flags": provider_field(list[str]),
    },
)

def dist_lto_command(python: str, pkg: Artifact, subcommand: str, fast: bool = False):
    """The command line that runs `dist-lto SUBCOMMAND` from the package sources.

    Args:
        python: the interpreter.
        pkg: the directory holding the `dist_lto` package.
        subcommand: `prepare`, `plan` or `opt`.
        fast: start with -S (no site-packages): only for standard-library-only tools.
    """
    return cmd_args(python, ["-S", "-E"] if fast else [], cmd_args(pkg, format = "{}/dist_lto"), subcommand)

def _llvm_toolchain_impl(ctx: AnalysisContext) -> list[Provider]:
    bin = ctx.attrs.llvm_bin
    srcs = ctx.attrs.dist_lto_srcs
    tree = {}
    for src in srcs:
        rel = src.short_path
        marker = "dist_lto/"
        i = rel.find(marker)
        if i < 0:
            fail("llvm_toolchain: dist_lto_srcs must lie in a `dist_lto/` directory, got `{}`".format(rel))
        tree[rel[i:]] = src
    pkg = ctx.actions.symlinked_dir("dist_lto_pkg", tree)
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
    },
)

TOOLCHAIN = "root//:llvm"
"""The toolchain target every rule uses (a private attribute default)."""
