# Our tools as the `DistLtoToolsInfo` tools of Buck2's upstream prelude
# (docs/upstream-buck2.md). Only Buck2 built-ins: this file is loaded from a user's
# repository, whichever prelude it has.
#
# The dist-lto sources are artifacts, compiled once to bytecode; every action that
# runs a tool gets the package as an input, so a remote worker needs nothing of ours
# installed, only the Python named in the user's `[dist_lto]` configuration.

# Copies the package and compiles its bytecode (unchecked hashes: the .pyc files do not
# depend on file times, so the output is reproducible).
_COMPILE_PACKAGE = """
import compileall, py_compile, shutil, sys
src, dst = sys.argv[1:3]
shutil.copytree(src, dst)
ok = compileall.compile_dir(dst, quiet=1, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
sys.exit(0 if ok else 1)
"""

DistLtoPackageInfo = provider(
    doc = "The dist-lto Python package, compiled.",
    fields = {
        # A directory holding `dist_lto/` and its bytecode.
        "pkg": provider_field(Artifact),
    },
)

def _package_impl(ctx: AnalysisContext) -> list[Provider]:
    tree = {}
    for src in ctx.attrs.srcs:
        rel = src.short_path
        i = rel.find("dist_lto/")
        if i < 0:
            fail("dist_lto_package: srcs must lie in a `dist_lto/` directory, got `{}`".format(rel))
        tree[rel[i:]] = src
    sources = ctx.actions.symlinked_dir("dist_lto_src", tree)
    pkg = ctx.actions.declare_output("dist_lto_pkg", dir = True)
    ctx.actions.run(
        cmd_args(ctx.attrs.python, "-S", "-E", "-c", _COMPILE_PACKAGE, sources, pkg.as_output()),
        category = "python_compile",
        identifier = "dist_lto",
    )
    return [DefaultInfo(default_output = pkg), DistLtoPackageInfo(pkg = pkg)]

dist_lto_package = rule(
    impl = _package_impl,
    attrs = {
        "srcs": attrs.list(attrs.source()),
        "python": attrs.string(doc = "a Python 3.11+ that compiles the bytecode"),
    },
)

# Upstream names its tools by role; each runs `dist-lto upstream ROLE`.
_ROLES = ["prepare", "plan", "opt", "copy"]

def _tool_impl(ctx: AnalysisContext) -> list[Provider]:
    if ctx.attrs.role not in _ROLES:
        fail("dist_lto_upstream_tool: role must be one of {}, got `{}`".format(_ROLES, ctx.attrs.role))
    pkg = ctx.attrs.package[DistLtoPackageInfo].pkg
    args = cmd_args(
        ctx.attrs.python,
        # The opt tool runs once per module: no site-packages, no PYTHON* variables.
        ["-S", "-E"] if ctx.attrs.role == "opt" else [],
        cmd_args(pkg, format = "{}/dist_lto/__main__.py"),
        "upstream",
        ctx.attrs.role,
    )
    return [DefaultInfo(), RunInfo(args = args)]

dist_lto_upstream_tool = rule(
    impl = _tool_impl,
    attrs = {
        "package": attrs.dep(providers = [DistLtoPackageInfo]),
        "python": attrs.string(doc = "prepare and plan: Python 3.11+ with orjson and libarchive-c; opt and copy: any Python 3.11+"),
        "role": attrs.string(),
    },
)
