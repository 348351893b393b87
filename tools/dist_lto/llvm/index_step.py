"""LLD's index step: where stock LLD 22 writes its outputs, running it, reading them back.

With `--thinlto-prefix-replace=;PREFIX` LLD writes the index of the input spelled
`obj/a.o` to `PREFIX` + `obj/a.o.thinlto.bc` (plain concatenation) and its imports
beside it, so a build system can declare those paths. LLD writes them in place, not
atomically, so `run` points it at a staging directory and moves the result into the
index directory afterwards: one rename per top-level entry, not per module. The
`--thinlto-index-only=` list names, one per line, the modules the link loaded, as
`PREFIX` + spelling. Every one of these facts is pinned by a test on real LLD.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import signal
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from dist_lto.errors import BadInput, DistLtoError
from dist_lto.formats.response_file import response_file
from dist_lto.fsutil import move, read_input, remove_tree, write_atomic
from dist_lto.llvm.bitcode import is_bitcode
from dist_lto.path_spelling import climb, is_plain, norm
from dist_lto.process import children

LIST_NAME = "index.list"
ARGS_NAME = "index.args"
INDEX_SUFFIX = ".thinlto.bc"
IMPORTS_SUFFIX = ".imports"
STAGING_PREFIX = ".index-step-"
STAGING_SUFFIX = ".tmp"
"""Where LLD writes, inside the index directory, before its outputs are moved into place:
a directory `.index-step-RANDOM.tmp` made with `mkdtemp`, which never takes an existing
path, so it cannot be an input's; the index directory is held by one `plan` at a time
(`holding`), which removes what a killed run left."""
GUARD = "_/"
"""One level inserted below the index directory per `..` an input climbs above its start."""

DECLARATION_IMPORTS = ("-mllvm", "-import-declaration")
"""The thin link records a declaration summary (with its `dso_local` bit) for a callee or
variable of another module that it does not import, so the backend addresses it
directly as in-process ThinLTO does, not through the GOT (docs/parity.md). No code is
imported: program behaviour does not change."""

LINKER_PROGRAMS = re.compile(r"(ld|lld|ld\.lld|ld64\.lld|ld\.gold|ld\.bfd)(-[0-9.]+)?")
"""Programs taking linker flags directly (`ld.lld-22` too); anything else is a compiler
driver, given linker flags as `-Wl,`."""


@dataclass(frozen=True)
class Layout:
    """Where LLD puts the index step's outputs for a given index directory and inputs."""

    index_dir: str
    prefix: str
    """The `NEW` of `--thinlto-prefix-replace=;NEW`: the index dir plus guard levels."""

    @classmethod
    def for_inputs(cls, index_dir: str, modules: Iterable[str]) -> Layout:
        depth = max((climb(m) for m in modules if not is_plain(m)), default=0)
        return cls(index_dir, index_dir.rstrip("/") + "/" + GUARD * depth)

    @property
    def list_file(self) -> str:
        return posixpath.join(self.index_dir, LIST_NAME)

    @property
    def args_file(self) -> str:
        return posixpath.join(self.index_dir, ARGS_NAME)

    def index_file(self, module: str) -> str:
        return self.prefix + module + INDEX_SUFFIX

    def imports_file(self, module: str) -> str:
        return self.prefix + module + IMPORTS_SUFFIX

    def staging(self, staging: str) -> Layout:
        """The same layout rooted at `staging`, a directory inside the index directory."""
        root = self.index_dir.rstrip("/")
        return Layout(staging, staging + self.prefix[len(root) :])

    def flags(self, raw_linker: bool, declaration_imports: bool = True) -> list[str]:
        flags = [
            f"--thinlto-index-only={self.list_file}",
            "--thinlto-emit-imports-files",
            f"--thinlto-prefix-replace=;{self.prefix}",
        ]
        declarations = list(DECLARATION_IMPORTS) if declaration_imports else []
        if raw_linker:
            return [*flags, *declarations]
        wrapped = ["-Wl," + f for f in flags]
        return wrapped + (["-Wl," + ",".join(declarations)] if declarations else [])


@dataclass(frozen=True)
class Direct:
    """The index step as the linker's own command, not its driver's: the linker and its
    arguments before the inputs, the inputs as it takes them, what follows them."""

    before: list[str]
    inputs: list[str]
    after: list[str]


def is_raw_linker(command: list[str]) -> bool:
    return LINKER_PROGRAMS.fullmatch(os.path.basename(command[0])) is not None


def is_bitcode_file(path: str) -> bool:
    """Whether `path` starts with a bitcode magic; an unreadable file is bad input."""
    return is_bitcode(read_input(path, "object", 4))


def run(
    command: list[str],
    line: list[str],
    layout: Layout,
    declaration_imports: bool = True,
    hold: Hold | None = None,
    places: Mapping[str, str] | None = None,
    direct: Direct | None = None,
) -> None:
    """Run the index step: `command @index.args` plus the index-only flags (and
    `DECLARATION_IMPORTS` unless `declaration_imports` is False), holding the index
    directory (`hold`, the caller's, or one of its own for the step). With `direct`,
    the linker runs on its own line instead (`Direct`): `index.args` still holds
    `line`, so the step's outputs are the same either way.

    LLD writes its files in place and not atomically, so it writes them into a staging
    directory; they are moved into place only after it succeeded, and the list last. A
    step killed at any point leaves no partial index file at a declared path. `places`
    maps an index file's path in `layout` to the path it is declared at elsewhere: it
    goes there straight from staging, so no kill leaves it at an undeclared path. A
    failing command's status passes through with its stderr; its warnings are forwarded
    on success.
    """
    own = None
    if hold is None:
        hold = own = Hold(layout.index_dir)
    hold.take(create=True)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(layout.list_file)
        _remove_stale_staging(layout.index_dir, line)
        write_atomic(layout.args_file, response_file(line))
        staging_dir = ""
        try:
            with children.StopsHeld():  # no stop between the directory and its name
                staging_dir = tempfile.mkdtemp(
                    STAGING_SUFFIX, STAGING_PREFIX, layout.index_dir or "."
                )
            staging = layout.staging(
                posixpath.join(layout.index_dir, os.path.basename(staging_dir))
            )
            if direct is None:
                argv = [*command, "@" + layout.args_file,
                        *staging.flags(is_raw_linker(command), declaration_imports)]  # fmt: skip
            else:
                write_atomic(staging.args_file, response_file(direct.inputs))
                argv = [*direct.before, "@" + staging.args_file,
                        *staging.flags(True, declaration_imports), *direct.after]  # fmt: skip
            try:
                done = children.run(argv, stdout=children.DEVNULL)
            except children.CannotRun as err:
                raise BadInput(
                    f"cannot run the index command {command[0]!r}: {err.reason}"
                ) from None
            stderr = done.stderr.decode(errors="replace")
            if done.status != 0:
                raise DistLtoError(
                    f"index step failed: {command[0]} {children.describe_status(done.status)}",
                    status=children.action_status(done.status),
                    detail=stderr,
                )
            if direct is not None:
                os.unlink(staging.args_file)  # not one of LLD's outputs
            publish(staging, layout, places or {})
        finally:
            if staging_dir:
                remove_tree(staging_dir)
    finally:
        if own is not None:
            own.release()
    if stderr:
        sys.stderr.write(stderr)


def _staging_names(index_dir: str) -> list[str]:
    try:
        names = os.listdir(index_dir or ".")
    except OSError:
        return []
    return [n for n in names if n.startswith(STAGING_PREFIX) and n.endswith(STAGING_SUFFIX)]


def _remove_stale_staging(index_dir: str, line: list[str]) -> None:
    """Remove the staging directories killed runs left (the caller holds the directory),
    except one that holds a path of the link line: that is somebody's input."""
    for name in _staging_names(index_dir):
        stale = os.path.realpath(os.path.join(index_dir or ".", name)) + "/"
        if not any(
            os.path.realpath(arg).startswith(stale)
            for arg in line
            if arg and not arg.startswith("-") and "\0" not in arg
        ):
            remove_tree(stale)


class Hold:
    """One `plan`'s hold on its index directory, from its index step to its last plan:
    two at once would remove each other's index list and move files under each other.
    An advisory `flock` on the directory itself, so no file of ours sits among the
    outputs, and a killed holder's lock goes with it."""

    def __init__(self, index_dir: str) -> None:
        self.directory = index_dir or "."
        self.fd = -1

    def take(self, create: bool) -> None:
        """Hold the directory (made first with `create`; a missing one is not held
        otherwise), or fail at once saying it is busy."""
        import fcntl

        if self.fd >= 0:
            return
        if create:
            try:
                os.makedirs(self.directory, exist_ok=True)
            except OSError as err:
                raise BadInput(
                    f"{self.directory}: cannot create the index directory: {err.strerror}"
                ) from None
        try:
            fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            if create:
                raise
            return  # a replay of a directory that is not there fails on reading it
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise BadInput(
                f"{self.directory}: busy: another `dist-lto plan` is planning into this"
                " index directory; run one at a time"
            ) from None
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@contextlib.contextmanager
def holding(index_dir: str, replay: bool) -> Iterator[Hold]:
    """A `Hold` on `index_dir` for one `plan`, released at the end: taken at once for a
    replay, by `run` (after the checks, which must change nothing) otherwise."""
    hold = Hold(index_dir)
    try:
        if replay:
            hold.take(create=False)
        yield hold
    finally:
        hold.release()


def publish(staging: Layout, layout: Layout, places: Mapping[str, str]) -> None:
    """Move what LLD wrote under `staging` into `layout`'s places, the index files that
    `places` names (by their path in `layout`) to theirs, then write the list with its
    entries respelled for `layout`. Each move is a rename: one per top-level entry when
    the index directory starts out empty, as a build system's output does."""
    entries = read_list(staging)
    made: set[str] = set()
    for path, place in places.items():
        staged = staging.prefix + path[len(layout.prefix) :]
        if not os.path.isfile(staged):
            continue  # not loaded: LLD wrote no index for it
        parent = posixpath.dirname(place)
        if parent and parent not in made:
            os.makedirs(parent, exist_ok=True)
            made.add(parent)
        move(staged, place)
    _merge(staging.index_dir, layout.index_dir, skip=os.path.basename(staging.list_file))
    old = staging.prefix
    write_atomic(
        layout.list_file,
        "".join(layout.prefix + e[len(old) :] + "\n" for e in entries).encode(
            errors="surrogateescape"
        ),
    )


def _merge(src: str, dst: str, skip: str = "") -> None:
    """Rename each entry of `src` to the same name in `dst`, descending only where both
    are directories (so files already in `dst` and not in `src` stay)."""
    with os.scandir(src) as entries:
        for entry in entries:
            if entry.name == skip:
                continue
            target = os.path.join(dst, entry.name)
            if entry.is_dir(follow_symlinks=False) and os.path.isdir(target):
                _merge(entry.path, target)
            else:
                os.replace(entry.path, target)


def read_list(layout: Layout) -> list[str]:
    """The list LLD wrote (entries as written: `PREFIX` + spelling per loaded module)."""
    try:
        data = read_bytes(layout.list_file)
    except FileNotFoundError:
        raise BadInput(
            f"{layout.list_file}: index list missing"
            f" (has the index step run into {layout.index_dir}?)"
        ) from None
    except OSError as err:
        raise BadInput(f"{layout.list_file}: cannot read the index list: {err.strerror}") from None
    return [x for x in data.decode(errors="surrogateescape").split("\n") if x]


def read_bytes(path: str | bytes) -> bytes:
    """Whole-file read with raw `os` calls: at 100,000 imports files, `open()` costs double."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, 1 << 16)
        if len(data) < 1 << 16:
            return data
        chunks = [data]
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_imports(path: str) -> list[str]:
    """The modules an `.imports` file names, one per line (each line ends with a newline)."""
    try:
        data = read_bytes(path)
    except FileNotFoundError:
        raise BadInput(f"{path}: imports file missing") from None
    except OSError as err:
        raise BadInput(f"{path}: cannot read the imports file: {err.strerror}") from None
    if not data:
        return []
    names = data.decode(errors="surrogateescape").split("\n")
    if names[-1] == "":
        names.pop()
    return names if "" not in names else [x for x in names if x]


class ImportsPrefetch:
    """A forked process that reads the `.imports` files the index list names, and nothing else.

    On a machine that drops clean pages early (this project's VMs keep files for
    under a minute), reading 100,000 `.imports` files waits on the disk for each. The
    planner's first second is single-threaded parsing and checking, so a second core
    sits idle then: this process spends it bringing the files into the page cache. It
    writes nothing and its errors do not matter (the planner reads the files again
    and reports); `stop` ends it when the planner starts reading them itself.
    """

    def __init__(self, list_file: str) -> None:
        self.pid = os.fork()
        if self.pid == 0:  # the prefetcher: never returns
            try:
                children.forked()
                for entry in read_bytes(list_file).split(b"\n"):
                    if entry:
                        with contextlib.suppress(OSError):
                            read_bytes(entry + IMPORTS_SUFFIX.encode())
            finally:
                os._exit(0)

    def stop(self) -> None:
        if self.pid > 0:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.pid = 0


class DirListing:
    """Existence checks by listing each directory once, instead of one stat per file: for
    paths that name an entry of their directory (a file), as `os.path.lexists` would
    answer (tests/test_fast_paths.py)."""

    def __init__(self) -> None:
        self._dirs: dict[str, set[str]] = {}

    def exists(self, path: str, plain: bool = False) -> bool:
        """Whether `path` exists; `plain` says it is known to be normal already."""
        if not plain:
            path = norm(path)
        head, _, tail = path.rpartition("/")
        if not head and path.startswith("/"):
            head = "/"
        names = self._dirs.get(head)
        if names is None:
            try:
                names = set(os.listdir(head or "."))
            except (FileNotFoundError, NotADirectoryError):
                names = set()
            self._dirs[head] = names
        return tail in names
