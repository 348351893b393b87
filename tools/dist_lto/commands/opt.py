"""`dist-lto opt`: one ThinLTO backend compile that never lets a failure through (or a
batch of them, one after another: a build system's action for several small modules).

It runs once per bitcode module of a link, so it is built to cost almost
nothing over clang itself: standard library only, no `argparse` on the normal
path (a hand-written parser handles the fixed grammar; argparse is loaded only
for `--help` and for anything unusual, so its messages stay the reference), and
started as `python3 -S -E path/to/dist_lto/__main__.py opt ...` (see docs/opt.md).
"""

import sys

from dist_lto import TYPE_CHECKING
from dist_lto.cli import argument_parser
from dist_lto.fsutil import write_output
from dist_lto.opt_request import (
    MODULE_OPTIONS,
    Options,
    batched,
    describe,
    execute,
    misfits,
    parse_fast,
)
from dist_lto.process.children import stop_with_parent

if TYPE_CHECKING:
    import argparse

PROG = "dist-lto opt"
USAGE = """\
dist-lto opt [-h] --input M.o --index M.thinlto.bc --out M.opt.o [--dwo M.opt.dwo]
                    [--input ... --index ... --out ... [--dwo ...]]...
                    [--args LINK_FLAGS_FILE] [--split-dwarf MODE]
                    [--print-command] [--no-lld-defaults] [--unweighted]
                    -- CLANG [EXTRA FLAGS...]
       dist-lto opt --ready STAMP -- CLANG"""
DESCRIPTION = """\
Run one ThinLTO backend: CLANG -c -x ir INPUT -fthinlto-index=INDEX <backend flags>
[EXTRA FLAGS] -o OUT, where the backend flags are translated from the link's flags
(--args) so that the code equals LLD's in-process ThinLTO. Fails (never exits 0) when
INPUT is not the primary module of INDEX as spelled, when clang fails (its status; a
signal N gives 128+N), or when clang exits 0 without a complete ELF object. OUT (and
--dwo) are written under temporary names and renamed only after the checks. An INPUT
that is not LLVM bitcode is passed to OUT unchanged. Given --input, --index and --out
(and --dwo) several times, it runs one backend per --input, the k-th of each option
together, in order, and stops at the first that fails."""

EPILOG = """\
The link flags file holds one argument per line, verbatim, as given to the clang
driver for the link (-O3, -Wl,--lto-O2, -Xlinker, -fPIC, -march=..., -lm ...).
`--ready STAMP` runs no backend and writes STAMP empty: sent to the opt worker before
the first backend, it starts the worker and a server of CLANG while the compiles run.
Exit status: 0 success; 2 bad input (flags, paths, an index that does not name
INPUT); clang's own status when it fails; 128+N when it dies by signal N; 1 when
clang exits 0 but its output is missing, empty or not an ELF object.
Start it as `python3 -S -E path/to/dist_lto/__main__.py opt ...`: see docs/opt.md."""


def build_parser() -> "argparse.ArgumentParser":
    """The argparse parser: the reference for `--help` and for error messages."""
    parser = argument_parser(PROG, USAGE, DESCRIPTION, EPILOG)
    parser.add_argument(
        "--input",
        action="append",
        metavar="M.o",
        help="the module: bitcode, spelled exactly as the index step saw it",
    )
    parser.add_argument(
        "--index",
        action="append",
        metavar="M.thinlto.bc",
        help="its individual index from the index step",
    )
    parser.add_argument("--out", action="append", metavar="M.opt.o", help="the native object")
    parser.add_argument(
        "--args",
        metavar="LINK_FLAGS_FILE",
        help="the link's flags, one argument per line (default: none)",
    )
    parser.add_argument(
        "--dwo",
        action="append",
        metavar="M.opt.dwo",
        help="write split DWARF here (created empty when there is nothing to"
        " split); its name is what the object's skeleton unit records",
    )
    parser.add_argument(
        "--split-dwarf",
        metavar="MODE",
        help="`single`: keep split DWARF in the object, whose skeleton unit names --out"
        " (clang's -gsplit-dwarf=single); `split`: write it to --dwo, which it needs (the"
        " mode --dwo implies)",
    )
    parser.add_argument(
        "--print-command",
        action="store_true",
        help="print the backend command (with the final -o) and run nothing",
    )
    parser.add_argument(
        "--no-lld-defaults",
        action="store_true",
        help="do not add -ffunction-sections -fdata-sections -faddrsig, which"
        " LLD's in-process ThinLTO always uses (the PIC flag stays)",
    )
    parser.add_argument(
        "--unweighted",
        action="store_true",
        help="the action holds none of the build's local slots (Buck2's weight 0): the opt"
        " worker compiles it before its other requests, in one of their slots; a command"
        " runs it as usual",
    )
    parser.add_argument(
        "--ready",
        metavar="STAMP",
        help="run no backend; write STAMP empty (through the opt worker: start it and a"
        " server of CLANG's backends before the first backend needs them)",
    )
    parser.add_argument(
        "--link-driver",
        metavar="FILE",
        help="with --ready: a link's driver command, one argument per line (through the opt"
        " worker: find the linker's line behind it before the link's plan needs it)",
    )
    parser.add_argument(
        "command",
        nargs="+",
        metavar="CLANG [EXTRA FLAGS...]",
        help="after --: the compiler, and flags that go after the translated ones",
    )
    return parser  # fmt: skip


def from_namespace(namespace: "argparse.Namespace") -> Options | None:
    """What argparse parsed, as the request (None: the files of a batch do not pair up)."""
    shared = Options()
    for name in Options.__slots__:
        if name not in MODULE_OPTIONS.values() and name != "more":
            setattr(shared, name, getattr(namespace, name))
    return batched(shared, *(getattr(namespace, name) or [] for name in MODULE_OPTIONS.values()))


def parse_args(argv: list[str]) -> Options:
    opts = parse_fast(argv)
    if opts is None:
        parser = build_parser()
        batch = from_namespace(parser.parse_args(argv))
        if batch is None:
            parser.error("give each --input its own --index and --out (and --dwo, if any has one)")
        opts = batch
    missing = misfits(opts)
    if missing and opts.ready is None:
        build_parser().error(f"the following arguments are required: {', '.join(missing)}")
    if missing:
        build_parser().error(f"argument --ready: not allowed with argument {missing[0]}")
    if opts.link_driver is not None and opts.ready is None:
        build_parser().error("argument --link-driver: only with --ready")
    return opts


def main(argv: list[str]) -> int:
    opts = parse_args(argv)
    if opts.ready is not None:
        write_output(opts.ready, b"")
        return 0
    if opts.print_command:
        print("\n".join(describe(backend) for backend in opts.backends()))
        return 0
    for backend in opts.backends():
        warnings = execute(backend, before_run=stop_with_parent)
        if warnings:
            sys.stderr.buffer.write(warnings)
    return 0
