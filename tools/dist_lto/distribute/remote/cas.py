"""Content-addressed storage: digests, a job's input tree, uploads and downloads.

An input tree mirrors the files a job reads at the paths the job names them by,
relative to the link's directory, so the command LLD wrote runs unchanged in the
worker's build directory (and clang finds each module under the spelling its index
recorded). Blobs go up in batches when small and through ByteStream when not; the same
for downloads. Digests are SHA-256, computed once per file per distribution.
"""

import functools
import hashlib
import os
import threading
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from dist_lto.distribute.remote.connection import Connection, RemoteFailed
from dist_lto.distribute.remote.protos import bs_pb2, code_pb2, re_pb2
from dist_lto.errors import BadInput
from dist_lto.fsutil import open_input

CHUNK = 1 << 20
"""ByteStream chunk size."""
DEFAULT_BATCH_LIMIT = 4 * 1024 * 1024
"""Largest batch request when the engine names no limit (gRPC's default message size)."""
_BATCH_OVERHEAD = 64 * 1024


def digest_of(data: bytes) -> "re_pb2.Digest":
    return re_pb2.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


def message_blob(message: object) -> tuple["re_pb2.Digest", bytes]:
    """A message's canonical (deterministic) bytes and their digest."""
    data = message.SerializeToString(deterministic=True)  # type: ignore[attr-defined]
    return digest_of(data), data


def key(digest: "re_pb2.Digest") -> tuple[str, int]:
    return digest.hash, digest.size_bytes


@dataclass
class FileDigests:
    """SHA-256 of files, remembered by (device, inode, size, mtime) for the whole run."""

    _known: dict[tuple[int, int, int, int], "re_pb2.Digest"] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def digest(self, path: str) -> tuple["re_pb2.Digest", bool]:
        """(digest, executable) of the file at `path`; BadInput if it cannot be read."""
        try:
            st = os.stat(path)
            stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            executable = bool(st.st_mode & 0o100)
            with self._lock:
                known = self._known.get(stamp)
            if known is not None:
                return known, executable
            h = hashlib.sha256()
            with open(open_input(path, "input"), "rb") as f:
                while chunk := f.read(CHUNK):
                    h.update(chunk)
        except OSError as err:
            raise BadInput(f"{path}: cannot read input: {err.strerror}") from None
        digest = re_pb2.Digest(hash=h.hexdigest(), size_bytes=st.st_size)
        with self._lock:
            self._known[stamp] = digest
        return digest, executable


@dataclass
class InputTree:
    """The input root of one action: its Directory messages and where each blob comes from.

    `working_directory` is the link's directory relative to the root: the root is the
    deepest directory holding every input (`..` in an input's path moves it up).
    """

    root: "re_pb2.Digest"
    working_directory: str
    blobs: dict[tuple[str, int], bytes]
    """Directory messages (and other small blobs) by digest."""
    files: dict[tuple[str, int], str]
    """File blobs by digest -> a local path holding that content."""

    def digests(self) -> list["re_pb2.Digest"]:
        return [re_pb2.Digest(hash=h, size_bytes=s) for h, s in (*self.blobs, *self.files)]


def relative_parts(path: str, what: str) -> list[str]:
    """`path` (relative to the link's directory) as normalised components; may start with
    `..`. Absolute paths are refused: a worker has no such file (and must not read the
    host's)."""
    if os.path.isabs(path):
        raise BadInput(
            f"{path}: {what} is an absolute path; remote execution needs paths relative to"
            " the link's directory (link with relative object and output paths)"
        )
    norm = os.path.normpath(path)
    return [] if norm == "." else norm.split(os.sep)


def root_depth(paths: Iterable[list[str]]) -> int:
    """How many directories above the link's directory the input root must start."""
    return max((len(p) - len(_strip_up(p)) for p in paths), default=0)


def _strip_up(parts: list[str]) -> list[str]:
    i = 0
    while i < len(parts) and parts[i] == "..":
        i += 1
    return parts[i:]


def build_tree(inputs: list[str], digests: FileDigests) -> InputTree:
    """The input tree of `inputs` (paths relative to the current directory)."""
    parts_of = {path: relative_parts(path, "input") for path in inputs}
    depth = root_depth(parts_of.values())
    here = os.path.abspath(os.curdir).split(os.sep)[1:]
    if depth > len(here):
        raise BadInput(f"{inputs[0]}: inputs reach above the file system root")
    up = here[len(here) - depth :]
    working_directory = "/".join(up)
    tree: dict = {}
    files: dict[tuple[str, int], str] = {}
    for path, parts in parts_of.items():
        placed = up[: len(up) - _count_up(parts)] + _strip_up(parts)
        digest, executable = digests.digest(path)
        node = tree
        for name in placed[:-1]:
            child = node.setdefault(name, {})
            if not isinstance(child, dict):
                raise BadInput(f"{path}: input is both a file and a directory")
            node = child
        existing = node.get(placed[-1])
        if isinstance(existing, dict):
            raise BadInput(f"{path}: input is both a file and a directory")
        node[placed[-1]] = (digest, executable)
        files[key(digest)] = path
    blobs: dict[tuple[str, int], bytes] = {}
    root = _directory(tree, blobs)
    return InputTree(root, working_directory, blobs, files)


def _count_up(parts: list[str]) -> int:
    return len(parts) - len(_strip_up(parts))


def _directory(node: dict, blobs: dict[tuple[str, int], bytes]) -> "re_pb2.Digest":
    """A Directory message for `node` (children sorted by name, as REAPI requires)."""
    directory = re_pb2.Directory()
    for name in sorted(node):
        entry = node[name]
        if isinstance(entry, dict):
            directory.directories.add(name=name, digest=_directory(entry, blobs))
        else:
            digest, executable = entry
            directory.files.add(name=name, digest=digest, is_executable=executable)
    digest, data = message_blob(directory)
    blobs[key(digest)] = data
    return digest


class Store:
    """Uploads and downloads against one engine's CAS, remembering what it holds."""

    def __init__(self, connection: Connection, batch_limit: int) -> None:
        self.connection = connection
        self.batch_limit = max(batch_limit or DEFAULT_BATCH_LIMIT, 2 * _BATCH_OVERHEAD)
        self.present: set[tuple[str, int]] = set()
        self._lock = threading.Lock()

    # Uploads --------------------------------------------------------------------------

    def upload(
        self,
        blobs: dict[tuple[str, int], bytes],
        files: dict[tuple[str, int], str],
        *,
        force: bool = False,
        action_id: str = "",
    ) -> int:
        """Make sure the CAS holds every blob; returns how many were sent.

        With `force`, blobs believed present are checked again (the engine said some
        were missing)."""
        wanted = [*blobs, *files]
        with self._lock:
            unknown = wanted if force else [k for k in wanted if k not in self.present]
        if not unknown:
            return 0
        missing = self._find_missing(unknown, action_id)
        small: list[tuple[tuple[str, int], bytes]] = []
        size = 0
        sent = 0
        for k in missing:
            if k[1] > self.batch_limit - _BATCH_OVERHEAD:
                self._write(k, files[k], action_id)
                sent += 1
                continue
            data = blobs[k] if k in blobs else _read(files[k], k)
            if size + len(data) + 256 > self.batch_limit - _BATCH_OVERHEAD and small:
                self._batch_update(small, action_id)
                small, size = [], 0
            small.append((k, data))
            size += len(data) + 256
            sent += 1
        if small:
            self._batch_update(small, action_id)
        with self._lock:
            self.present.update(wanted)
        return sent

    def _find_missing(self, keys: list[tuple[str, int]], action_id: str) -> list[tuple[str, int]]:
        missing: list[tuple[str, int]] = []
        for start in range(0, len(keys), 4096):
            request = re_pb2.FindMissingBlobsRequest(
                instance_name=self.connection.instance,
                blob_digests=[re_pb2.Digest(hash=h, size_bytes=s) for h, s in
                              keys[start : start + 4096]],
            )  # fmt: skip
            response = self.connection.call(
                "FindMissingBlobs",
                functools.partial(
                    self.connection.cas.FindMissingBlobs,
                    request,
                    metadata=self.connection.metadata(action_id),
                    timeout=self.connection.settings.rpc_timeout,
                ),
            )
            missing.extend(key(d) for d in response.missing_blob_digests)
        return missing

    def _batch_update(self, items: list[tuple[tuple[str, int], bytes]], action_id: str) -> None:
        request = re_pb2.BatchUpdateBlobsRequest(
            instance_name=self.connection.instance,
            requests=[
                re_pb2.BatchUpdateBlobsRequest.Request(
                    digest=re_pb2.Digest(hash=h, size_bytes=s), data=data
                )
                for (h, s), data in items
            ],
        )
        response = self.connection.call(
            "BatchUpdateBlobs",
            lambda: self.connection.cas.BatchUpdateBlobs(
                request,
                metadata=self.connection.metadata(action_id),
                timeout=self.connection.settings.rpc_timeout,
            ),
        )
        for item in response.responses:
            if item.status.code != code_pb2.OK:
                raise RemoteFailed(
                    f"{self.connection.settings.address}: BatchUpdateBlobs: blob"
                    f" {item.digest.hash}/{item.digest.size_bytes}: {item.status.message}"
                )

    def _write(self, k: tuple[str, int], path: str, action_id: str) -> None:
        name = _resource(self.connection.instance, f"uploads/{uuid.uuid4()}/blobs/{k[0]}/{k[1]}")

        def requests() -> Iterator["bs_pb2.WriteRequest"]:
            offset = 0
            with open(path, "rb") as f:
                while True:
                    chunk = f.read(CHUNK)
                    last = offset + len(chunk) >= k[1]
                    yield bs_pb2.WriteRequest(
                        resource_name=name if offset == 0 else "",
                        write_offset=offset, finish_write=last, data=chunk,
                    )  # fmt: skip
                    offset += len(chunk)
                    if last or not chunk:
                        return

        response = self.connection.call(
            "ByteStream.Write",
            lambda: self.connection.bytestream.Write(
                requests(),
                metadata=self.connection.metadata(action_id),
                timeout=self.connection.settings.rpc_timeout,
            ),
        )
        if response.committed_size not in (k[1], -1):
            raise RemoteFailed(
                f"{self.connection.settings.address}: ByteStream.Write of {path}: the engine"
                f" committed {response.committed_size} of {k[1]} bytes"
            )

    # Downloads ------------------------------------------------------------------------

    def fetch(
        self, digests: list["re_pb2.Digest"], action_id: str = ""
    ) -> dict[tuple[str, int], bytes]:
        """The blobs with these digests; RemoteFailed naming any the CAS does not hold."""
        result: dict[tuple[str, int], bytes] = {}
        batch: list[re_pb2.Digest] = []
        size = 0
        for digest in digests:
            k = key(digest)
            if k in result:
                continue
            if digest.size_bytes == 0:
                result[k] = b""
            elif digest.size_bytes > self.batch_limit - _BATCH_OVERHEAD:
                result[k] = self._read(digest, action_id)
            else:
                if size + digest.size_bytes > self.batch_limit - _BATCH_OVERHEAD and batch:
                    result.update(self._batch_read(batch, action_id))
                    batch, size = [], 0
                batch.append(digest)
                size += digest.size_bytes
        if batch:
            result.update(self._batch_read(batch, action_id))
        return result

    def _batch_read(
        self, digests: list["re_pb2.Digest"], action_id: str
    ) -> dict[tuple[str, int], bytes]:
        request = re_pb2.BatchReadBlobsRequest(
            instance_name=self.connection.instance, digests=digests,
        )  # fmt: skip
        response = self.connection.call(
            "BatchReadBlobs",
            lambda: self.connection.cas.BatchReadBlobs(
                request,
                metadata=self.connection.metadata(action_id),
                timeout=self.connection.settings.rpc_timeout,
            ),
        )
        out: dict[tuple[str, int], bytes] = {}
        for item in response.responses:
            if item.status.code == code_pb2.NOT_FOUND:
                raise MissingBlob(self.connection.settings.address, item.digest)
            if item.status.code != code_pb2.OK:
                raise RemoteFailed(
                    f"{self.connection.settings.address}: BatchReadBlobs: blob"
                    f" {item.digest.hash}/{item.digest.size_bytes}: {item.status.message}"
                )
            check_blob(self.connection.settings.address, item.digest, item.data)
            out[key(item.digest)] = item.data
        return out

    def _read(self, digest: "re_pb2.Digest", action_id: str) -> bytes:
        name = _resource(self.connection.instance, f"blobs/{digest.hash}/{digest.size_bytes}")

        def read() -> bytes:
            stream = self.connection.bytestream.Read(
                bs_pb2.ReadRequest(resource_name=name),
                metadata=self.connection.metadata(action_id),
                timeout=self.connection.settings.rpc_timeout,
            )  # fmt: skip
            return b"".join(chunk.data for chunk in stream)

        try:
            data = self.connection.call("ByteStream.Read", read)
        except RemoteFailed as err:
            if "NOT_FOUND" in err.message:
                raise MissingBlob(self.connection.settings.address, digest) from None
            raise
        check_blob(self.connection.settings.address, digest, data)
        return data


class MissingBlob(RemoteFailed):
    """The CAS lost a blob an action result names (evicted): run the action again."""

    def __init__(self, address: str, digest: "re_pb2.Digest") -> None:
        super().__init__(f"{address}: the CAS does not hold blob {digest.hash}/{digest.size_bytes}")


class CorruptBlob(RemoteFailed):
    """A blob's bytes do not match its digest (a fault in the engine's storage or on the
    way): never written to an output; a cached result holding it is run again."""

    def __init__(self, address: str, digest: "re_pb2.Digest", size: int) -> None:
        super().__init__(
            f"{address}: blob {digest.hash}/{digest.size_bytes} came back corrupted"
            f" ({size} bytes with another digest)"
        )
        self.digest = digest


def check_blob(address: str, digest: "re_pb2.Digest", data: bytes) -> None:
    """CorruptBlob unless `data` has exactly `digest` (size and SHA-256)."""
    if len(data) != digest.size_bytes or hashlib.sha256(data).hexdigest() != digest.hash:
        raise CorruptBlob(address, digest, len(data))


def _read(path: str, k: tuple[str, int]) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise BadInput(f"{path}: cannot read input: {err.strerror}") from None
    if len(data) != k[1]:
        raise BadInput(f"{path}: input changed while the link ran")
    return data


def _resource(instance: str, rest: str) -> str:
    return f"{instance}/{rest}" if instance else rest
