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
        # A directory holding the `dist_lto` package and its compiled bytecode.
        "dist_lto_pkg": provider_field(Artifact),
        # Flags every compile gets, before the target's own.
        "compiler_flags": provider_field(list[str]),
        # Flags every link gets (the driver's, e.g. -fuse-ld=lld, -O2).
        "linker_flags": provider_field(list[str]),
        # Tests only (`[dist_lto] test_drop_import`): the opt action whose identifier
        # ends with this loses its first import from its inputs, so a test can show
        # that remote execution fails without it. Empty: no action is touched.
        "test_drop_import": provider_field(str),
    },
)

def dist_lto_command(python: str, pkg: Artifact, subcommand: str, fast: bool = False):
    """The command line that runs `dist-lto SUBCOMMAND` from the package directory.

    Args:
        python: the interpreter (the real binary, never a shim: docs/opt.md).
        pkg: the directory holding the `dist_lto` package and its bytecode.
        subcommand: `prepare`, `plan` or `opt`.
        fast: start with -S -E (no site-packages, no PYTHON* variables): only for the
            standard-library-only `opt`, which runs once per module.
    """
    return cmd_args(
        python,
        ["-S", "-E"] if fast else [],
        cmd_args(pkg, format = "{}/dist_lto/__main__.py"),
        subcommand,
    )

# Copies the package and compiles its bytecode (docs/opt.md: without __pycache__ every
# opt action would compile the modules again). Unchecked hashes: the .pyc files do not
# depend on file times, so the output is reproducible.
_COMPILE_PACKAGE = """
import compileall, py_compile, shutil, sys
src, dst = sys.argv[1:3]
shutil.copytree(src, dst)
ok = compileall.compile_dir(dst, quiet=1, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
sys.exit(0 if ok else 1)
"""

def _llvm_toolchain_impl(ctx: AnalysisContext) -> list[Provider]:
    bin = ctx.attrs.llvm_bin
    tree = {}
    for src in ctx.attrs.dist_lto_srcs:
        rel = src.short_path
        i = rel.find("dist_lto/")
        if i < 0:
            fail("llvm_toolchain: dist_lto_srcs must lie in a `dist_lto/` directory, got `{}`".format(rel))
        tree[rel[i:]] = src
    sources = ctx.actions.symlinked_dir("dist_lto_src", tree)
    pkg = ctx.actions.declare_output("dist_lto_pkg", dir = True)
    ctx.actions.run(
        cmd_args(ctx.attrs.opt_python, "-S", "-E", "-c", _COMPILE_PACKAGE, sources, pkg.as_output()),
        category = "python_compile",
        identifier = "dist_lto",
    )
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
            test_drop_import = ctx.attrs.test_drop_import,
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
        "test_drop_import": attrs.string(default = ""),
    },
)

TOOLCHAIN = "root//:llvm"
"""The toolchain target every rule uses (a private attribute default)."""
