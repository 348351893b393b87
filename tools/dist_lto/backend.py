"""One ThinLTO backend compile, run so that no failure gets through.

clang 22 can exit 0 after a fatal LTO error: with an imported module it cannot
load it writes an empty object (0 bytes); with a primary module it does not
recognise as primary (the input spelled `./obj/m.o` where the index step saw
`obj/m.o`) it writes an object without code (680 bytes for Lua's lua.o). So a
backend succeeds here only when

- its input is the primary module of its index (`check_primary`, before clang runs),
- clang exits 0 (its status passes through; death by signal N becomes 128+N, the
  convention remote executors retry on),
- the output is a complete ELF relocatable object (`check_object`), and
- a requested split-DWARF file exists, or is created empty when the object holds no
  debug information to split.

Outputs are written in a private temporary directory beside their final paths (or in
the caller's own directory on their file system: the opt worker's) and renamed only
after every check, so a failed or killed backend leaves nothing at them (and a failed
one nothing beside them, not even clang's own temporaries).

Shared by `dist-lto opt` and `dist-lto distribute`. Standard library only; clang runs
through `process/children.py`, in a process group of its own.
"""

import os

from dist_lto import TYPE_CHECKING
from dist_lto.errors import EXIT_INTERNAL, BadInput, DistLtoError
from dist_lto.fsutil import (
    install,
    read_input,
    remove_named,
    remove_output,
    remove_private_dir,
    remove_quietly,
    scratch_path_for,
    writes_through,
)
from dist_lto.llvm.bitcode import module_has_hash, module_triple, read_index_modules
from dist_lto.process.children import action_status, describe_status, run_tool

if TYPE_CHECKING:
    from collections.abc import Callable

    from dist_lto.llvm.bitcode import IndexModules

    Runner = Callable[[list[str], Callable[[int], None] | None], tuple[int, bytes]]

ELF_MAGIC = b"\x7fELF"
_ET_REL = 1


class BackendFailed(DistLtoError):
    """clang failed or lied about succeeding; `status` is what the action exits with."""


def read_head(path: str, what: str, size: int = 64) -> bytes:
    return read_input(path, what, size)


# ---------------------------------------------------------------------------------
# Checks


class VerifiedModules:
    """Modules found to match the hash an index recorded for them, each by its path and
    that hash: a distributor reads each of a link's modules once, not once for every
    index that imports from it. With `files`, by the file's identity too (device, inode,
    size, modification time), for a process that outlives a build (the opt worker): a
    module compiled again is read again. Forgets all once it holds `LIMIT`."""

    __slots__ = ("files", "seen")
    LIMIT = 1 << 16

    def __init__(self, files: bool = False) -> None:
        self.files = files
        self.seen: set[tuple[object, ...]] = set()

    def key(self, path: bytes, recorded: tuple[int, ...]) -> tuple[object, ...] | None:
        """What a check of `path` is remembered by: with `files`, its identity taken now,
        before it is read, so a change after that reads it again; None when it is not
        there."""
        if not self.files:
            return path, recorded
        try:
            info = os.stat(path)
        except OSError:
            return None
        return path, recorded, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns

    def __contains__(self, key: object) -> bool:
        return key in self.seen

    def add(self, key: tuple[object, ...] | None) -> None:
        if key is None:
            return
        if len(self.seen) >= self.LIMIT:
            self.seen.clear()
        self.seen.add(key)


def check_primary(
    module: str,
    index: str,
    modules: "IndexModules | None" = None,
    verified: VerifiedModules | None = None,
) -> None:
    """Fail unless clang will treat `module` as the primary module of `index`.

    clang looks the module up by the exact spelling of its command-line path; an index
    that skips the module on purpose (a lazy archive member) makes clang write an
    object without code, which is correct and accepted.

    A distributor passes the index's `modules` when it has read them already, and
    either it or the opt worker the modules `verified` so far.
    """
    if modules is None:
        modules = read_index_modules(index)
    if modules.skip:
        return
    wanted = os.fsencode(module)
    if wanted in modules.paths:
        primary = modules.paths.index(wanted)
        order = [primary, *(i for i in range(len(modules.paths)) if i != primary)]
        for i in order:
            path, recorded = modules.paths[i], modules.hashes[i]
            if (i != primary and path == wanted) or not any(recorded):
                continue
            key = verified.key(path, recorded) if verified is not None else None
            if verified is not None and key in verified:
                continue
            if i == primary:
                _check_module_hash(module, index, recorded)
            else:  # a module it imports from
                _check_module_hash(os.fsdecode(path), index, recorded, importer=module)
            if verified is not None:
                verified.add(key)
        return
    known = [os.fsdecode(p) for p in modules.paths]
    hint = _closest(module, known)
    if hint is not None:
        found = f"it has {hint!r}: spell the input exactly as the index step saw it"
    elif not known:
        found = "its module table is empty"
    else:
        found = f"it has {len(known)} modules, e.g. {', '.join(map(repr, known[:3]))}"
    raise BadInput(
        f"{index}: module {module!r} is not in this index ({found}); clang would not treat"
        " it as the primary module and would write an object without its code"
    )


def _read_module(path: str) -> bytes | None:
    """The bytes of the module file at `path`; None when it is not a regular file or
    cannot be read (clang reports what it finds there)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO: no wait
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if info.st_mode & 0o170000 != 0o100000:
            return None
        return os.read(fd, info.st_size + 1)
    except OSError:
        return None
    finally:
        os.close(fd)


def target_flags(module: str) -> list[str]:
    """`--target=TRIPLE`, the module's own triple: in-process ThinLTO compiles each module
    for the triple it records, where clang would override it with its default triple (and
    warn, as for Rust's `x86_64-unknown-linux-gnu` bitcode or the kernel's). Nothing for a
    module that records none or cannot be read (clang reports it)."""
    data = _read_module(module)
    if data is None:
        return []
    try:
        triple = module_triple(data)
    except ValueError:
        return []
    return [f"--target={triple}"] if triple and triple.isprintable() else []


def _check_module_hash(
    module: str, index: str, expected: tuple[int, ...], importer: str = ""
) -> None:
    """Fail when `module` (the primary module, or one `importer` imports from) is not the
    build of it that `index` was made from: clang would compile current code with imports
    and decisions made for old code, and exit 0 (the index step records each module's
    hash; LLVM writes it into the module). A module that cannot be read or parsed is
    left to clang to report."""
    data = _read_module(module)
    if data is None:
        return
    try:
        same = module_has_hash(data, expected)
    except ValueError:
        return
    if same is False:
        which = f"{module!r}, which {importer!r} imports from" if importer else repr(module)
        raise BadInput(
            f"{index}: made for another build of {which} (the module's hash differs from"
            " the one the index step recorded): the index is stale; run the index step again"
        )


def _closest(module: str, known: list[str]) -> str | None:
    """The index's spelling of the same file, if it has one (`./a.o`, `/abs/a.o` for `a.o`)."""
    norm = os.path.normpath(module)
    for path in known:
        if os.path.normpath(path) == norm:
            return path
    real = os.path.realpath(module)
    for path in known:
        if "\0" not in path and os.path.realpath(path) == real:  # a corrupt table may hold NUL
            return path
    base = os.path.basename(module)
    same_name = [p for p in known if os.path.basename(p) == base]
    return same_name[0] if len(same_name) == 1 else None


class ElfInfo:
    """The parts of an ELF header the checks need."""

    __slots__ = ("big_endian", "shentsize", "shnum", "shoff", "shstrndx", "wide")

    def __init__(self, head: bytes) -> None:
        self.wide = head[4] == 2
        self.big_endian = head[5] == 2
        if self.wide:
            self.shoff = self.word(head, 0x28, 8)
            self.shentsize = self.word(head, 0x3A, 2)
            self.shnum = self.word(head, 0x3C, 2)
            self.shstrndx = self.word(head, 0x3E, 2)
        else:
            self.shoff = self.word(head, 0x20, 4)
            self.shentsize = self.word(head, 0x2E, 2)
            self.shnum = self.word(head, 0x30, 2)
            self.shstrndx = self.word(head, 0x32, 2)

    def word(self, data: bytes, offset: int, size: int) -> int:
        return int.from_bytes(data[offset : offset + size], "big" if self.big_endian else "little")


def object_problem(path: str) -> str | None:
    """What is wrong with `path` as an ELF relocatable object ("is empty"), None if nothing."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            size = os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        return "is missing"
    except OSError as err:
        return f"cannot be read ({err.strerror})"
    if size == 0:
        return "is empty (0 bytes)"
    if head[:4] != ELF_MAGIC or len(head) < 64 or head[4] not in (1, 2) or head[5] not in (1, 2):
        return f"is not an ELF object ({size} bytes)"
    elf = ElfInfo(head)
    if elf.word(head, 16, 2) != _ET_REL:
        return "is an ELF file but not a relocatable object"
    if elf.shnum == 0 or elf.shoff + elf.shnum * elf.shentsize > size:
        return f"is a truncated ELF object ({size} bytes, its section headers are missing)"
    return None


def section_names(path: str) -> list[bytes]:
    """The section names of a well-formed ELF object (see `object_problem`)."""
    with open(path, "rb") as f:
        data = f.read()
    elf = ElfInfo(data)
    wide = elf.wide

    def header(i: int) -> tuple[int, int, int]:
        base = elf.shoff + i * elf.shentsize
        name = elf.word(data, base, 4)
        if wide:
            return name, elf.word(data, base + 0x18, 8), elf.word(data, base + 0x20, 8)
        return name, elf.word(data, base + 0x10, 4), elf.word(data, base + 0x14, 4)

    _, str_offset, str_size = header(elf.shstrndx)
    strings = data[str_offset : str_offset + str_size]
    names = []
    for i in range(elf.shnum):
        start = header(i)[0]
        names.append(strings[start : strings.find(b"\0", start)])
    return names


# ---------------------------------------------------------------------------------
# Running


def split_dwarf_flags(dwo_name: str, dwo_output: str) -> list[str]:
    """clang flags for split DWARF whose skeleton names `dwo_name` but which writes to
    `dwo_output` (a temporary name: the driver would derive both from `-o`)."""
    return [
        "-gsplit-dwarf",
        "-Xclang", "-split-dwarf-file", "-Xclang", dwo_name,
        "-Xclang", "-split-dwarf-output", "-Xclang", dwo_output,
    ]  # fmt: skip


def split_dwarf_in_object_flags(name: str) -> list[str]:
    """clang flags for split DWARF kept in the object (`-gsplit-dwarf=single`) whose
    skeleton names `name`, the object's final path (the driver would name `-o`, a
    temporary)."""
    return ["-gsplit-dwarf=single", "-Xclang", "-split-dwarf-file", "-Xclang", name]


def run_backend(
    command: list[str],
    *,
    module: str,
    output: str,
    dwo: str | None = None,
    on_start: "Callable[[int], None] | None" = None,
    runner: "Runner | None" = None,
    scratch: str | None = None,
) -> bytes:
    """Run backend `command` (clang and its flags, without `-o`) writing `output` strictly.

    Appends `-o <temporary>` and, with `dwo`, the split-DWARF flags; checks everything
    the module docstring lists; renames the results into place. Returns clang's stderr
    (warnings) on success; raises BackendFailed (clang's status) or BadInput otherwise.
    `runner(argv, on_start)` runs clang: `children.run_tool` with TMPDIR in the private directory
    unless given (a distributor's fork server, `forkserver.ForkServer.run`; the
    distributor gives all its compilers a private TMPDIR of its own). The temporaries
    go in a private directory made beside each output or, given `scratch`, under names
    of their own in that directory of the caller's on the outputs' file system (the
    opt worker's own: no directory made and removed per backend and, outside the
    project, nothing for Buck2's file watcher to see but the finished object).
    """
    prepare_outputs(output, dwo)
    work = _private_dir(output) if scratch is None else scratch
    work_dwo = None
    stem = "" if scratch is None else f".{os.urandom(6).hex()}-"
    done = False
    try:
        if dwo:
            work_dwo = _private_dir(dwo) if scratch is None else scratch
        tmp = os.path.join(work, stem + os.path.basename(output))
        tmp_dwo = os.path.join(work_dwo, stem + os.path.basename(dwo)) if work_dwo and dwo else None
        argv = [*command, "-o", tmp]
        if dwo and tmp_dwo:
            argv += split_dwarf_flags(dwo, tmp_dwo)
        if runner is None:
            # A crashing clang writes its reproducer (preprocessed source, run script)
            # under TMPDIR: here, the private directory that goes when we do.
            # `dist-lto opt` has no guard: clang stays in its process group (children.spawn).
            status, stderr = run_tool(
                argv, on_start, {**os.environ, "TMPDIR": work}, own_group=False
            )
        else:
            status, stderr = runner(argv, on_start)
        if status != 0:
            raise BackendFailed(
                f"{module}: {argv[0]} {describe_status(status)}", status=action_status(status),
                detail=stderr.decode(errors="replace"),
            )  # fmt: skip
        problem = object_problem(tmp)
        if problem:
            raise BackendFailed(
                f"{module}: {argv[0]} exited 0 but its output {problem}", status=EXIT_INTERNAL,
                detail=stderr.decode(errors="replace"),
            )  # fmt: skip
        if dwo and tmp_dwo:
            _finish_dwo(module, tmp, tmp_dwo, dwo, stderr)
        install(tmp, output)
        done = True
    finally:
        if scratch is None:
            remove_private_dir(work)
            if work_dwo:
                remove_private_dir(work_dwo)
        elif not done:  # what this backend and its clang left in the caller's directory
            remove_named(scratch, stem)
    return stderr


def _private_dir(path: str) -> str:
    """A new directory beside `path` for clang to write into. clang writes through a
    temporary of its own, which it leaves behind when a stop signal catches it at the
    wrong moment (seen when a distributor stops its jobs); whatever it leaves in here
    goes with the directory."""
    work = scratch_path_for(path)
    try:
        os.mkdir(work)
    except OSError as err:
        raise DistLtoError(
            f"{path}: cannot create a temporary directory beside it: {err.strerror}"
        ) from None
    return work


def _finish_dwo(module: str, obj: str, tmp_dwo: str, dwo: str, stderr: bytes) -> None:
    if not os.path.exists(tmp_dwo):
        if b".debug_info" in section_names(obj):
            raise BackendFailed(
                f"{module}: clang exited 0 and put split debug information in the object"
                f" but wrote no .dwo file for {dwo}",
                status=EXIT_INTERNAL, detail=stderr.decode(errors="replace"),
            )  # fmt: skip
        # Nothing to split (no debug information): the declared output still has to exist.
        with open(tmp_dwo, "wb"):
            pass
    install(tmp_dwo, dwo)


def pass_through(module: str, output: str, dwo: str | None = None) -> None:
    """A non-bitcode input (assembly, -fno-lto) goes to `output` unchanged, not through clang.

    Hard-linked when possible (no copy), copied otherwise; `dwo` is created empty.
    """
    problem = object_problem(module)
    if problem:
        raise BadInput(f"{module}: not LLVM bitcode, and not an ELF object either: it {problem}")
    prepare_outputs(output, dwo)
    tmp = scratch_path_for(output)
    try:
        try:
            os.link(module, tmp)
        except OSError:
            with open(module, "rb") as src, open(tmp, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
        if dwo:
            tmp_dwo = scratch_path_for(dwo)
            try:
                with open(tmp_dwo, "wb"):
                    pass
                install(tmp_dwo, dwo)
            except BaseException:
                remove_quietly(tmp_dwo)
                raise
        install(tmp, output)
    except BaseException:
        remove_quietly(tmp)
        raise


def prepare_outputs(output: str, dwo: str | None) -> None:
    """Check that the outputs' directories exist, and remove outputs of an earlier run so
    that a failure now cannot leave them looking fresh."""
    for path in (output, dwo):
        if path:
            if path.endswith("/") or os.path.isdir(path):
                raise BadInput(f"{path}: is a directory, not a file to write")
            directory = os.path.dirname(path)
            if directory and not os.path.isdir(directory):
                raise BadInput(f"{path}: its directory does not exist")
            writes_through(path)  # refuses what cannot be written, before clang runs
            remove_output(path)
