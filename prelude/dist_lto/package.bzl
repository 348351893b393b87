# The dist-lto package as a Buck2 artifact, and the command that runs it: shared by our
# rules' toolchain (toolchain.bzl) and the tools for Buck2's upstream prelude
# (upstream/defs.bzl) and the phases of this directory. Only Buck2
# built-ins: a user's repository loads it from the `dist_lto` cell, whichever prelude
# it has.
#
# The sources are artifacts; the modules go into one zip, those our actions import
# compiled once to bytecode (without it every opt action would compile them again:
# docs/opt.md), or taken from the user's cache when a build in another buck-out made
# the same zip from the same sources (dist_lto/bytecode.py);
# every action that runs a tool gets the package as an input, so a remote worker needs
# nothing of ours installed.

def compile_dist_lto_package(ctx: AnalysisContext, python: str, srcs: list[Artifact], attr: str) -> Artifact:
    """One `python_compile` action: a directory holding `dist_lto.zip` (the modules, with
    the bytecode of those our actions import) and, beside it, `dist_lto/__main__.py` and
    the servers' C sources (`dist_lto/bytecode.py`, run from its source).

    Args:
        ctx: the analysis context of the rule that owns the package.
        python: a Python 3.11+ (started with -S -E) that compiles the bytecode.
        srcs: the package's sources, each somewhere below a `dist_lto/` directory.
        attr: `rule: attribute` naming where `srcs` came from, for the error message.
    """
    pairs = []
    builder = None
    for src in srcs:
        rel = src.short_path
        i = rel.find("dist_lto/")
        if i < 0 or "=" in rel:
            fail("{} must lie in a `dist_lto/` directory (no `=` in its path), got `{}`".format(attr, rel))
        pairs.append(cmd_args(src, format = rel[i:] + "={}"))
        if rel[i:] == "dist_lto/bytecode.py":
            builder = src
    if builder == None:
        fail("{} must hold `dist_lto/bytecode.py`".format(attr))
    pkg = ctx.actions.declare_output("dist_lto_pkg", dir = True)
    ctx.actions.run(
        cmd_args(python, "-S", "-E", builder, pkg.as_output(), pairs),
        category = "python_compile",
        identifier = "dist_lto",
        # Every dist-lto action needs it, and Buck2 hands out local slots in an order of
        # its own: queued behind a build's compiles it would hold up the first link
        # action by its own half second. No slot, so it runs as the build starts.
        weight_percentage = 0,
    )
    return pkg

def dist_lto_command(python: str, pkg: Artifact, subcommand: str, fast: bool = False) -> cmd_args:
    """The command line that runs `dist-lto SUBCOMMAND` from the package directory.

    Args:
        python: the interpreter (the real binary, never a shim: docs/opt.md).
        pkg: the directory `compile_dist_lto_package` made.
        subcommand: `prepare`, `plan`, `opt` or `upstream`; "": none (the arguments
            that follow name it).
        fast: start with -S -E (no site-packages, no PYTHON* variables): only for the
            standard-library-only tools that run once per module.
    """
    return cmd_args(
        python,
        ["-S", "-E"] if fast else [],
        cmd_args(pkg, format = "{}/dist_lto/__main__.py"),
        [subcommand] if subcommand else [],
    )
