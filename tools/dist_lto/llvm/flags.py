"""Translate a link's flags into the flags of one ThinLTO backend compile.

In-process ThinLTO configures each backend from the link: LLD's own options
(`--lto-O3`, `-mllvm`, `--plugin-opt=...`), the PIC mode of the output (`-pie`,
`-shared`), and the settings LLD always uses (a section per function and per
datum, address-significance tables). A distributed backend is a separate
`clang -c -x ir` run, so the same settings must be spelled as clang flags, or
its code differs from in-process ThinLTO (measured on Lua: without them 77 of
639 functions are identical, with them all 639).

The input is the link as given to the clang driver (the Buck2 rules write it one
argument per line): driver flags, `-Wl,` and `-Xlinker` linker flags, operands.
Every argument is translated, passed through, dropped because in-process
ThinLTO ignores it too, or rejected: a flag that would change in-process code
and has no backend spelling is an error naming it, never a silent drop.
Measured against clang 22's driver (`clang -### -flto=thin -fuse-ld=lld`) and
LLD 22's option table (lld/ELF/Options.td, lld/ELF/LTO.cpp). Standard library only.
"""

from dist_lto.errors import BadInput
from dist_lto.fsutil import read_input

LLD_DEFAULT_LTO_O = 2
"""LLD's LTO optimisation level when the link names none (lld/ELF/Driver.cpp,
`getInteger(args, OPT_lto_O, 2)`); pinned by a test against real LLD."""

CLANG_DEFAULT_PIE = True
"""The clang 22 driver links position-independent executables unless told otherwise
(CLANG_DEFAULT_PIE_ON_LINUX); pinned by a test against `clang -###`."""

LLD_CODEGEN_DEFAULTS = ("-ffunction-sections", "-fdata-sections", "-faddrsig")
"""What LLD's in-process LTO always turns on (lld/ELF/LTO.cpp, createConfig), and
what LLD's own DTLTO passes to its backends."""

QUIET_UNUSED = "-Wno-unused-command-line-argument"
"""Passed-through driver flags may not apply to an IR input; LLD's DTLTO says the same."""

# ---------------------------------------------------------------------------------
# Driver-level flags (the clang link command line)

_DRIVER_OPT_LEVELS = {
    "-O0": 0, "-O1": 1, "-O": 1, "-Og": 1, "-O2": 2, "-Os": 2, "-Oz": 2,
    "-O3": 3, "-O4": 3, "-Ofast": 3,
}  # fmt: skip
"""The LTO level the driver passes to LLD (`-plugin-opt=O<n>`) for each `-O` flag."""

_DRIVER_PAIRS_DROPPED = frozenset({
    "-o", "-L", "-l", "-u", "-e", "-T", "-z", "-B", "-Xclang", "-Xassembler",
    "-Xpreprocessor", "-mllvm", "-include", "-imacros", "-I", "-D", "-U", "-isystem",
    "-iquote", "-idirafter", "-isysroot", "--sysroot", "-MF", "-MT", "-MQ",
    "--gcc-toolchain", "-Xarch_host", "-Xarch_device",
})  # fmt: skip
"""Driver flags that take the next argument and do nothing to in-process LTO code:
outputs, libraries and search paths, compile-only inputs, and per-compile options
(`-mllvm` and `-Xclang` at link time reach no LTO backend: the driver does not
forward them to LLD)."""

_DRIVER_PAIRS_KEPT = frozenset({"-target"})
"""Driver flags with a separate argument that the backend needs too."""

_DRIVER_DROPPED = frozenset({
    "-pthread", "-pthreads", "-rdynamic", "-s", "-nostdlib", "-nostdlib++", "-nostartfiles",
    "-nodefaultlibs", "-nolibc", "-static-libgcc", "-static-libstdc++", "-shared-libgcc",
    "-shared-libsan", "-static-libsan", "-v", "--verbose", "-w", "-Qunused-arguments",
    "-no-canonical-prefixes", "-pg", "--coverage", "-save-temps", "-time", "-pipe",
    "-undefined", "-fuse-linker-plugin",
})  # fmt: skip
"""Link-only driver flags: runtime and start-file selection, diagnostics, driver behaviour."""

_DRIVER_DROPPED_PREFIXES = (
    "-l", "-L", "-u", "-B", "-I", "-D", "-U", "-Wl,", "--sysroot=", "-isysroot", "-std=",
    "-stdlib=", "--stdlib=", "-rtlib=", "--rtlib=", "-unwindlib=", "--unwindlib=",
    "--ld-path=", "--gcc-toolchain=", "--gcc-install-dir=", "-resource-dir",
    "-Xthinlto-distributor=", "-save-temps=", "-W", "-M", "-z", "-T", "-e", "-i",
)  # fmt: skip
"""Joined forms of the link-only and compile-only flags, and warnings (`-W...`): warning
options of the compile step do not change code."""

_F_DROPPED = (
    # LTO mode and the link itself: the backend must compile to a native object.
    "-flto", "-fno-lto", "-fuse-ld=", "-fthinlto-distributor=", "-ffat-lto-objects",
    "-fno-fat-lto-objects", "-funified-lto", "-fno-unified-lto", "-fsplit-lto-unit",
    "-fno-split-lto-unit", "-fwhole-program-vtables", "-fno-whole-program-vtables",
    # LLD always uses sections per function and datum, and address-significance tables.
    "-ffunction-sections", "-fno-function-sections", "-fdata-sections",
    "-fno-data-sections", "-faddrsig", "-fno-addrsig",
    # The PIC mode comes from the link (-pie, -shared) or, for -r, the module, as in LLD.
    "-fno-pic", "-fno-PIC", "-fno-pie", "-fno-PIE",
    # Instrumentation happens at compile time; at link time these pick runtimes.
    "-fsanitize", "-fno-sanitize", "-fprofile-instr-generate", "-fno-profile-instr-generate",
    "-fprofile-generate", "-fno-profile-generate", "-fprofile-arcs", "-fno-profile-arcs",
    "-ftest-coverage", "-fcoverage-mapping", "-fno-coverage-mapping", "-fprofile-update=",
    "-fxray-", "-fno-xray-", "-fopenmp", "-fno-openmp",
    # The driver does not forward a sample profile to LLD (only -Wl,--lto-sample-profile).
    "-fprofile-sample-use", "-fno-profile-sample-use", "-fauto-profile", "-fno-auto-profile",
    # They write extra files that no action declares, or change the output's kind.
    "-fsave-optimization-record", "-fno-save-optimization-record", "-foptimization-record-",
    "-fembed-bitcode", "-ftime-trace", "-fstack-usage", "-fproc-stat-report",
    "-fthin-link-bitcode=",
)  # fmt: skip
"""`-f` flags that must not reach the backend although `-f` flags normally pass through."""

_F_REJECTED = ("-fthinlto-index=",)
"""`-f` flags that would fight the backend command we build."""

_G_KEPT = ("-ggdb", "-glldb", "-gsce", "-gdbx")
"""Debugger tuning: the driver forwards it to LLD (`-plugin-opt=-debugger-tune=`)."""

_DRIVER_REJECTED = frozenset({"-c", "-S", "-E", "-emit-llvm", "-###", "-x", "-fsyntax-only"})
"""Flags that make a command something other than a link: the args file is wrong."""

# ---------------------------------------------------------------------------------
# Linker-level flags (after -Wl, or -Xlinker), as LLD 22 parses them

_LLD_SEPARATE = frozenset({
    "auxiliary", "compress-debug-sections", "defsym", "split-stack-adjust-size", "Tbss",
    "Tdata", "Ttext", "Ttext-segment", "call-graph-ordering-file", "dynamic-linker",
    "dynamic-list", "entry", "exclude-libs", "filter", "fini", "format", "hash-style",
    "init", "just-symbols", "keep-unique", "Map", "orphan-handling", "print-symbol-order",
    "rpath", "rpath-link", "retain-symbols-file", "script", "section-start", "soname",
    "sort-section", "sysroot", "target2", "trace-symbol", "undefined", "unresolved-symbols",
    "version-script", "wrap", "mips-got-size", "plugin", "library", "library-path",
    "compress-sections", "in-implib", "out-implib", "irpgo-profile", "default-script",
    "dependency-file", "error-limit", "error-handling-script", "export-dynamic-symbol",
    "export-dynamic-symbol-list", "image-base", "pack-dyn-relocs", "remap-inputs",
    "reproduce", "symbol-ordering-file", "threads", "time-trace-granularity",
    "undefined-glob", "rsp-quoting", "warn-backrefs-exclude", "why-live", "chroot",
    "lto-known-safe-vtables", "opt-remarks-hotness-threshold", "opt-remarks-filename",
    "opt-remarks-passes", "opt-remarks-format", "shuffle-sections", "thinlto-cache-policy",
    "android-memtag-mode", "load-pass-plugin",
})  # fmt: skip
"""Link-only LLD options that may take their value as the next argument (`--soname x`)."""

_LLD_SHORT_SEPARATE = frozenset("lLmozeRThyuGFbfO") | {"dT"}
"""Single-dash LLD options whose value may be the next argument (`-o x` as well as `-ox`)."""

DRIVER_SEPARATE = _DRIVER_PAIRS_DROPPED | _DRIVER_PAIRS_KEPT | {"-Xlinker"}
"""Driver flags whose value is the next argument, for a walk over a whole link line
(`llvm/link_command.py`): the value is never an input."""
LLD_SEPARATE = _LLD_SEPARATE
LLD_SHORT_SEPARATE = _LLD_SHORT_SEPARATE

_LLD_DROPPED_LTO = (
    # Index step, cache and distribution: decided before any backend runs.
    "thinlto-cache-dir=", "thinlto-cache-policy", "thinlto-emit-imports-files",
    "thinlto-emit-index-files", "thinlto-index-only", "thinlto-jobs=",
    "thinlto-object-suffix-replace=", "thinlto-prefix-replace=", "thinlto-single-module=",
    "thinlto-distributor=", "thinlto-distributor-arg=", "thinlto-remote-compiler=",
    "lto-whole-program-visibility", "no-lto-whole-program-visibility",
    "lto-validate-all-vtables-have-type-infos", "no-lto-validate-all-vtables-have-type-infos",
    "lto-known-safe-vtables", "lto=", "fat-lto-objects", "no-fat-lto-objects",
    # Full LTO only, debugging, or extra outputs no action declares.
    "lto-partitions=", "lto-debug-pass-manager", "lto-obj-path=", "save-temps",
    "disable-verify", "opt-remarks-", "time-trace", "lto-pgo-warn-mismatch",
    "no-lto-unique-basic-block-section-names",
)  # fmt: skip

_LLD_REJECTED_LTO = {
    "lto-emit-asm": "the backend must write an object",
    "lto-emit-llvm": "the backend must write an object",
    "lto-newpm-passes=": "a custom pass pipeline has no clang spelling",
    "lto-aa-pipeline=": "a custom pass pipeline has no clang spelling",
    "lto-cs-profile-generate": "use -fcs-profile-generate on the link line instead",
    "lto-cs-profile-file=": "use -fprofile-use= or -fcs-profile-generate= on the link line",
    "thinlto-remote-compiler-prepend-arg=": "a wrapper around the compiler is not a flag",
}
"""LTO options that change in-process code and have no backend spelling."""

_PLUGIN_CODEGEN = {
    "-emulated-tls": ["-femulated-tls"],
    "-stack-size-section": ["-fstack-size-section"],
    "-split-machine-functions": ["-fsplit-machine-functions"],
    "-enable-jmc-instrument": ["-fjmc"],
    "-enable-tlsdesc": ["-mtls-dialect=gnu2"],
    "-debugger-tune=gdb": ["-ggdb"],
    "-debugger-tune=lldb": ["-glldb"],
    "-debugger-tune=sce": ["-gsce"],
    "-debugger-tune=dbx": ["-gdbx"],
    "-function-sections": [],
    "-function-sections=1": [],
    "-data-sections": [],
    "-data-sections=1": [],
}
"""Code-generation options that LLD registers but clang does not, so `-mllvm` cannot carry
them: their clang flags (the driver's own translation, read backwards). Function and data
sections are always on in LLD."""


class BackendFlags:
    """The backend flags derived from one link's flags.

    `flags` is ready to append after `clang -c -x ir M.o -fthinlto-index=I -o O`.
    """

    __slots__ = ("flags", "opt_level", "pic", "split_dwarf")

    def __init__(
        self, flags: list[str], opt_level: int, pic: bool | None, split_dwarf: bool
    ) -> None:
        self.flags = flags
        self.opt_level = opt_level
        self.pic = pic
        """LLD would generate position-independent code (`-pie` or `-shared`); None for a
        relocatable link (`-r`), where each module keeps the model it was compiled with
        and `flags` name none: the backend's comes from the module
        (`llvm/module_flags.py`)."""
        self.split_dwarf = split_dwarf
        """The link asks for split DWARF (`-gsplit-dwarf`, `--plugin-opt=dwo_dir=`)."""


class _State:
    """What the walk over the link flags has found so far."""

    __slots__ = (
        "cgo", "driver_level", "driver_pie", "flags", "linker_level", "linker_pie",
        "pgo_warn", "relocatable", "shared", "split_dwarf", "static", "static_pie",
    )  # fmt: skip

    def __init__(self) -> None:
        self.flags: list[str] = []
        self.driver_level: int | None = None
        self.linker_level: int | None = None
        self.cgo: tuple[int, str] | None = None
        self.driver_pie: bool | None = None
        self.linker_pie: bool | None = None
        self.shared = False
        self.static = False
        self.static_pie = False
        self.relocatable = False
        self.split_dwarf = False
        self.pgo_warn = True


class ArgCursor:
    """A cursor over a list of arguments, for flags that take the next one as their value;
    a missing value is bad input, named after `origin` when given."""

    __slots__ = ("args", "origin", "pos")

    def __init__(self, args: list[str], origin: str = "") -> None:
        self.args = args
        self.pos = 0
        self.origin = origin

    def next(self) -> str | None:
        if self.pos == len(self.args):
            return None
        self.pos += 1
        return self.args[self.pos - 1]

    def value(self, flag: str) -> str:
        value = self.next()
        if value is None:
            where = f"{self.origin}: " if self.origin else ""
            raise BadInput(f"{where}{flag!r} at the end is missing its argument")
        return value


def translate(
    link_flags: list[str], *, lld_defaults: bool = True, origin: str = ""
) -> BackendFlags:
    """Backend flags equivalent to what LLD's in-process ThinLTO does for this link.

    `origin` names where the flags came from, for error messages. Raises BadInput
    for a flag that cannot be translated.
    """
    where = f"{origin}: " if origin else ""
    state = _State()
    linker_args: list[str] = []
    linker_lines: list[int] = []
    args = ArgCursor(link_flags)
    while (arg := args.next()) is not None:
        try:
            _driver_arg(arg, args, state, linker_args)
        except BadInput as err:
            raise BadInput(f"{where}line {args.pos}: {err.message}") from None
        linker_lines += [args.pos] * (len(linker_args) - len(linker_lines))
    linker = ArgCursor(linker_args)
    try:
        _linker_args(linker, state)
    except BadInput as err:
        line = linker_lines[max(linker.pos - 1, 0)] if linker_lines else 0
        raise BadInput(f"{where}line {line}: {err.message}") from None
    level = _opt_level(state)
    if state.cgo is not None and state.cgo[0] != level:
        raise BadInput(
            f"{where}cannot translate {state.cgo[1]!r}: clang's backend generates code at the"
            f" level of -O{level} and has no separate codegen level"
        )
    pic = None if state.relocatable else _is_pic(state)
    head = [f"-O{level}"]
    if lld_defaults:
        head += LLD_CODEGEN_DEFAULTS
    if pic is not None:  # -r: each module's own (`llvm/module_flags.py`), as in LLD
        head.append("-fpic" if pic else "-fno-pic")
    head.append(QUIET_UNUSED)
    if not state.pgo_warn:
        head += ["-mllvm", "-no-pgo-warn-mismatch"]
    return BackendFlags(head + state.flags, level, pic, state.split_dwarf)


def _opt_level(state: _State) -> int:
    # The driver puts its -plugin-opt=O<n> before the user's -Wl flags: LLD's last one wins.
    if state.linker_level is not None:
        return state.linker_level
    if state.driver_level is not None:
        return state.driver_level
    return LLD_DEFAULT_LTO_O


def _is_pic(state: _State) -> bool:
    """LLD's `isPic` (`pie || shared`), with `pie` as the clang driver sets it."""
    if state.static_pie:
        pie = True
    elif state.shared or state.static or state.relocatable:
        pie = False
    else:
        pie = CLANG_DEFAULT_PIE if state.driver_pie is None else state.driver_pie
    if state.linker_pie is not None:
        pie = state.linker_pie
    return pie or state.shared


def _driver_arg(arg: str, args: ArgCursor, state: _State, linker_args: list[str]) -> None:
    if not arg:
        raise BadInput("empty argument")
    if arg[0] == "@":
        raise BadInput(f"cannot translate {arg!r}: expand response files into the link flags")
    if arg[0] != "-" or arg == "-":
        return  # an operand: an object, archive or library of the link
    if arg.startswith("-Wl,"):
        linker_args += [part for part in arg[4:].split(",") if part]
        return
    if arg == "-Xlinker":
        value = args.value(arg)
        if not value:
            raise BadInput("empty argument after '-Xlinker'")
        linker_args.append(value)
        return
    level = _DRIVER_OPT_LEVELS.get(arg)
    if level is not None:
        state.driver_level = level
        return
    if arg.startswith("-O"):
        if not arg[2:].isdigit():
            raise BadInput(f"cannot translate {arg!r}: unknown optimisation level")
        state.driver_level = 3  # clang treats -O4 and above as -O3
        return
    if arg in _DRIVER_REJECTED or arg.startswith("-x"):
        raise BadInput(f"{arg!r} is not a link flag: the link flags file is wrong")
    if _driver_pic_flag(arg, state):
        return
    if arg in _DRIVER_PAIRS_DROPPED:
        args.value(arg)
        return
    if arg in _DRIVER_PAIRS_KEPT:
        state.flags += [arg, args.value(arg)]
        return
    if arg.startswith("--target="):
        state.flags.append(arg)
        return
    if arg.startswith("-g"):
        _debug_flag(arg, state)
        return
    if arg.startswith("-f"):
        if arg.startswith(_F_REJECTED):
            raise BadInput(f"cannot translate {arg!r}: dist-lto opt sets it from --index")
        if not arg.startswith(_F_DROPPED):
            state.flags.append(arg)
        return
    if arg.startswith("-m"):
        if not arg.startswith("-mllvm="):
            state.flags.append(arg)
        return
    if arg in _DRIVER_DROPPED or arg.startswith(_DRIVER_DROPPED_PREFIXES):
        return
    raise BadInput(f"cannot translate link flag {arg!r} to a backend flag")


def _driver_pic_flag(arg: str, state: _State) -> bool:
    if arg == "-shared":
        state.shared = True
    elif arg == "-static":
        state.static = True
    elif arg == "-static-pie":
        state.static_pie = True
    elif arg in ("-r", "-relocatable"):
        state.relocatable = True
    elif arg == "-pie":
        state.driver_pie = True
    elif arg == "-no-pie":
        state.driver_pie = False
    else:
        return False
    return True


def _debug_flag(arg: str, state: _State) -> None:
    """Debug information lives in the bitcode; only split DWARF and tuning reach LTO."""
    if arg.startswith("-gsplit-dwarf"):
        state.split_dwarf = arg != "-gsplit-dwarf=none"
    elif arg == "-gno-split-dwarf":
        state.split_dwarf = False
    elif arg.startswith(_G_KEPT):
        state.flags.append(arg)


def _linker_args(args: ArgCursor, state: _State) -> None:
    """Walk LLD's arguments: LTO options are translated, the rest belongs to the link."""
    while (arg := args.next()) is not None:
        if arg[0] == "@":
            raise BadInput(f"cannot translate -Wl,{arg}: expand response files")
        if arg[0] != "-" or arg == "-":
            continue  # an input file
        name = arg[2:] if arg.startswith("--") else arg[1:]
        if arg[1] != "-" and name in _LLD_SHORT_SEPARATE:
            args.value(arg)  # -o out, -l m, -z now: link-only
            continue
        value = args.value(arg) if name in _LLD_SEPARATE else None
        if name.startswith("plugin-opt="):
            _plugin_opt(name[len("plugin-opt=") :], arg, state)
        elif name == "plugin-opt":
            option = args.value(arg)
            _plugin_opt(option, f"{arg} {option}", state)
        elif name == "mllvm":
            state.flags += ["-mllvm", args.value(arg)]
        elif name.startswith("mllvm="):
            state.flags += ["-mllvm", name[len("mllvm=") :]]
        elif name.startswith("load-pass-plugin"):
            plugin = value if value is not None else name.partition("=")[2]
            state.flags.append(f"-fpass-plugin={plugin}")
        elif arg.startswith(("--lto-", "--thinlto-", "--no-lto-")):
            _lto_option(name, arg, state)
        else:
            _linker_pic_flag(arg, name, state)
        # Anything else is one of LLD's link-only options: code generation is untouched.


def _linker_pic_flag(arg: str, name: str, state: _State) -> None:
    if name in ("pie", "pic-executable"):
        state.linker_pie = True
    elif name == "no-pie":
        state.linker_pie = False
    elif name in ("shared", "Bshareable"):
        state.shared = True
    elif name == "relocatable" or arg == "-r":
        state.relocatable = True


def _lto_option(name: str, arg: str, state: _State) -> None:
    if name.startswith("lto-O"):
        state.linker_level = _level(name[len("lto-O") :], arg)
    elif name.startswith("lto-CGO"):
        state.cgo = (_level(name[len("lto-CGO") :], arg), arg)
    elif name.startswith("lto-sample-profile="):
        state.flags.append("-fprofile-sample-use=" + name.partition("=")[2])
    elif name == "lto-pgo-warn-mismatch":
        state.pgo_warn = True
    elif name == "no-lto-pgo-warn-mismatch":
        state.pgo_warn = False
    elif name.startswith("lto-basic-block-sections="):
        state.flags.append(_bb_sections(name.partition("=")[2]))
    elif name == "lto-basic-block-address-map":
        state.flags.append("-fbasic-block-address-map")
    elif name == "no-lto-basic-block-address-map":
        state.flags.append("-fno-basic-block-address-map")
    elif name == "lto-unique-basic-block-section-names":
        state.flags.append("-funique-basic-block-section-names")
    elif name.startswith("thinlto-remote-compiler-arg="):
        state.flags.append(name.partition("=")[2])
    elif name.startswith(tuple(_LLD_REJECTED_LTO)):
        reason = next(r for k, r in _LLD_REJECTED_LTO.items() if name.startswith(k))
        raise BadInput(f"cannot translate linker flag {arg!r}: {reason}")
    elif not name.startswith(_LLD_DROPPED_LTO):
        raise BadInput(f"cannot translate unknown LTO linker flag {arg!r}")


def _plugin_opt(option: str, spelling: str, state: _State) -> None:
    """`--plugin-opt=X`, LLD's spelling of the options GNU linkers' LLVM plugin takes."""
    if option.startswith("O") and option[1:].isdigit():
        state.linker_level = _level(option[1:], spelling)
    elif option.startswith("-"):
        translated = _PLUGIN_CODEGEN.get(option)
        state.flags += ["-mllvm", option] if translated is None else translated
    elif option.startswith("sample-profile="):
        state.flags.append("-fprofile-sample-use=" + option.partition("=")[2])
    elif option.startswith("mcpu="):
        state.flags += ["-Xclang", "-target-cpu", "-Xclang", option.partition("=")[2]]
    elif option.startswith("dwo_dir="):
        state.split_dwarf = True
    elif option in ("emit-asm", "emit-llvm"):
        raise BadInput(
            f"cannot translate linker flag {spelling!r}: the backend must write an object"
        )
    elif option in ("cs-profile-generate",) or option.startswith("cs-profile-path="):
        raise BadInput(
            f"cannot translate linker flag {spelling!r}: use -fprofile-use= or"
            " -fcs-profile-generate on the link line instead"
        )
    elif (
        option == "thinlto"
        or option.startswith(_PLUGIN_DROPPED)
        or option.endswith(("lto-wrapper", "lto-wrapper.exe"))
    ):
        return
    else:
        raise BadInput(f"cannot translate unknown plugin option {spelling!r}")


_PLUGIN_DROPPED = (
    "jobs=", "lto-partitions=", "obj-path=", "opt-remarks-", "save-temps", "stats-file=",
    "time-trace=", "thinlto-", "debug-pass-manager", "disable-verify", "-fresolution=",
    "-pass-through=",
)  # fmt: skip
"""Plugin options that change no code: parallelism, debugging, extra outputs, index step."""


def _level(digits: str, spelling: str) -> int:
    if not digits.isdigit() or int(digits) > 3:
        raise BadInput(f"cannot translate {spelling!r}: the level must be 0, 1, 2 or 3")
    return int(digits)


def _bb_sections(value: str) -> str:
    if value in ("all", "none"):
        return f"-fbasic-block-sections={value}"
    if value == "labels":
        return "-fbasic-block-address-map"
    return f"-fbasic-block-sections=list={value}"


def read_args_file(path: str) -> list[str]:
    """The link flags file: one argument per line, verbatim (no quoting, no comments).

    A final newline is optional; a file that is not UTF-8 or holds an empty line is
    bad input naming the line.
    """
    data = read_input(path, "link flags")
    try:
        text = data.decode()
    except UnicodeDecodeError as err:
        bad_line = data[: err.start].count(b"\n") + 1
        raise BadInput(f"{path}: line {bad_line}: not UTF-8") from None
    if not text:
        return []
    lines = text[:-1].split("\n") if text.endswith("\n") else text.split("\n")
    for number, line in enumerate(lines, 1):
        if not line:
            raise BadInput(f"{path}: line {number}: empty line (one argument per line)")
        if "\r" in line:
            raise BadInput(f"{path}: line {number}: carriage return in an argument")
        if "\0" in line:  # no program could receive it
            raise BadInput(f"{path}: line {number}: NUL character in an argument")
    return lines
