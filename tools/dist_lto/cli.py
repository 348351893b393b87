"""The `dist-lto` command: a table of subcommands, each imported only when it runs.

Importing lazily keeps `dist-lto opt` (one run per module) from loading the
planner, orjson or libarchive. Each subcommand module provides
`main(argv: list[str]) -> int` and an argparse `--help`; it raises
`DistLtoError` for failures, which are printed here as one line with their
exit status and never as a traceback.

`scan` reads the usual command line of `opt` and `distribute` without argparse: they
run once per backend or per link, where importing argparse (with what it pulls in) is
a measurable share of their start-up (docs/benchmarks.md). It lives here, in a module
both already load, because every further module is paid once per backend action.
"""

import os
import sys

from dist_lto import TYPE_CHECKING
from dist_lto.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, DistLtoError

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from typing import TypeVar

    T = TypeVar("T")

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "prepare": ("commands.prepare", "turn an archive into a directory of objects and a manifest"),
    "plan": ("commands.plan", "run or replay LLD's index step and write the optimisation plans"),
    "inspect": ("commands.inspect", "summarise a planned link; draw its import graph"),
    "opt": ("commands.opt", "run one ThinLTO backend strictly (a failure never exits 0)"),
    "opt-worker": ("commands.opt_worker", "serve opt actions as a Buck2 persistent worker"),
    "distribute": ("commands.distribute", "parallel, strict, caching distributor for LLD's DTLTO"),
    "link": (
        "commands.link",
        "run a planned link without Buck2: its backends, then its final link",
    ),
    "cache": ("commands.cache", "the result cache: stats, list, show, prune, clear"),
    "upstream": ("upstream", "the tools Buck2's upstream prelude runs, by role"),
}
"""Subcommand name -> (module under `dist_lto`, one-line summary), in the order `--help`
lists them. Commands parse argv and orchestrate; the work lives in `formats`, `llvm`,
`archive`, `process`, `planning` and `distribute`."""

SUPERVISED = {("plan",), ("link",), ("distribute",), ("upstream", "plan")}
"""The commands whose children are stopped with them however they end: stop signals,
their parent's death, their own SIGKILL (`process/guard.py`)."""

_USAGE = "usage: dist-lto [-h] [-V] {%s} ..."


def scan(
    argv: list[str],
    target: object,
    values: dict[str, str],
    flags: dict[str, str],
    *,
    rest: str | None = None,
    repeated: "dict[str, list[str]] | None" = None,
) -> list[str] | None:
    """Set `target`'s attributes from `argv`; return the positional arguments.

    Takes the forms a build system or LLD writes; None for anything else, and the
    command's argparse parser decides (so `--help` and usage errors are argparse's;
    each command's property test pins that the two agree).

    `values` maps an option taking a value to the attribute it sets: `--name=VALUE` or
    `--name VALUE` (a short `-n` only as `-n VALUE`), never a VALUE that starts with
    `-`. `flags` maps a flag to the attribute set to True. With `rest`, everything
    after `--` is set, as a list, to that attribute. `repeated` maps an option that may
    be given more than once to the list its values are appended to, in order.
    """
    positional: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--" and rest is not None:
            setattr(target, rest, argv[i:])
            break
        name, eq, value = arg.partition("=")
        listed = repeated.get(name) if repeated else None
        if (name in values or listed is not None) and (not eq or name.startswith("--")):
            if not eq:
                if i == len(argv) or argv[i].startswith("-"):
                    return None
                value = argv[i]
                i += 1
            elif value == "--":
                return None  # argparse drops a `--` even there: let it say what it means
            if listed is not None:
                listed.append(value)
            else:
                setattr(target, values[name], value)
        elif arg in flags:
            setattr(target, flags[arg], True)
        elif arg.startswith("-"):
            return None
        else:
            positional.append(arg)
    return positional


def parse(
    argv: list[str],
    fast: "Callable[[list[str]], T | None]",
    build_parser: "Callable[[], argparse.ArgumentParser]",
    options: "type[T]",
) -> "T":
    """`fast(argv)` (built on `scan`), or, when it declines, what argparse makes of `argv`
    copied into a new `options` (a class whose `__slots__` name its parser's dests)."""
    opts = fast(argv)
    if opts is not None:
        return opts
    namespace = build_parser().parse_args(argv)
    opts = options()
    for name in options.__slots__:  # type: ignore[attr-defined]
        setattr(opts, name, getattr(namespace, name))
    return opts


def argument_parser(
    prog: str, usage: str, description: str, epilog: str
) -> "argparse.ArgumentParser":
    """An argparse parser for a command that `parse`s its usual command line by hand;
    argparse is imported only here, for `--help` and usage errors."""
    import argparse

    return argparse.ArgumentParser(
        prog=prog,
        usage=usage,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _help() -> str:
    width = max(len(name) for name in SUBCOMMANDS)
    lines = [
        _USAGE % ",".join(SUBCOMMANDS),
        "",
        "Distributed ThinLTO for Clang/LLD 22: split a ThinLTO link into an index step,",
        "one backend (opt) action per module, and a final link.",
        "",
        "subcommands:",
        *(f"  {name:<{width}}  {summary}" for name, (_, summary) in SUBCOMMANDS.items()),
        "",
        "Run `dist-lto SUBCOMMAND --help` for a subcommand's options;"
        " `dist-lto --version` prints the version.",
        "Exit status: 0 success, 1 internal failure, 2 bad input;"
        " a failing tool's status passes through.",
    ]
    return "\n".join(lines)


_REMOTE_MODULES = ("grpc", "google", "buildgrid")
"""What `dist-lto[remote]` installs: gRPC, protobuf and the REAPI stubs."""
_BASE_MODULES = ("orjson", "libarchive")
"""The package's own dependencies (orjson, libarchive-c)."""


def missing_dependency(module: str) -> str | None:
    """The one line that says how to install a missing third-party `module`, or None when
    it is not one of ours to install (an internal error)."""
    top = module.partition(".")[0]
    python = sys.executable or "this Python"
    if top in _REMOTE_MODULES:
        return (
            f"no module named {module!r}: remote execution needs the remote extra; install it"
            f" into the Python that runs dist-lto ({python}): pip install 'dist-lto[remote]'"
        )
    if top in _BASE_MODULES:
        return (
            f"no module named {module!r}: {python} lacks dist-lto's dependencies (orjson,"
            " libarchive-c); install them there (pip install dist-lto), or, under Buck2,"
            " name a Python that has them in .buckconfig's [dist_lto] python"
        )
    return None


def run(name: str, argv: list[str]) -> int:
    """Run subcommand `name`, turning every failure into one line on stderr and a status."""
    module_name = "dist_lto." + SUBCOMMANDS[name][0]
    try:
        module = __import__(module_name, fromlist=["main"])
        if (name, *argv[:1]) in SUPERVISED or (name,) in SUPERVISED:
            from dist_lto.process.guard import supervised

            with supervised():
                return module.main(argv)
        return module.main(argv)
    except DistLtoError as err:
        sys.stderr.write(error_report(name, err))
        return err.status
    except KeyboardInterrupt:
        return 130
    except ModuleNotFoundError as err:
        fix = missing_dependency(err.name or "")
        if fix is None or os.environ.get("DIST_LTO_DEBUG"):
            raise
        print(f"dist-lto {name}: error: {fix}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as err:
        if os.environ.get("DIST_LTO_DEBUG"):
            raise
        sys.stderr.write(internal_error_report(name, err))
        return EXIT_INTERNAL


def error_report(name: str, err: DistLtoError) -> str:
    """What subcommand `name` prints for `err`: its one line, then the detail (a tool's
    stderr). Also what the opt worker answers, so both ways print the same."""
    text = f"dist-lto {name}: error: {err.message}\n"
    if err.detail:
        text += err.detail if err.detail.endswith("\n") else err.detail + "\n"
    return text


def internal_error_report(name: str, err: Exception) -> str:
    return (
        f"dist-lto {name}: internal error: {type(err).__name__}: {err}"
        " (set DIST_LTO_DEBUG=1 for a traceback)\n"
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-V", "--version"):
        from dist_lto import __version__

        print(f"dist-lto {__version__}")
        return 0
    if not args or args[0] in ("-h", "--help"):
        print(_help())
        return 0 if args else 2
    name = args[0]
    if name not in SUBCOMMANDS:
        print(_USAGE % ",".join(SUBCOMMANDS), file=sys.stderr)
        print(f"dist-lto: error: unknown subcommand {name!r}", file=sys.stderr)
        return 2
    return run(name, args[1:])
