"""`dist-lto opt`: one ThinLTO backend compile that never lets a failure through.

It runs once per bitcode module of a link, so it is built to cost almost
nothing over clang itself: standard library only, no `argparse` on the normal
path (a hand-written parser handles the fixed grammar; argparse is loaded only
for `--help` and for anything unusual, so its messages stay the reference), and
started as `python3 -S -E path/to/dist_lto/__main__.py opt ...` (see docs/opt.md).
"""

import os
import sys

from dist_lto import TYPE_CHECKING
from dist_lto.backend import (
    check_primary,
    pass_through,
    read_head,
    run_backend,
    split_dwarf_flags,
    split_dwarf_in_object_flags,
    target_flags,
)
from dist_lto.cli import argument_parser, parse, scan
from dist_lto.errors import BadInput
from dist_lto.fsutil import write_output
from dist_lto.llvm.bitcode import is_bitcode
from dist_lto.llvm.flags import read_args_file, translate
from dist_lto.process.children import stop_with_parent

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from dist_lto.backend import Runner
    from dist_lto.worker.reuse import Backend

PROG = "dist-lto opt"
USAGE = """\
dist-lto opt [-h] --input M.o --index M.thinlto.bc --out M.opt.o
                    [--args LINK_FLAGS_FILE] [--dwo M.opt.dwo] [--split-dwarf MODE]
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
that is not LLVM bitcode is passed to OUT unchanged."""

EPILOG = """\
The link flags file holds one argument per line, verbatim, as given to the clang
driver for the link (-O3, -Wl,--lto-O2, -Xlinker, -fPIC, -march=..., -lm ...).
`--ready STAMP` runs no backend and writes STAMP empty: sent to the opt worker before
the first backend, it starts the worker and a server of CLANG while the compiles run.
Exit status: 0 success; 2 bad input (flags, paths, an index that does not name
INPUT); clang's own status when it fails; 128+N when it dies by signal N; 1 when
clang exits 0 but its output is missing, empty or not an ELF object.
Start it as `python3 -S -E path/to/dist_lto/__main__.py opt ...`: see docs/opt.md."""

_VALUE_OPTIONS = {"--input": "input", "--index": "index", "--out": "out", "--args": "args",
                  "--dwo": "dwo", "--split-dwarf": "split_dwarf", "--ready": "ready"}  # fmt: skip
_SPLIT_DWARF_MODES = ("single", "split")
_FLAG_OPTIONS = {"--print-command": "print_command", "--no-lld-defaults": "no_lld_defaults",
                 "--unweighted": "unweighted"}  # fmt: skip


class Options:
    """The parsed command line."""

    __slots__ = ("args", "command", "dwo", "index", "input", "no_lld_defaults", "out",
                 "print_command", "ready", "split_dwarf", "unweighted")  # fmt: skip

    def __init__(self) -> None:
        self.input = ""
        self.index = ""
        self.out = ""
        self.args: str | None = None
        self.dwo: str | None = None
        self.split_dwarf: str | None = None
        """`single` or `split`; None: `split` with --dwo, else no split DWARF."""
        self.print_command = False
        self.no_lld_defaults = False
        self.ready: str | None = None
        """`--ready STAMP`: no backend, STAMP written empty."""
        self.unweighted = False
        """The action holds no local slot: the opt worker compiles it first, in a slot
        another request brought (`worker/slots.py`); `dist-lto opt` itself ignores it."""
        self.command: list[str] = []
        """CLANG and the extra flags after `--`."""


def _parse_fast(argv: list[str]) -> Options | None:
    """The common case, without argparse; None sends anything unusual to argparse."""
    opts = Options()
    positional = scan(argv, opts, _VALUE_OPTIONS, _FLAG_OPTIONS, rest="command")
    if positional != [] or not opts.command or _misfits(opts):
        return None
    return opts


def _misfits(opts: Options) -> list[str]:
    """What the options lack or have too much of: a backend needs its module, index and
    output; `--ready` takes only the compiler."""
    if opts.ready is None:
        return [name for name, value in (("--input", opts.input), ("--index", opts.index),
                                         ("--out", opts.out)) if not value]  # fmt: skip
    given = (("--input", opts.input), ("--index", opts.index), ("--out", opts.out),
             ("--args", opts.args), ("--dwo", opts.dwo), ("--split-dwarf", opts.split_dwarf),
             ("--print-command", opts.print_command),
             ("--unweighted", opts.unweighted))  # fmt: skip
    return [name for name, value in given if value]


def build_parser() -> "argparse.ArgumentParser":
    """The argparse parser: the reference for `--help` and for error messages."""
    parser = argument_parser(PROG, USAGE, DESCRIPTION, EPILOG)
    parser.add_argument(
        "--input",
        default="",
        metavar="M.o",
        help="the module: bitcode, spelled exactly as the index step saw it",
    )
    parser.add_argument(
        "--index",
        default="",
        metavar="M.thinlto.bc",
        help="its individual index from the index step",
    )
    parser.add_argument("--out", default="", metavar="M.opt.o", help="the native object")
    parser.add_argument(
        "--args",
        metavar="LINK_FLAGS_FILE",
        help="the link's flags, one argument per line (default: none)",
    )
    parser.add_argument(
        "--dwo",
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
        "command",
        nargs="+",
        metavar="CLANG [EXTRA FLAGS...]",
        help="after --: the compiler, and flags that go after the translated ones",
    )
    return parser  # fmt: skip


def parse_args(argv: list[str]) -> Options:
    opts = parse(argv, _parse_fast, build_parser, Options)
    misfits = _misfits(opts)
    if misfits and opts.ready is None:
        build_parser().error(f"the following arguments are required: {', '.join(misfits)}")
    if misfits:
        build_parser().error(f"argument --ready: not allowed with argument {misfits[0]}")
    return opts


def split_dwarf_mode(opts: Options) -> str | None:
    """The split-DWARF mode the options ask for (None: none), checked."""
    mode = opts.split_dwarf or ("split" if opts.dwo else None)
    if mode is not None and mode not in _SPLIT_DWARF_MODES:
        raise BadInput(f"--split-dwarf={mode}: expected one of {', '.join(_SPLIT_DWARF_MODES)}")
    if (mode == "split") != bool(opts.dwo):
        raise BadInput("--split-dwarf=split and --dwo go together")
    return mode


def backend_command(opts: Options, mode: str | None) -> list[str]:
    """CLANG -c -x ir INPUT -fthinlto-index=INDEX <translated flags> <extra flags>, no -o
    (with split DWARF kept in the object, `mode` single, the flags naming OUT in its
    skeleton)."""
    link_flags = read_args_file(opts.args) if opts.args else []
    backend = translate(link_flags, lld_defaults=not opts.no_lld_defaults, origin=opts.args or "")
    if backend.split_dwarf and not mode:
        raise BadInput(
            f"{opts.args}: the link asks for split DWARF (-gsplit-dwarf or dwo_dir); pass --dwo"
            " or --split-dwarf=single"
        )
    clang, *extra = opts.command
    if not mode and any(flag.startswith("-gsplit-dwarf") for flag in extra):
        raise BadInput("-gsplit-dwarf in the extra flags needs --dwo (clang would name the .dwo"
                       " after a temporary file)")  # fmt: skip
    in_object = split_dwarf_in_object_flags(opts.out) if mode == "single" else []
    model = []
    if backend.pic is None:  # -r: the module's own model, as in LLD (only then imported)
        from dist_lto.llvm.module_flags import module_relocation_flag, says_relocation_model

        if not says_relocation_model(backend.flags + extra):
            model = [module_relocation_flag(opts.input)]
    return [clang, "-c", "-x", "ir", opts.input, f"-fthinlto-index={opts.index}",
            *backend.flags, *model, *target_flags(opts.input), *extra, *in_object]  # fmt: skip


def check_outputs(opts: Options) -> None:
    """Refuse an output that names an input (or the other output): outputs are removed
    before clang runs, so the input would be lost. Compared by resolved path, not by
    inode: an earlier pass-through leaves `--out` a hard link of `--input`."""
    inputs = [("--input", opts.input), ("--index", opts.index), ("--args", opts.args)]
    outputs = [("--out", opts.out), ("--dwo", opts.dwo)]
    seen = [(name, path, os.path.realpath(path)) for name, path in inputs if path]
    for name, path in outputs:
        if not path:
            continue
        real = os.path.realpath(path)
        for other_name, other, other_real in seen:
            if real == other_real:
                raise BadInput(f"{path}: {name} names the same file as {other_name} {other!r}")
        seen.append((name, path, real))


def main(argv: list[str]) -> int:
    opts = parse_args(argv)
    if opts.ready is not None:
        write_output(opts.ready, b"")
        return 0
    if opts.print_command:
        print(describe(opts))
        return 0
    warnings = execute(opts, before_run=stop_with_parent)
    if warnings:
        sys.stderr.buffer.write(warnings)
    return 0


def describe(opts: Options) -> str:
    """What `--print-command` prints: the backend command, or what happens to a
    non-bitcode input; the same checks as `execute` before it."""
    check_outputs(opts)
    mode = split_dwarf_mode(opts)
    if not is_bitcode(read_head(opts.input, "module", 4)):
        return f"# {opts.input} is not LLVM bitcode: it is passed to {opts.out} unchanged"
    return _quote_command(backend_command(opts, mode) + _output_flags(opts))


def execute(
    opts: Options,
    *,
    runner: "Runner | None" = None,
    on_start: "Callable[[int], None] | None" = None,
    before_run: "Callable[[], None] | None" = None,
    reuse: "Callable[[list[str]], Backend | None] | None" = None,
) -> bytes:
    """Run the backend `opts` ask for (not `--print-command`); clang's warnings.

    The one path of `dist-lto opt` and of the opt worker (`dist_lto.worker`), which
    passes its served `runner` and its `reuse` store (`worker/reuse.py`: the
    object of this backend's last run when only modules it imports from changed, and
    not what it imports); `before_run` is called once the checks have passed, just
    before clang starts.
    """
    check_outputs(opts)
    mode = split_dwarf_mode(opts)
    if not is_bitcode(read_head(opts.input, "module", 4)):
        pass_through(opts.input, opts.out, opts.dwo)
        return b""
    command = backend_command(opts, mode)
    seen = reuse(command) if reuse is not None else None
    check_primary(opts.input, opts.index, seen.inputs.table if seen is not None else None)
    if seen is not None and (reused := seen.try_reuse(on_start)) is not None:
        return reused
    if before_run is not None:
        before_run()
    warnings = run_backend(
        command, module=opts.input, output=opts.out, dwo=opts.dwo, on_start=on_start,
        runner=runner,
    )  # fmt: skip
    if seen is not None:
        seen.remember(warnings)
    return warnings


def _output_flags(opts: Options) -> list[str]:
    flags = ["-o", opts.out]
    if opts.dwo:
        flags += split_dwarf_flags(opts.dwo, opts.dwo)
    return flags


def _quote_command(argv: list[str]) -> str:
    import shlex

    return " ".join(shlex.quote(arg) for arg in argv)
