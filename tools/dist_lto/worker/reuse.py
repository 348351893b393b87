"""Reuse a backend's object when an edit changed the modules it imports from but not
what it imports.

A backend's inputs are its module, its index and every module it imports from, whole:
a new function in `lstring.c` changes `lstring.o`, so every index that imports anything
from it records a new module hash and Buck2 runs those backends again. Almost all of
them write the same object. The worker remembers, per backend (its command, its output,
its compiler: a *slot*), the inputs of its last run and the object it wrote; when the
slot's module and index are the same apart from the hashes of modules it imports from,
it asks LLVM what the backend imports (`opt -passes=function-import -import-all-index`,
the importer of a distributed backend, which reads the imported functions, the globals
they reference and their metadata out of those modules) for the old inputs and the new,
and reuses the object when the two imported modules are the same bytes. A backend's
code depends on another module only through what it imports from it, so the object is
the one clang would write.

Layout under the store's directory (version 1):

    v1/ran-ahead/<sha256>  a link whose backends ran ahead of their requests (`ahead.py`)
    v1/ahead-<random>/     a worker's backends run ahead, removed when it stops
    v1/slots/<slot>.json   the last run: module and index digests, the index's modules
                           and their hashes, the object's SHA-256, the import digest
    v1/modules/<hash>      a module by its LLVM module hash
    v1/indexes/<sha256>    an index by its SHA-256 (a copy: LLD rewrites indexes in place)
    v1/objects/<sha256>    an object by its SHA-256

(modules and objects are hard links to the build's files where they can be).

Everything read back is checked: an object or index by its SHA-256, a module by the hash
it records; anything that differs is a miss. A worker, once started, removes what no
slot names any more (`Store.prune`), when no worker has for an hour. Standard library only.
"""

import hashlib
import json
import os

from dist_lto import TYPE_CHECKING
from dist_lto.fsutil import install, remove_quietly, temp_path_for, write_atomic
from dist_lto.llvm.bitcode import MST_CODE_HASH, module_has_hash, read_index_records
from dist_lto.process.children import CAPTURE, DEVNULL, CannotRun, TimedOut, run

if TYPE_CHECKING:
    from collections.abc import Callable

    from dist_lto.llvm.bitcode import IndexModules

LAYOUT = "v1"
SCHEME = b"dist-lto opt reuse 1\0"
SLOT_DAYS = 14
"""A slot whose backend has not run for this long is forgotten (`Store.prune`)."""
PRUNE_SECONDS = 3600.0
"""How long after one prune a worker's start does the next (`Store.prune_when_due`):
a prune reads every slot (about 60 µs of CPU each, 0.12 s for 2,000), too much for every
build command."""
IMPORT_SECONDS = 600.0
"""How long the importer may take before the backend runs without it."""


def _sha256_file(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None


def _hex(words: tuple[int, ...]) -> str:
    return "".join(f"{w:08x}" for w in words)


def _words(text: str) -> tuple[int, ...]:
    return tuple(int(text[i : i + 8], 16) for i in range(0, len(text), 8))


def _is_hex(value: object, size: int) -> bool:
    """A digest as the store writes it (so that it names a file in its directory)."""
    return (isinstance(value, str) and len(value) == size
            and all(c in "0123456789abcdef" for c in value))  # fmt: skip


def _relative(path: str) -> bool:
    """A path that names the same file below any directory it is resolved in."""
    return bool(path) and not os.path.isabs(path) and ".." not in path.split("/")


class Inputs:
    """What a backend reads, as its index names it."""

    __slots__ = ("index_sha", "masked", "modules", "primary_hash", "table")

    def __init__(
        self, index_sha: str, masked: str, modules: list[tuple[str, str]], primary_hash: str,
        table: "IndexModules",
    ) -> None:  # fmt: skip
        self.table = table
        """The index's module table as `check_primary` reads it: the index is read once."""
        self.index_sha = index_sha
        self.masked = masked
        """SHA-256 of the index without its module hashes."""
        self.modules = modules
        """(path, LLVM module hash) of every module in the index, the primary's included."""
        self.primary_hash = primary_hash


def read_inputs(module: str, index: str) -> Inputs | None:
    """The backend's inputs; None when reuse cannot apply (a path that is absolute or
    climbs, a module without a hash, an index that is not LLVM's)."""
    try:
        with open(index, "rb") as f:
            data = f.read()
        records = read_index_records(data, decode_summary=False)
    except (OSError, ValueError):
        return None
    table = records.module_table()
    if records.skip is not False or table is None:
        return None
    masked = hashlib.sha256(SCHEME)
    masked.update(records.other)
    masked.update(records.summary_bytes)
    modules: list[tuple[str, str]] = []
    for module_id, path, following in records.modules:
        found = [ops for code, ops in following if code == MST_CODE_HASH]
        text = os.fsdecode(path)
        if len(found) != 1 or not any(found[0]) or not _relative(text):
            return None
        modules.append((text, _hex(tuple(found[0]))))
        rest = [(code, ops) for code, ops in following if code != MST_CODE_HASH]
        masked.update(json.dumps([module_id, text, rest]).encode() + b"\0")
    primary = [h for p, h in modules if p == module]
    if len(primary) != 1:
        return None
    sha = hashlib.sha256(data).hexdigest()
    return Inputs(sha, masked.hexdigest(), modules, primary[0], table)


class Last:
    """A slot's last run, as `Backend.remember` wrote it."""

    __slots__ = ("imported", "index", "masked", "modules", "object", "primary_hash", "warnings")

    def __init__(self) -> None:
        self.primary_hash = ""
        self.index = ""
        self.masked = ""
        self.modules: list[tuple[str, str]] = []
        self.object = ""
        self.imported: str | None = None
        self.warnings = b""

    @classmethod
    def parse(cls, data: object) -> "Last | None":
        """None unless `data` is an entry as written (a damaged one is a miss)."""
        if not isinstance(data, dict):
            return None
        last = cls()
        for name, size in (("primary_hash", 40), ("index", 64), ("masked", 64), ("object", 64)):
            value = data.get(name)
            if not _is_hex(value, size):
                return None
            setattr(last, name, value)
        imported = data.get("imported")
        last.imported = imported if isinstance(imported, str) else None
        warnings = data.get("warnings")
        if not isinstance(warnings, str):
            return None
        try:
            last.warnings = warnings.encode("latin-1")
        except UnicodeEncodeError:
            return None
        modules = data.get("modules")
        if not isinstance(modules, list):
            return None
        for pair in modules:
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)
                    and _relative(pair[0]) and _is_hex(pair[1], 40)):  # fmt: skip
                return None
            last.modules.append((pair[0], pair[1]))
        return last


class Store:
    """The worker's reuse store at `root`; `note` takes its log lines."""

    def __init__(self, root: str, note: "Callable[[str], None]") -> None:
        self.root = os.path.join(root, LAYOUT)
        self.note = note
        self.compilers: dict[str, tuple[str, str] | None] = {}

    def compiler(self, compiler: str) -> "tuple[str, str] | None":
        """LLVM's `opt` beside `compiler`, and the compiler's identity (what a slot's key
        holds of it): found once per worker; None, said once, when either cannot be."""
        if compiler not in self.compilers:
            self.compilers[compiler] = self._find(compiler)
        return self.compilers[compiler]

    def _find(self, compiler: str) -> "tuple[str, str] | None":
        from dist_lto.distribute.cache_key import compiler_identity
        from dist_lto.distribute.result_cache import user_cache_dir
        from dist_lto.errors import DistLtoError
        from dist_lto.llvm.toolchain import which

        found = which(compiler)
        opt = os.path.join(os.path.dirname(os.path.realpath(found)), "opt") if found else ""
        if not opt or not os.access(opt, os.X_OK):
            self.note(f"no `opt` beside {compiler}: objects are not reused after edits")
            return None
        try:
            return opt, compiler_identity(compiler, user_cache_dir() or "")
        except DistLtoError as err:
            self.note(f"objects are not reused after edits: {err.message}")
            return None

    def path(self, kind: str, name: str) -> str:
        return os.path.join(self.root, kind, name)

    def prune(self, before: float) -> int:
        """Remove what no slot names, and slots unused for SLOT_DAYS, that were last
        changed before `before` (the worker's start: what its requests keep is newer);
        the number of files removed. A file removed under a request that has just named
        it makes that slot miss next time, nothing worse: everything is checked when read.
        """
        import time

        named: dict[str, set[str]] = {"objects": set(), "modules": set(), "indexes": set()}
        removed = 0
        stale = time.time() - SLOT_DAYS * 86400
        for entry in _entries(os.path.join(self.root, "slots")):
            try:
                if entry.stat().st_mtime < stale:
                    os.unlink(entry.path)
                    removed += 1
                    continue
                with open(entry.path, "rb") as f:
                    last = Last.parse(json.loads(f.read(1 << 24)))
            except (OSError, ValueError):
                continue
            if last is not None:
                named["objects"].add(last.object)
                named["indexes"].add(last.index)
                named["modules"].update(h for _, h in last.modules)
        for kind, keep in named.items():
            for entry in _entries(os.path.join(self.root, kind)):
                try:
                    if entry.name not in keep and entry.stat().st_ctime < before:
                        os.unlink(entry.path)
                        removed += 1
                except OSError:
                    pass
        return removed + self._prune_scratch(before)

    def prune_when_due(self, started: float) -> int:
        """What a worker started at `started` removes: all `prune` does when no worker
        has pruned for PRUNE_SECONDS (the mtime of `pruned`, set as a prune starts, so
        that workers started together do not all do it), else only what killed workers'
        backends run ahead left."""
        stamp = os.path.join(self.root, "pruned")
        try:
            due = os.stat(stamp).st_mtime <= started - PRUNE_SECONDS
        except FileNotFoundError:
            due = True
        except OSError:
            due = False
        if not due:
            return self._prune_scratch(started)
        try:  # into a store that exists: one that keeps nothing is never made
            fd = os.open(stamp, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC, 0o644)  # fmt: skip
            try:
                os.utime(fd)
            finally:
                os.close(fd)
        except OSError:
            return self._prune_scratch(started)
        return self.prune(started)

    def _prune_scratch(self, before: float) -> int:
        """Remove the directories of backends run ahead (`ahead.py`) that workers killed
        before `before` left behind."""
        import shutil

        from dist_lto.worker.ahead import SCRATCH_PREFIX

        removed = 0
        try:
            with os.scandir(self.root) as found:
                left = [e for e in found if e.name.startswith(SCRATCH_PREFIX)
                        and e.is_dir(follow_symlinks=False)]  # fmt: skip
        except OSError:
            return 0
        for entry in left:
            try:
                if entry.stat(follow_symlinks=False).st_mtime < before:
                    shutil.rmtree(entry.path)
                    removed += 1
            except OSError:
                pass
        return removed


def _entries(directory: str) -> "list[os.DirEntry[str]]":
    try:
        with os.scandir(directory) as found:
            return [e for e in found if e.is_file(follow_symlinks=False)]
    except OSError:
        return []


class Backend:
    """One backend request seen through the store: `try_reuse` before clang runs,
    `remember` after it has written the object."""

    def __init__(
        self, store: Store, command: list[str], module: str, index: str, out: str,
        inputs: Inputs, importer: str, identity: str,
    ) -> None:  # fmt: skip
        self.store = store
        self.module = module
        self.index = index
        self.out = out
        self.inputs = inputs
        self.importer = importer
        key = hashlib.sha256(SCHEME)
        from dist_lto import __version__

        key.update(__version__.encode() + b"\0" + identity.encode() + b"\0")
        key.update(json.dumps([command[1:], out]).encode())
        self.slot = store.path("slots", key.hexdigest() + ".json")
        self.imported: str | None = None
        """The import digest of the current inputs, once computed."""

    def _last(self) -> "Last | None":
        try:
            with open(self.slot, "rb") as f:
                return Last.parse(json.loads(f.read(1 << 24)))
        except (OSError, ValueError):
            return None

    def try_reuse(self, on_start: "Callable[[int], None] | None") -> bytes | None:
        """Write the slot's last object to the output when the backend would write the
        same, and return the warnings clang printed then; None (nothing written)
        otherwise."""
        last = self._last()
        now = self.inputs
        if last is None or last.primary_hash != now.primary_hash:
            return None
        if last.index == now.index_sha:  # the same inputs: what Buck2's own cache keys on
            self.imported = last.imported
        else:
            same_paths = [p for p, _ in last.modules] == [p for p, _ in now.modules]
            if last.masked != now.masked or not same_paths:
                return None
            self.imported = self._import_digest(None, self.index, on_start)
            before = last.imported or self._old_import_digest(last, on_start)
            if self.imported is None or before != self.imported:
                return None
        if not self._restore(last.object):
            return None
        self.store.note(f"{self.out}: the object of its last run, reused (the modules it"
                        " imports from changed, what it imports did not)")  # fmt: skip
        self.remember(last.warnings, last.object)
        return last.warnings

    def _import_digest(
        self, cwd: str | None, index: str, on_start: "Callable[[int], None] | None"
    ) -> str | None:
        """SHA-256 of the module as LLVM's importer leaves it, run in `cwd` (None: here;
        the worker has threads, so its own directory never changes)."""
        argv = [self.importer, "-passes=function-import", "-import-all-index",
                f"-summary-file={index}", self.module, "-o", "-"]  # fmt: skip
        if cwd is not None:
            argv = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', cwd, *argv]
        try:
            done = run(argv, stdout=CAPTURE, stdin=DEVNULL, timeout=IMPORT_SECONDS,
                       on_start=on_start)  # fmt: skip
        except (CannotRun, TimedOut):
            return None
        if done.status != 0 or not done.stdout:
            return None
        return hashlib.sha256(done.stdout).hexdigest()

    def _old_import_digest(
        self, last: "Last", on_start: "Callable[[int], None] | None"
    ) -> str | None:
        """The import digest of the slot's last inputs, from the store: its index and the
        modules it named, each checked, laid out at their paths in a scratch directory."""
        index_copy = os.path.abspath(self.store.path("indexes", last.index))
        if _sha256_file(index_copy) != last.index:
            return None
        import tempfile

        with tempfile.TemporaryDirectory(prefix="dist-lto-reuse-") as tree:
            for path, module_hash in last.modules:
                stored = os.path.abspath(self.store.path("modules", module_hash))
                try:
                    with open(stored, "rb") as f:
                        if module_has_hash(f.read(), _words(module_hash)) is not True:
                            return None
                except (OSError, ValueError):
                    return None
                placed = os.path.join(tree, path)
                os.makedirs(os.path.dirname(placed), exist_ok=True)
                os.symlink(stored, placed)
            return self._import_digest(tree, index_copy, on_start)

    def _restore(self, obj: str) -> bool:
        source = self.store.path("objects", obj)
        temporary = temp_path_for(self.out)
        try:
            with open(source, "rb") as f:
                data = f.read()
            if hashlib.sha256(data).hexdigest() != obj:
                return False
            with open(temporary, "wb") as f:
                f.write(data)
            install(temporary, self.out)
            return True
        except OSError:
            remove_quietly(temporary)
            return False

    def remember(self, warnings: bytes, obj: str | None = None) -> None:
        """Keep this run's inputs, object and clang's `warnings` for the slot's next run
        (best effort)."""
        try:
            if obj is None:
                obj = _sha256_file(self.out)
                if obj is None:
                    return
                self._keep(self.out, "objects", obj)
            for path, module_hash in self.inputs.modules:
                self._keep(path, "modules", module_hash)
            self._keep(self.index, "indexes", self.inputs.index_sha, link=False)
            entry = {
                "primary_hash": self.inputs.primary_hash,
                "index": self.inputs.index_sha,
                "masked": self.inputs.masked,
                "modules": self.inputs.modules,
                "object": obj,
                "imported": self.imported,
                "warnings": warnings.decode("latin-1"),
            }
            os.makedirs(os.path.dirname(self.slot), exist_ok=True)
            write_atomic(self.slot, json.dumps(entry).encode())
        except OSError:
            pass

    def _keep(self, path: str, kind: str, name: str, link: bool = True) -> None:
        """`path` kept as `kind`/`name`, once: a hard link (a copy across file systems,
        or when asked: LLD rewrites an index file in place)."""
        final = self.store.path(kind, name)
        if os.path.exists(final):
            return
        os.makedirs(os.path.dirname(final), exist_ok=True)
        temporary = temp_path_for(final)
        try:
            try:
                if not link:
                    raise OSError
                os.link(path, temporary)
            except OSError:
                import shutil

                shutil.copyfile(path, temporary)
            os.rename(temporary, final)
        finally:
            remove_quietly(temporary)


def backend_for(store: Store, command: list[str], module: str, index: str, out: str,
                dwo: str | None, inputs: Inputs | None = None) -> Backend | None:  # fmt: skip
    """The request as the store sees it; None when reuse does not apply to it (split
    DWARF, a compiler without `opt`, paths or an index it cannot reason about).
    `inputs`: what `read_inputs` gave for `module` and `index`, if read already."""
    if dwo is not None or any(flag.startswith("-gsplit-dwarf") for flag in command):
        return None
    tools = store.compiler(command[0])
    if tools is None:
        return None
    inputs = inputs or read_inputs(module, index)
    if inputs is None:
        return None
    return Backend(store, command, module, index, out, inputs, *tools)
