# Our tools as the `DistLtoToolsInfo` tools of Buck2's upstream prelude
# (docs/upstream-buck2.md). Only Buck2 built-ins: this file is loaded from a user's
# repository, whichever prelude it has.
#
# The dist-lto sources are artifacts, compiled once to bytecode; every action that
# runs a tool gets the package as an input, so a remote worker needs nothing of ours
# installed, only the Python named in the user's `[dist_lto]` configuration.

# Shared with our own rules' toolchain (prelude/toolchain.bzl), through the `phases`
# link to prelude/dist_lto: in this repository `prelude/` is a cell of its own, which a
# load from this cell may not reach into.
load("//upstream/phases:package.bzl", "compile_dist_lto_package", "dist_lto_command")
load("//upstream/phases:tools.bzl", "dist_lto_runner")

DistLtoPackageInfo = provider(
    doc = "The dist-lto Python package, compiled.",
    fields = {
        # The dist-lto package as its actions run it (phases/package.bzl).
        "pkg": provider_field(Artifact),
    },
)

def _package_impl(ctx: AnalysisContext) -> list[Provider]:
    pkg = compile_dist_lto_package(ctx, ctx.attrs.python, ctx.attrs.srcs, "dist_lto_package: srcs")
    return [DefaultInfo(default_output = pkg), DistLtoPackageInfo(pkg = pkg)]

dist_lto_package = rule(
    impl = _package_impl,
    attrs = {
        "srcs": attrs.list(attrs.source()),
        "python": attrs.string(doc = "a Python 3.11+ that compiles the bytecode"),
    },
)

def _toolset_impl(ctx: AnalysisContext) -> list[Provider]:
    pkg = ctx.attrs.package[DistLtoPackageInfo].pkg
    runner = dist_lto_runner(ctx.attrs.python, ctx.attrs.opt_python, pkg, ctx.attrs.opt_worker, ctx.attrs.opt_reuse_dir, ctx.attrs.opt_compile_server, ctx.attrs.opt_batch_bytes, opt_queue = ctx.attrs.opt_queue, opt_jobs = ctx.attrs.opt_jobs, opt_run_ahead = ctx.attrs.opt_run_ahead)
    return [DefaultInfo(default_output = pkg), runner]

dist_lto_toolset = rule(
    impl = _toolset_impl,
    attrs = {
        "package": attrs.dep(providers = [DistLtoPackageInfo]),
        "python": attrs.string(doc = "Python 3.11+ with orjson and libarchive-c"),
        "opt_python": attrs.string(doc = "any Python 3.11+"),
        "opt_worker": attrs.bool(default = True, doc = "run local opt actions in a persistent worker"),
        "opt_reuse_dir": attrs.string(default = "", doc = "where the worker keeps backends' last objects to reuse after edits (\"\": never)"),
        "opt_compile_server": attrs.bool(default = True, doc = "run the worker's backends in compile servers where the compiler's headers allow (else forked)"),
        "opt_batch_bytes": attrs.int(default = 0, doc = "small modules share an opt action up to this many bytes (0: one action per module)"),
        "opt_queue": attrs.bool(default = False, doc = "send every opt action to the worker at once, without a slot; it compiles them largest first"),
        "opt_jobs": attrs.int(default = 0, doc = "backends the worker compiles at once when no request holds a slot (0: one per CPU)"),
        "opt_run_ahead": attrs.bool(default = True, doc = "let the worker use a finished compile's turn while its slot returns to Buck2"),
    },
)

# Upstream names its tools by role; each runs `dist-lto upstream ROLE`.
_ROLES = ["prepare", "plan", "opt", "copy"]

def _tool_impl(ctx: AnalysisContext) -> list[Provider]:
    if ctx.attrs.role not in _ROLES:
        fail("dist_lto_upstream_tool: role must be one of {}, got `{}`".format(_ROLES, ctx.attrs.role))
    pkg = ctx.attrs.package[DistLtoPackageInfo].pkg
    # The opt tool runs once per module: no site-packages, no PYTHON* variables.
    args = cmd_args(
        dist_lto_command(ctx.attrs.python, pkg, "upstream", fast = ctx.attrs.role == "opt"),
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
