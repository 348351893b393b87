"""Writing many outputs that each appear whole, with few system calls.

The planner writes one plan per object: at a large link, directory operations
dominate its time, so each file is written unnamed and linked into place once
complete (`WholeWriter`), not through a temporary name and a rename
(`fsutil.write_atomic`, for single files). Kept out of `fsutil`, which the per-module
`opt` path imports.
"""

import os

from dist_lto.fsutil import write_through, writes_through

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NONBLOCK
"""O_NONBLOCK: a FIFO in the way with nobody reading it fails (ENXIO), never blocks."""
_TMPFILE = getattr(os, "O_TMPFILE", 0)


def _write_all(fd: int, data: bytes) -> None:
    written = os.write(fd, data)
    if written < len(data):
        view = memoryview(data)[written:]
        while view:
            view = view[os.write(fd, view) :]


def write_direct(path: str, data: bytes, dir_fd: int | None = None) -> None:
    """Write `path` in place: only for what is complete as soon as it exists (an empty
    file), or a temporary name. An existing device, FIFO or symbolic link is written
    through, never replaced."""
    fd = os.open(path, _CREATE, 0o666, dir_fd=dir_fd)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


class WholeWriter:
    """Writes many files that appear complete or not at all, with few system calls
    (`write_atomic` for one file).

    Each file is written as an unnamed file in its directory (`O_TMPFILE`) and linked
    into place once complete: two directory operations fewer per file than writing a
    temporary name and renaming it, which dominate the planning of a large link
    (docs/benchmarks.md). Where that is not possible (the file
    exists already, no `O_TMPFILE` or `/proc`) it writes `.NAME.tmp-PID-RANDOM` and
    renames. Names are relative to a descriptor of the current directory: plans come
    grouped by directory, and one descriptor at a time bounds the ones held open.
    A path that exists as something other than a regular file (a device, a FIFO, a
    symbolic link) is written through, never replaced (`fsutil.writes_through`).
    """

    def __init__(self) -> None:
        self.suffix = f".tmp-{os.getpid()}-{os.urandom(4).hex()}"  # per process: workers fork
        self.tmpfile = bool(_TMPFILE)
        self.dir = ""
        self.dir_fd = -1

    def _enter(self, directory: str) -> int:
        if directory != self.dir or self.dir_fd < 0:
            self.close()
            os.makedirs(directory, exist_ok=True)
            self.dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            self.dir = directory
        return self.dir_fd

    def close(self) -> None:
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def write(self, path: str, data: bytes) -> None:
        head, _, name = path.rpartition("/")
        dir_fd = self._enter(head or ".")
        if self.tmpfile and self._link_unnamed(dir_fd, name, data):
            return
        tmp = f".{name}{self.suffix}"
        try:
            write_direct(tmp, data, dir_fd)
            if writes_through(path):
                write_through(f"{head}/{tmp}" if head else tmp, path)
                return
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:  # noqa: SIM105 (contextlib.suppress would cost the import this module avoids)
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
            raise

    def _link_unnamed(self, dir_fd: int, name: str, data: bytes) -> bool:
        """Write `name` as an unnamed file linked into place; False: write it another way."""
        try:
            fd = os.open(".", _TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o666, dir_fd=dir_fd)
        except OSError as err:
            import errno

            if err.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
            self.tmpfile = False
            return False
        try:
            _write_all(fd, data)
            # dst_dir_fd makes this linkat(..., AT_SYMLINK_FOLLOW): the file, not the link.
            os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=dir_fd)
        except FileExistsError:
            return False  # replaced by a rename, as linking cannot
        except FileNotFoundError:
            if os.path.isdir("/proc/self/fd"):
                raise
            self.tmpfile = False  # no /proc
            return False
        finally:
            os.close(fd)
        return True
