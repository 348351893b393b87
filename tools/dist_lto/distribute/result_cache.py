"""A result cache for backend jobs, shared by every link of a user and safe to race on.

The key is `cache_key.py`'s. Layout under the cache directory (version 2):

    v2/entries/<2 hex>/<key>/<i>   output i of a job; the entry directory's mtime is
                                   its last use
    v2/entries/<2 hex>/<key>/sums  the size and SHA-256 of every output (JSON)
    v2/tmp/                        entries being written or deleted
    v2/usage                       one line per link that used the cache: its hits,
                                   misses and stores (`dist-lto cache stats`)
    v2/index-aliases/<2 hex>/<k>   the key of a job's index as written -> the entry's
                                   key and the index's module table
                                   (`cache_key.KeyMaker`); pruned with the entries
    v2/compilers/<hash>.json       a compiler's identity, kept while its files' stats
                                   stay the same (the distributor keeps these in the
                                   per-user directory, whatever the cache directory)

Entries are written in `tmp/` and renamed into place whole, sums included, so a reader
sees a complete entry or none; an entry is deleted by renaming it into `tmp/` first, so
two links pruning at once never delete half an entry, and a reader that loses the race
sees a miss. A disk fault, a bad copy or another user of a shared cache can still change
an entry's files in place, and a changed object can pass every structural check and
link into a wrong program: so every restore hashes what it copies and compares it with
the entry's sums, and an entry that differs (or lacks its sums) is evicted, recorded in
`ResultCache.evicted` and treated as a miss. Every restored object is also checked like
a compiled one (`backend.object_problem`).

The cache stays inside itself: below its root, nothing is followed that is not a real
directory or file (`_real_dir`, `O_NOFOLLOW`): a symbolic link planted among the entries,
shards or temporaries is never read through, never written through and, when the cache
deletes it, unlinked itself, so no lookup, prune or clear reads or deletes outside it.
"""

import errno
import hashlib
import json
import os
import stat

from dist_lto import TYPE_CHECKING
from dist_lto.backend import object_problem
from dist_lto.errors import BadInput
from dist_lto.formats.jsonio import loads
from dist_lto.fsutil import install, remove_quietly, scratch_path_for

if TYPE_CHECKING:
    from typing import BinaryIO

LAYOUT = "v2"
"""v2: entries carry their outputs' sums (v1 entries had none and are never read)."""
SUMS = "sums"
ALIASES = "index-aliases"
USAGE = "usage"
USAGE_COMPACT_AT = 64 << 10
"""A usage log this long is summed into one line by the next prune."""
DEFAULT_MAX_SIZE = 2 << 30
READ_ONLY = 0o444
"""The mode of an entry's outputs: what lets `restore` hard-link them (`_place`)."""
STALE_TEMP_SECONDS = 24 * 3600
"""A temporary older than this was left by a killed link; pruning removes it."""

_SIZE_SUFFIXES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def user_cache_dir() -> str | None:
    """`$XDG_CACHE_HOME/dist-lto` (an absolute path, as the XDG specification wants), else
    `$HOME/.cache/dist-lto` when HOME names a directory that exists; None otherwise. Never
    the password database's home, which for a user without one is `/nonexistent`: a cache
    is created only where one was asked for or a default exists."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        return os.path.join(xdg, "dist-lto")
    home = os.environ.get("HOME", "")
    if os.path.isabs(home) and os.path.isdir(home):
        return os.path.join(home, ".cache", "dist-lto")
    return None


def default_cache_dir() -> str:
    """`user_cache_dir()`; BadInput when there is none."""
    found = user_cache_dir()
    if found is None:
        home = os.environ.get("HOME")
        why = "HOME is not set" if not home else f"HOME ({home}) is not a directory"
        raise BadInput(
            f"no default cache directory: {why}, nor XDG_CACHE_HOME: give --cache-dir DIR"
            " (or DIST_LTO_CACHE_DIR), or --no-cache"
        )
    return found


def parse_size(text: str) -> int:
    """`1073741824`, `500M`, `2G`, `2GiB` (powers of 1024) -> bytes; ValueError otherwise."""
    lowered = text.strip().lower().removesuffix("ib").removesuffix("b")
    number, suffix = lowered, ""
    if lowered and lowered[-1] in _SIZE_SUFFIXES:
        number, suffix = lowered[:-1], lowered[-1]
    if not number.isdigit() or not number.isascii():
        raise ValueError(f"not a size: {text!r} (use bytes or a K, M, G, T suffix)")
    return int(number) * _SIZE_SUFFIXES[suffix]


class ResultCache:
    """Job outputs by key under `root`, at most about `max_size` bytes after `prune`."""

    def __init__(self, root: str, max_size: int = DEFAULT_MAX_SIZE) -> None:
        self.root = root
        self.max_size = max_size
        self.entries = os.path.join(root, LAYOUT, "entries")
        self.tmp = os.path.join(root, LAYOUT, "tmp")
        self.evicted: list[tuple[str, str]] = []
        """(entry, what was wrong) for every damaged entry `restore` deleted."""

    def create(self) -> None:
        """Make the directories; OSError if the cache cannot be used (one of them is a
        symbolic link or not a directory)."""
        os.makedirs(self.entries, exist_ok=True)
        os.makedirs(self.tmp, exist_ok=True)
        for path in (os.path.join(self.root, LAYOUT), self.entries, self.tmp):
            if not _real_dir(path):
                raise OSError(errno.ENOTDIR, "not a directory of the cache's own", path)

    def entry(self, key: str) -> str:
        return os.path.join(self.entries, key[:2], key)

    def restore(self, key: str, outputs: list[str]) -> bool:
        """Put the entry's files at `outputs` (each through a temporary and a rename).

        False, with nothing written, when there is no complete entry, or when the entry is
        damaged: its files differ from its sums, or its object fails the checks a compiled
        one must pass. A damaged entry is deleted and added to `evicted`.
        """
        entry = self.entry(key)
        temps: list[str] = []
        if not _real_dir(os.path.dirname(entry)):
            return False  # no shard, or a link where it should be: nothing of ours
        if not _real_dir(entry):
            if os.path.islink(entry):
                return self._evict(entry, "it is a symbolic link, not the cache's own directory")
            return False
        try:
            sums = read_sums(entry)
            problem = None
            if sums is None:
                problem = "its sums are missing or malformed"
            elif len(sums) != len(outputs):
                problem = f"it holds {len(sums)} outputs, the job has {len(outputs)}"
            else:
                for i, output in enumerate(outputs):
                    tmp = scratch_path_for(output)
                    temps.append(tmp)
                    if _place(os.path.join(entry, str(i)), tmp) != sums[i]:
                        problem = f"output {i} differs from its recorded size and SHA-256"
                        break
        except FileNotFoundError:
            _remove_all(temps)
            if os.path.isdir(entry):  # entries appear and go whole: this one lost a file
                return self._evict(entry, "a file of it is missing")
            return False  # no entry, or pruned while we read it
        except OSError as err:
            _remove_all(temps)
            if err.errno != errno.ELOOP:
                raise
            return self._evict(entry, "a file of it is a symbolic link")
        except BaseException:
            _remove_all(temps)
            raise
        if problem is None:
            found = object_problem(temps[0])
            problem = None if found is None else f"its object {found}"
        if problem is not None:
            _remove_all(temps)
            return self._evict(entry, problem)
        done = 0
        try:
            for tmp, output in zip(temps, outputs, strict=True):
                install(tmp, output)
                # Where the output is already a link to the same file (an earlier restore),
                # rename(2) succeeds without doing anything: the temporary stays.
                remove_quietly(tmp)
                done += 1
        except BaseException:
            _remove_all(temps[done:])
            _remove_all(outputs[:done])
            raise
        try:  # noqa: SIM105 (the entry may have been pruned meanwhile: harmless)
            os.utime(entry)
        except OSError:
            pass
        return True

    def _evict(self, entry: str, problem: str) -> bool:
        """Delete a damaged entry and remember why; False (a miss) for `restore`."""
        if self._delete(entry):
            self.evicted.append((entry, problem))  # list.append: safe across threads
        return False

    def store(self, key: str, outputs: list[str]) -> None:
        """Copy `outputs` into a new entry with their sums; a link that stored the same
        key first wins."""
        entry = self.entry(key)
        if os.path.lexists(entry) or not _real_dir(self.tmp):
            return
        staging = os.path.join(self.tmp, f"{key}.{os.getpid()}.{os.urandom(4).hex()}")
        os.mkdir(staging)
        try:
            sums = [
                _copy(output, os.path.join(staging, str(i)), READ_ONLY)
                for i, output in enumerate(outputs)
            ]
            with open(os.path.join(staging, SUMS), "wb") as f:
                f.write(json.dumps([{"size": n, "sha256": h} for n, h in sums]).encode())
            os.makedirs(os.path.dirname(entry), exist_ok=True)
            if not _real_dir(os.path.dirname(entry)):
                _remove_tree(staging)  # a link where the shard should be: store nothing
                return
            try:
                os.rename(staging, entry)
            except OSError as err:
                # The entry existed when we renamed: another link stored it first (it may
                # be pruned again by now, which later links see as a miss).
                if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                _remove_tree(staging)
        except BaseException:
            _remove_tree(staging)
            raise

    def size(self) -> int:
        return sum(size for _, size, _ in self._scan())

    def prune(self, max_age: float | None = None) -> int:
        """Delete least recently used entries until the cache fits `max_size`, entries
        unused for more than `max_age` seconds, and temporaries that killed links left
        behind; returns how many entries went."""
        import time

        now = time.time()
        for name in _listdir(self.tmp) if _real_dir(self.tmp) else []:
            path = os.path.join(self.tmp, name)
            try:
                if now - os.lstat(path).st_mtime > STALE_TEMP_SECONDS:
                    _remove_tree(path)
            except OSError:
                continue
        entries = sorted(self._scan())
        total = sum(size for _, size, _ in entries)
        removed = 0
        oldest = None if max_age is None else (now - max_age) * 1e9
        for used, size, path in entries:
            if total <= self.max_size and (oldest is None or used >= oldest):
                break
            if self._delete(path):
                removed += 1
            total -= size  # deleted by us or by a link pruning at the same time
        self._prune_aliases()
        self._compact_usage()
        return removed

    def clear(self) -> int:
        """Delete every entry and the usage counts; returns how many entries went."""
        removed = sum(self._delete(path) for _, _, path in self._scan())
        self._prune_aliases(every=True)
        remove_quietly(os.path.join(self.root, LAYOUT, USAGE))
        return removed

    def _prune_aliases(self, every: bool = False) -> None:
        """Remove the remembered index keys whose entry is gone (`every`: all of them):
        each one only leads to an entry, and without pruning they would grow with every
        index ever written. One removed while its link has yet to store the entry costs
        that link's next warm run one decoding of the index."""
        root = os.path.join(self.root, LAYOUT, ALIASES)
        for shard in _listdir(root):
            shard_path = os.path.join(root, shard)
            for name in _listdir(shard_path):
                path = os.path.join(shard_path, name)
                if not every:
                    try:
                        with open(path, "rb") as f:
                            head = f.read(65)  # the key, then a newline and more
                        key = head[:64].decode("ascii") if head[64:] in (b"", b"\n") else ""
                    except (OSError, UnicodeDecodeError):
                        key = ""
                    if len(key) == 64 and os.path.isdir(self.entry(key)):
                        continue
                remove_quietly(path)
            try:  # noqa: SIM105 (an empty shard goes; one a link writes to meanwhile stays)
                os.rmdir(shard_path)
            except OSError:
                pass

    def listing(self) -> "list[Entry]":
        """Every entry, least recently used first."""
        found = []
        for used, size, path in sorted(self._scan()):
            try:
                outputs = sum(name != SUMS for name in os.listdir(path))
            except OSError:
                continue
            found.append(Entry(os.path.basename(path), path, size, used / 1e9, outputs))
        return found

    def find(self, prefix: str) -> "list[Entry]":
        """The entries whose key starts with `prefix` (at least two hex digits)."""
        return [e for e in self.listing() if e.key.startswith(prefix.lower())]

    def record_use(self, hits: int, misses: int, stores: int) -> None:
        """Add one link's counts to the usage log: one short line appended, which
        concurrent links can do at once (O_APPEND). Losing it costs only statistics."""
        if not (hits or misses or stores):
            return
        line = f"{hits} {misses} {stores}\n".encode()
        log = os.path.join(self.root, LAYOUT, USAGE)
        try:
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError:
            return
        try:
            os.write(fd, line)
        except OSError:
            pass
        finally:
            os.close(fd)

    def zero_usage(self) -> None:
        """Start the counts again from zero: the log goes, and the next link that
        records its use starts a new one."""
        remove_quietly(os.path.join(self.root, LAYOUT, USAGE))

    def usage(self) -> "Usage":
        """The links, hits, misses and stores the usage log counts."""
        return _read_usage(os.path.join(self.root, LAYOUT, USAGE))

    def _compact_usage(self) -> None:
        """Sum a long usage log into one line. The log is renamed away first, so a link
        appending meanwhile starts a new one rather than being overwritten."""
        log = os.path.join(self.root, LAYOUT, USAGE)
        try:
            if os.stat(log).st_size < USAGE_COMPACT_AT:
                return
            moved = os.path.join(self.tmp, f"usage.{os.getpid()}.{os.urandom(4).hex()}")
            os.rename(log, moved)
        except OSError:
            return
        total = _read_usage(moved)
        remove_quietly(moved)
        with open(log, "ab") as f:
            f.write(f"{total.hits} {total.misses} {total.stores} {total.links}\n".encode())

    def _scan(self) -> list[tuple[int, int, str]]:
        """(last use in ns, size, path) of every entry."""
        found: list[tuple[int, int, str]] = []
        if not (_real_dir(os.path.join(self.root, LAYOUT)) and _real_dir(self.entries)):
            return found  # a link where the cache's own directory should be: not ours
        for shard in _listdir(self.entries):
            shard_path = os.path.join(self.entries, shard)
            if not _real_dir(shard_path):
                continue
            for key in _listdir(shard_path):
                path = os.path.join(shard_path, key)
                try:
                    info = os.lstat(path)
                    if not stat.S_ISDIR(info.st_mode):
                        continue  # a link (or file) among the entries: never followed
                    size = sum(
                        os.lstat(os.path.join(path, f)).st_size
                        for f in os.listdir(path)
                        if f != SUMS  # outputs only: what the size limit is about
                    )
                except OSError:
                    continue  # deleted meanwhile
                found.append((info.st_mtime_ns, size, path))
        return found

    def _delete(self, entry: str) -> bool:
        """Remove an entry: rename it away first, so it vanishes whole. False if it was gone
        (or the temporaries' directory is not the cache's own)."""
        if not _real_dir(self.tmp):
            return False
        doomed = os.path.join(self.tmp, f"dead.{os.getpid()}.{os.urandom(6).hex()}")
        try:
            os.rename(entry, doomed)
        except OSError:
            return False
        _remove_tree(doomed)
        return True


class Entry:
    """One cache entry as `dist-lto cache list` shows it."""

    __slots__ = ("key", "last_use", "outputs", "path", "size")

    def __init__(self, key: str, path: str, size: int, last_use: float, outputs: int) -> None:
        self.key = key
        self.path = path
        self.size = size
        self.last_use = last_use
        """Seconds since the epoch."""
        self.outputs = outputs


class Usage:
    """Counts summed over the usage log."""

    __slots__ = ("hits", "links", "misses", "stores")

    def __init__(self) -> None:
        self.links = self.hits = self.misses = self.stores = 0


def _read_usage(path: str) -> Usage:
    """Sum `HITS MISSES STORES [LINKS]` lines; a torn or foreign line is skipped."""
    total = Usage()
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return total
    for line in data.splitlines():
        fields = line.split()
        if len(fields) not in (3, 4) or not all(x.isdigit() for x in fields):
            continue
        total.hits += int(fields[0])
        total.misses += int(fields[1])
        total.stores += int(fields[2])
        total.links += int(fields[3]) if len(fields) == 4 else 1
    return total


def _copy(src: str, dst: str, mode: int = 0o666) -> tuple[int, str]:
    """Copy `src` to a new file `dst` (an entry's files are read-only: see `_place`); the
    size and SHA-256 of what was copied."""
    h = hashlib.sha256()
    size = 0
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    with _open_own(src) as fin, open(fd, "wb") as fout:
        while chunk := fin.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
            fout.write(chunk)
    return size, h.hexdigest()


def _place(src: str, dst: str) -> tuple[int, str]:
    """Put an entry's file `src` at the new name `dst`; the size and SHA-256 of what is
    there now.

    A read-only file (as `store` writes them) is hard-linked: creating a file costs far
    more than hashing one, so a warm link's restores cost little more than their reads.
    What is hashed is the file linked (same device and inode), after the link, as a
    copy's bytes are hashed once written; and every restore hashes again, so an output
    changed in place (which changes the entry too) is caught by the next restore like
    any damaged entry. A writable file, or a directory that takes no link (another file
    system), is copied."""
    with _open_own(src) as fin:
        info = os.fstat(fin.fileno())
        if info.st_mode & 0o222:
            return _copy(src, dst)
        try:
            os.link(src, dst, follow_symlinks=False)
        except OSError as err:
            if err.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                raise
            return _copy(src, dst)
        placed = os.lstat(dst)
        if (placed.st_dev, placed.st_ino) != (info.st_dev, info.st_ino):
            return 0, "replaced while it was restored"  # never equal to a recorded sum
        h = hashlib.sha256()
        size = 0
        while chunk := fin.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
        try:  # noqa: SIM105 (an output as fresh as a copy; the entry's age is its directory's)
            os.utime(dst)
        except OSError:
            pass
    return size, h.hexdigest()


def read_sums(entry: str) -> list[tuple[int, str]] | None:
    """The entry's recorded (size, SHA-256) per output; None when malformed.
    FileNotFoundError when the entry (or its sums) does not exist."""
    with _open_own(os.path.join(entry, SUMS)) as f:
        data = f.read()
    try:
        doc = loads(data)
        return [(int(item["size"]), str(item["sha256"])) for item in doc]
    except (ValueError, TypeError, KeyError):
        return None


def _remove_all(paths: list[str]) -> None:
    for path in paths:
        remove_quietly(path)


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _real_dir(path: str) -> bool:
    """Whether `path` is a directory itself, not a symbolic link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except (OSError, ValueError):
        return False


def _open_own(path: str) -> "BinaryIO":
    """`path` opened for reading if it is a regular file itself: a symbolic link among an
    entry's files is not followed (ELOOP), nor a FIFO waited on."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise FileNotFoundError(errno.ENOENT, "not a regular file of the cache's own", path)
    return os.fdopen(fd, "rb")


def _remove_tree(path: str) -> None:
    """Remove an entry-shaped directory (flat files only); a symbolic link where it should
    be is unlinked itself, never the files it points at."""
    if not _real_dir(path):
        remove_quietly(path)
        return
    for name in _listdir(path):
        remove_quietly(os.path.join(path, name))
    try:  # noqa: SIM105
        os.rmdir(path)
    except OSError:
        pass
