"""One backend as `dist-lto opt` asks for it: the request's options, the command they
make and the checked run. A request may batch several backends of one link (`--input`,
`--index`, `--out` and `--dwo` repeated), each run as if requested alone, in order.

Shared by the command (`commands/opt.py`), the opt worker (`worker/requests.py`),
which runs the same requests with its own compilers, and upstream's opt
(`upstream/opt.py`). Standard library only: it is on the opt path (docs/opt.md).
"""

import os

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
from dist_lto.cli import scan
from dist_lto.errors import BadInput
from dist_lto.llvm.bitcode import is_bitcode
from dist_lto.llvm.flags import read_args_file, translate

if TYPE_CHECKING:
    from collections.abc import Callable

    from dist_lto.backend import Runner, VerifiedModules
    from dist_lto.worker.reuse import Backend

MODULE_OPTIONS = {"--input": "input", "--index": "index", "--out": "out", "--dwo": "dwo"}
"""Options that name one backend's files: repeated, one of each per backend of a batch
(`--dwo` for every backend or none)."""
VALUE_OPTIONS = {"--args": "args", "--split-dwarf": "split_dwarf", "--ready": "ready",
                 "--link-driver": "link_driver"}  # fmt: skip
FLAG_OPTIONS = {"--print-command": "print_command", "--no-lld-defaults": "no_lld_defaults",
                "--unweighted": "unweighted"}  # fmt: skip
SPLIT_DWARF_MODES = ("single", "split")


class Options:
    """A request: `dist-lto opt`'s command line, parsed."""

    __slots__ = ("args", "command", "dwo", "index", "input", "link_driver", "more",
                 "no_lld_defaults", "out", "print_command", "ready", "split_dwarf",
                 "unweighted")  # fmt: skip

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
        self.link_driver: str | None = None
        """`--link-driver FILE` (with `--ready`): a link's driver command, one argument per
        line, whose linker line the opt worker finds ahead (`worker/links.py`)."""
        self.unweighted = False
        """The action holds no local slot: the opt worker compiles it first, in a slot
        another request brought (`worker/slots.py`); `dist-lto opt` itself ignores it."""
        self.command: list[str] = []
        """CLANG and the extra flags after `--`."""
        self.more: list[Options] = []
        """A batch's further backends, in order: each with its own files (`MODULE_OPTIONS`)
        and these options' others."""

    def backends(self) -> "list[Options]":
        """The backends this request asks for, in order: itself, then `more`."""
        return [self, *self.more]


def parse_fast(argv: list[str]) -> Options | None:
    """The common case, without argparse; None sends anything unusual to argparse."""
    opts = Options()
    files: dict[str, list[str]] = {name: [] for name in MODULE_OPTIONS}
    positional = scan(argv, opts, VALUE_OPTIONS, FLAG_OPTIONS, rest="command", repeated=files)
    if positional != [] or not opts.command:
        return None
    batch = batched(opts, *(files[name] for name in MODULE_OPTIONS))
    if batch is None or misfits(batch) or (batch.link_driver is not None and batch.ready is None):
        return None
    return batch


def batched(
    opts: Options, inputs: list[str], indexes: list[str], outs: list[str], dwos: list[str]
) -> Options | None:
    """`opts` as the first backend of the batch the files name (the k-th of each option
    belong together), the others in `more`; None when their counts do not pair up."""
    count = max(len(inputs), len(indexes), len(outs), 1)
    if any(len(x) not in (0, count) for x in (inputs, indexes, outs, dwos)):
        return None
    if count > 1 and not (inputs and indexes and outs):
        return None
    backends = [opts] + [copy_options(opts) for _ in range(count - 1)]
    for k, backend in enumerate(backends):
        backend.input = inputs[k] if inputs else ""
        backend.index = indexes[k] if indexes else ""
        backend.out = outs[k] if outs else ""
        backend.dwo = dwos[k] if dwos else None
    opts.more = backends[1:]
    return opts


def copy_options(opts: Options) -> Options:
    """`opts` but for another backend: every option, no further backends (`more`)."""
    copy = Options()
    for name in Options.__slots__:
        setattr(copy, name, getattr(opts, name))
    copy.more = []
    return copy


def misfits(opts: Options) -> list[str]:
    """What the options lack or have too much of: a backend needs its module, index and
    output; `--ready` takes only the compiler (and `--link-driver`)."""
    if opts.ready is None:
        return [name for name, value in (("--input", opts.input), ("--index", opts.index),
                                         ("--out", opts.out)) if not value]  # fmt: skip
    given = (("--input", opts.input), ("--index", opts.index), ("--out", opts.out),
             ("--args", opts.args), ("--dwo", opts.dwo), ("--split-dwarf", opts.split_dwarf),
             ("--print-command", opts.print_command),
             ("--unweighted", opts.unweighted))  # fmt: skip
    return [name for name, value in given if value]


def split_dwarf_mode(opts: Options) -> str | None:
    """The split-DWARF mode the options ask for (None: none), checked."""
    mode = opts.split_dwarf or ("split" if opts.dwo else None)
    if mode is not None and mode not in SPLIT_DWARF_MODES:
        raise BadInput(f"--split-dwarf={mode}: expected one of {', '.join(SPLIT_DWARF_MODES)}")
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
    """Refuse an output that names an input (or another output), of this backend or of
    another in its batch: outputs are removed before clang runs, so the input would be
    lost. Compared by resolved path, not by inode: an earlier pass-through leaves `--out`
    a hard link of `--input`."""
    batch = opts.backends()
    inputs = [("--args", opts.args)]
    inputs += [(name, path) for b in batch for name, path in (("--input", b.input),
                                                             ("--index", b.index))]  # fmt: skip
    outputs = [(name, path) for b in batch for name, path in (("--out", b.out),
                                                             ("--dwo", b.dwo))]  # fmt: skip
    seen = [(name, path, os.path.realpath(path)) for name, path in inputs if path]
    for name, path in outputs:
        if not path:
            continue
        real = os.path.realpath(path)
        for other_name, other, other_real in seen:
            if real == other_real:
                raise BadInput(f"{path}: {name} names the same file as {other_name} {other!r}")
        seen.append((name, path, real))


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
    verified: "VerifiedModules | None" = None,
    scratch: str | None = None,
) -> bytes:
    """Run the backend `opts` ask for (not `--print-command`); clang's warnings.

    The one path of `dist-lto opt` and of the opt worker (`dist_lto.worker`), which
    passes its served `runner`, its `reuse` store (`worker/reuse.py`: the
    object of this backend's last run when only modules it imports from changed, and
    not what it imports), the modules its requests have `verified` and its `scratch`
    directory for clang's output (`run_backend`); `before_run` is called once the
    checks have passed, just before clang starts.
    """
    check_outputs(opts)
    mode = split_dwarf_mode(opts)
    if not is_bitcode(read_head(opts.input, "module", 4)):
        pass_through(opts.input, opts.out, opts.dwo)
        return b""
    command = backend_command(opts, mode)
    seen = reuse(command) if reuse is not None else None
    table = seen.inputs.table if seen is not None else None
    check_primary(opts.input, opts.index, table, verified)
    if seen is not None and (reused := seen.try_reuse(on_start)) is not None:
        return reused
    if before_run is not None:
        before_run()
    warnings = run_backend(
        command, module=opts.input, output=opts.out, dwo=opts.dwo, on_start=on_start,
        runner=runner, scratch=scratch,
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
