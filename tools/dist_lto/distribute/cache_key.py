"""The key of a backend job's result: what must change whenever its outputs could.

Key: SHA-256 over the version of dist-lto (its strict runner decides what a job's
outputs are), the compiler's identity (its resolved path, `--version`, the hash of
its binary, and the size and time of the LLVM libraries it loads; with a wrapper, that of
the programs it is given too), the job's arguments
with every input and output path replaced by a placeholder (`<input:0>`,
`<output:0>`), and the contents of every input. An individual index names modules by
path, and LLD's DTLTO names archive members after its process id, so an index is
hashed in parts (`llvm/bitcode.py`, `read_index_records`): its module paths mapped to the
same placeholders, its summary with every value named by its GUID
(`llvm/summary.py`), the rest as written. Value: the job's outputs, as files.

A compiler's identity is remembered under the per-user tools directory
(`v2/compilers/<hash>.json`) with the stats of every file it covers, and computed again
when any of them changes.
"""

import hashlib
import json
import os

from dist_lto import TYPE_CHECKING, __version__
from dist_lto.distribute.result_cache import LAYOUT
from dist_lto.errors import BadInput
from dist_lto.formats.jobfile import Job, JobFile
from dist_lto.formats.jsonio import loads
from dist_lto.fsutil import open_input, read_input, write_atomic
from dist_lto.llvm.bitcode import IndexModules, IndexRecords, check_whole, read_index_records
from dist_lto.llvm.summary import canonical_summary
from dist_lto.llvm.toolchain import which

if TYPE_CHECKING:
    from collections.abc import Callable

KEY_SCHEME = b"dist-lto result cache 2\0" + __version__.encode() + b"\0"
"""Changes whenever the key's composition changes, so old entries are never misread;
with the tool's version, since what a job leaves at its outputs is our runner's doing."""


def _stat_id(path: str) -> list[object]:
    st = os.stat(path)
    return [path, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]


def compiler_identity(compiler: str, cache_root: str) -> str:
    """A hex digest that changes whenever `compiler` (or the LLVM libraries it loads) does.

    Computing it reads the binary and runs `--version`; the result is remembered in the
    cache with the stats of every file it covers, and recomputed when any of them
    changes. BadInput if the compiler cannot be found or run.
    """
    found = which(compiler)
    if found is None:
        raise BadInput(f"{compiler}: compiler not found (common.args[0] of the job file)")
    exe = os.path.realpath(found)
    memo = os.path.join(
        cache_root, LAYOUT, "compilers", hashlib.sha256(os.fsencode(exe)).hexdigest()[:32] + ".json"
    )
    try:
        if not cache_root:
            raise FileNotFoundError  # nowhere to remember it (`settings.tools_dir`)
        with open(memo, "rb") as f:
            known = loads(f.read())
        if all(_stat_id(str(entry[0])) == entry for entry in known["files"]):
            return str(known["identity"])
    except (OSError, ValueError, TypeError, KeyError, IndexError):
        pass
    with open(exe, "rb") as f:
        binary = f.read()
    libraries = _llvm_libraries(exe, binary)
    files = [_stat_id(path) for path in (exe, *libraries)]
    version = _version(exe)
    digest = hashlib.sha256()
    for part in (exe, version, hashlib.sha256(binary).hexdigest()):
        digest.update(part.encode() + b"\0")
    for path, size, mtime, *_ in files[1:]:
        digest.update(f"{os.path.basename(str(path))}:{size}:{mtime}\0".encode())
    identity = digest.hexdigest()
    try:
        if cache_root:
            os.makedirs(os.path.dirname(memo), exist_ok=True)
            write_atomic(memo, json.dumps({"identity": identity, "files": files}).encode())
    except OSError:
        pass  # remembering is an optimisation
    return identity


def command_identity(args: list[str], cache_root: str) -> str:
    """The identity of the programs that `args` (a job file's `common.args`) starts.

    That is the compiler, `args[0]`, and, when it is a wrapper, the programs named
    right after it up to the first option: LLD puts its
    `--thinlto-remote-compiler-prepend-arg=` values there (`ccache /usr/bin/clang -c
    ...`), and a compiler upgraded under an unchanged wrapper must change the key too.
    """
    parts = [compiler_identity(args[0], cache_root)]
    for arg in args[1:]:
        if arg.startswith("-"):
            break
        if which(arg) is not None:
            parts.append(compiler_identity(arg, cache_root))
    if len(parts) == 1:
        return parts[0]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _llvm_libraries(exe: str, binary: bytes) -> list[str]:
    """The libraries in the toolchain's `lib/` that the binary names (clang's code lives
    in libclang-cpp and libLLVM, not in the small `clang` executable)."""
    libdir = os.path.join(os.path.dirname(os.path.dirname(exe)), "lib")
    try:
        names = sorted(os.listdir(libdir))
    except OSError:
        return []
    return [
        os.path.realpath(os.path.join(libdir, name))
        for name in names
        if ".so" in name and b"\0" + os.fsencode(name) + b"\0" in binary
    ]


VERSION_SECONDS = 60.0
"""How long `clang --version` may take before the compiler is called bad."""


def _version(exe: str) -> str:
    from dist_lto.process import children

    try:
        done = children.run(
            [exe, "--version"],
            stdout=children.CAPTURE,
            stdin=children.DEVNULL,
            timeout=VERSION_SECONDS,
        )
    except children.CannotRun as err:
        raise BadInput(f"{exe}: cannot run the compiler: {err.reason}") from None
    except children.TimedOut:
        raise BadInput(
            f"{exe}: cannot run the compiler: `--version` gave no answer in {VERSION_SECONDS:g} s"
        ) from None
    if done.status != 0:
        raise BadInput(f"{exe}: `--version` {children.describe_status(done.status)}")
    return done.stdout.decode(errors="replace")


class KeyMaker:
    """Cache keys for the jobs of one job file; each input's digest is computed once.

    A job's key hashes its indexes in canonical form (`_index_digest`), which means
    decoding every summary record: ~1 ms per job on zstd, ~11 ms on git with declaration
    imports. So the key of the index *as written* (its bytes and the paths of the job's
    inputs, which name its modules: `_raw_index_digest`, no decoding) is remembered
    under `aliases_dir` with the canonical key it led to and the index's module table
    (what `check_primary` reads). A warm job reads that alias instead of decoding; a link
    whose index is written differently (LLD's numbering follows its hash tables, so
    some indexes change with its process id) decodes once and adds an alias. An alias
    is only a shortcut to what its index's bytes determine: the canonical key alone
    decides what is reused, and an alias is used only when none of the index's modules
    is spelled like the index or an output (whose paths the alias does not cover)."""

    def __init__(self, jobs: JobFile, compiler_id: str, aliases_dir: str | None = None) -> None:
        self.jobs = jobs
        self.compiler_id = compiler_id
        self.aliases_dir = aliases_dir
        self._digests: dict[str, bytes] = {}

    def key(self, job: Job, index: "WrittenIndex | None" = None) -> str | None:
        """The job's key; None when an input cannot be read (clang will say why). `index`
        is the job's index as `read_index` read it, if the caller has it; a remembered
        module table is left in it (`WrittenIndex.modules`)."""
        if self.aliases_dir is None:
            return self._key(job, self._index_digest)
        if index is None:
            try:
                index = read_index(job.index)
            except BadInput:
                return None
        read = index

        def raw(path: str, names: dict[str, str]) -> bytes:
            return _raw_index_digest(read, job, self.jobs)

        def written(path: str, names: dict[str, str]) -> bytes:
            return _written_index_digest(read, names)

        def canonical(path: str, names: dict[str, str]) -> bytes:
            return _canonical_index_digest(read.data, names)

        raw_alias = None
        if not _names_linker_temporaries(job):
            raw_alias = self._alias(job, raw)
            if raw_alias is None:
                return None
            remembered = _read_alias(raw_alias, job)
            if remembered is not None and remembered[1] is not None:
                index.table = remembered[1]
                return remembered[0]
        written_alias = self._alias(job, written)
        remembered = _read_alias(written_alias, job) if written_alias is not None else None
        if remembered is not None:
            return remembered[0]
        key = self._key(job, canonical)
        if key is None:
            return None
        # The raw alias only with a module table, which shows that no module is spelled
        # like a path it does not cover. Not written when a written alias led here, nor
        # for archive members LLD named after its process id: such an index is written
        # anew by every link.
        table = index.modules()
        for alias, text in ((raw_alias, _alias_text(key, table) if table is not None else None),
                            (written_alias, _alias_text(key, None))):  # fmt: skip
            if alias is None or text is None:
                continue
            try:
                os.makedirs(os.path.dirname(alias), exist_ok=True)
                write_atomic(alias, text)
            except OSError:
                pass  # remembering is an optimisation
        return key

    def _alias(
        self, job: Job, index_digest: "Callable[[str, dict[str, str]], bytes]"
    ) -> str | None:
        """Where the alias of the job's key with `index_digest` lives; None without a key."""
        assert self.aliases_dir is not None
        key = self._key(job, index_digest)
        return None if key is None else os.path.join(self.aliases_dir, key[:2], key)

    def _key(self, job: Job, index_digest: "Callable[[str, dict[str, str]], bytes]") -> str | None:
        names: dict[str, str] = {}
        for prefix, paths in (
            ("output", job.outputs),
            ("input", job.inputs),
            ("common-input", self.jobs.inputs),
        ):
            for i, path in enumerate(paths):
                names.setdefault(path, f"<{prefix}:{i}>")
        h = hashlib.sha256(KEY_SCHEME)
        h.update(self.compiler_id.encode() + b"\0")
        args = self.jobs.args[1:] + job.args
        h.update(b"%d\0" % len(args))
        for arg in args:
            h.update(_placeholder(arg, names).encode(errors="surrogateescape") + b"\0")
        h.update(b"%d\0" % len(job.outputs))
        try:
            for i, path in enumerate(self.jobs.inputs):
                h.update(b"c%d:" % i + self._digest(path))
            for i, path in enumerate(job.inputs):
                digest = index_digest(path, names) if i == 1 else self._digest(path)
                h.update(b"j%d:" % i + digest)
        except (OSError, BadInput):  # unreadable or not a regular file: no key
            return None
        return h.hexdigest()

    def _digest(self, path: str) -> bytes:
        digest = self._digests.get(path)
        if digest is None:
            with open(open_input(path, "job input"), "rb") as f:
                digest = hashlib.file_digest(f, "sha256").digest()
            self._digests[path] = digest
        return digest

    def _index_digest(self, path: str, names: dict[str, str]) -> bytes:
        return _canonical_index_digest(read_input(path, "ThinLTO index"), names)


def _canonical_index_digest(data: bytes, names: dict[str, str]) -> bytes:
    """The index in canonical form: module paths as placeholders, the summary with its
    values named by GUID (`canonical_summary`), the rest as written."""
    try:
        index = read_index_records(data)
    except ValueError:
        return hashlib.sha256(b"raw\0" + data).digest()  # clang will reject it
    modules = {}
    for module_id, module_path, records in index.modules:
        name = os.fsdecode(module_path)
        modules[module_id] = f"{names.get(name, name)}\0{records}"
    summary = canonical_summary(index.summary, modules) if index.summary is not None else None
    h = hashlib.sha256(b"index\0")
    if summary is None:  # as written: module ids and value numbering included
        h.update(repr(sorted(modules.items())).encode(errors="surrogateescape"))
        h.update(b"\0raw summary\0" + index.summary_bytes)
    else:
        h.update(repr(sorted(modules.values())).encode(errors="surrogateescape"))
        h.update(b"\0summary\0" + summary)
    h.update(b"\0other\0" + index.other)
    return h.digest()


class WrittenIndex:
    """A job's index as read once, for both its check (`backend.check_primary`) and its
    key: its bytes, and its module table once decoded or remembered."""

    __slots__ = ("_records", "data", "table")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.table: IndexModules | None = None
        """The module table, when known (`modules`, or an alias that remembered it)."""
        self._records: IndexRecords | bool | None = False

    def records(self) -> IndexRecords | None:
        """Its parts with the summary as bytes (`read_index_records`); None when it is
        not a well-formed index."""
        if self._records is False:
            try:
                self._records = read_index_records(self.data, decode_summary=False)
            except ValueError:
                self._records = None
        assert self._records is not True
        return self._records

    def modules(self) -> IndexModules | None:
        """Its module table as `parse_index` reads it; None when the index is not whole
        or not laid out as LLVM writes it (`check_primary` then reads it and says why)."""
        if self.table is None:
            records = self.records()
            try:
                check_whole(self.data)
            except ValueError:
                return None
            self.table = records.module_table() if records is not None else None
        return self.table


def read_index(path: str) -> WrittenIndex:
    """The index at `path`; BadInput when it cannot be read."""
    return WrittenIndex(read_input(path, "ThinLTO index"))


def _written_index_digest(index: WrittenIndex, names: dict[str, str]) -> bytes:
    """The index as written, its module table with paths as placeholders (module ids
    kept: the summary names modules by id), every other byte as it is: the same for two
    links whose members LLD named after different process ids but whose summaries it
    wrote alike."""
    records = index.records()
    if records is None:
        return hashlib.sha256(b"raw\0" + index.data).digest()
    modules = []
    for module_id, module_path, module_records in records.modules:
        name = os.fsdecode(module_path)
        modules.append((module_id, names.get(name, name), module_records))
    h = hashlib.sha256(b"written index\0")
    h.update(repr(sorted(modules)).encode(errors="surrogateescape"))
    h.update(b"\0summary\0" + records.summary_bytes)
    h.update(b"\0other\0" + records.other)
    return h.digest()


def _names_linker_temporaries(job: Job) -> bool:
    """Whether the job reads archive members that LLD wrote out under names with its
    process id (`lib.a(m.o at 84).2.1F3A.o`, for outputs `<module>.<job>.<pid>.native.o`):
    the index names them too, so an alias of its bytes would never be read again."""
    head, _, pid = job.output.removesuffix(".native.o").rpartition(".")
    if not head or not pid.isdigit() or not job.output.endswith(".native.o"):
        return False
    suffix = f".{int(pid):X}.o"
    return any(path.endswith(suffix) for i, path in enumerate(job.inputs) if i != 1)


def _raw_index_digest(index: WrittenIndex, job: Job, jobs: JobFile) -> bytes:
    """The index as written, with the paths of the job's inputs and the common inputs in
    order: everything `_index_digest` reads, except the paths of the outputs and of the
    index itself, which LLD names after its process id (see `KeyMaker`)."""
    h = hashlib.sha256(b"index as written\0%d\0" % len(index.data))
    h.update(index.data)
    inputs = [path for i, path in enumerate(job.inputs) if i != 1]
    for paths in (inputs, jobs.inputs):
        h.update(b"\0%d\0" % len(paths))
        h.update(b"\0".join(os.fsencode(path) for path in paths))
    return h.digest()


_HEX = frozenset(b"0123456789abcdef")


def _alias_text(key: str, modules: IndexModules | None) -> bytes:
    """An alias file: the canonical key on its first line, then the index's module table
    as JSON (paths as Latin-1, which maps bytes to characters one to one), or null."""
    table = None
    if modules is not None:
        table = {
            "skip": modules.skip,
            "paths": [path.decode("latin-1") for path in modules.paths],
            "hashes": [" ".join(map(str, h)) for h in modules.hashes],
        }
    return key.encode() + b"\n" + json.dumps(table, separators=(",", ":")).encode()


def _read_alias(path: str, job: Job) -> "tuple[str, IndexModules | None] | None":
    """The canonical key and module table an alias remembers; None when there is no
    usable alias: missing, malformed, or naming a module spelled like the index or an
    output."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if len(data) < 65 or data[64:65] != b"\n" or not _HEX.issuperset(data[:64]):
        return None
    try:
        table = json.loads(data[65:])  # ours, written above: no need for `loads`' checks
        if table is None:
            return data[:64].decode(), None
        paths = [p.encode("latin-1") for p in table["paths"]]
        hashes = [tuple(map(int, h.split())) for h in table["hashes"]]
        skip = table["skip"]
        if len(hashes) != len(paths) or not isinstance(skip, bool):
            return None
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    unnamed = {os.fsencode(path) for path in (*job.outputs, job.index)}
    if not unnamed.isdisjoint(paths):
        return None
    return data[:64].decode(), IndexModules(paths, skip, hashes)


def _placeholder(arg: str, names: dict[str, str]) -> str:
    """`arg` with a path it is, or that follows an `=` in it, replaced by its placeholder."""
    if arg in names:
        return names[arg]
    at = arg.find("=")
    while at != -1:
        name = names.get(arg[at + 1 :])
        if name is not None:
            return arg[: at + 1] + name
        at = arg.find("=", at + 1)
    return arg
