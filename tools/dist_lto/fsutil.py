"""Writing outputs so that nothing half-written ever sits at a declared path, and
nothing that is not ours is ever replaced.

Every output goes to a temporary name in its final directory and is renamed
into place only when complete; a killed process leaves at most a dot-file
temporary, never a partial output. An output path that already exists as something
other than a regular file (a character device such as `/dev/null`, a FIFO, a
symbolic link) is not ours to replace: it is written through, as clang and `cp` do
(`writes_through`), or refused in one line. Standard library only.
"""

import os
import stat  # imported by `os` itself: free

from dist_lto.errors import BadInput, DistLtoError

# No contextlib or collections.abc: `dist-lto opt` imports this module once per
# backend action, and those two pull in `collections` and `functools`.


def temp_path_for(path: str) -> str:
    """A unique temporary name beside `path` (same directory, so rename is atomic)."""
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.tmp-{os.getpid()}-{os.urandom(4).hex()}")


def scratch_path_for(path: str) -> str:
    """A unique temporary name to write `path`'s content under: beside it (`temp_path_for`),
    or in TMPDIR when `path` is written through (`writes_through`), whose directory
    (`/dev`, `/proc/self/fd`) may not take new files."""
    if writes_through(path):
        scratch = os.environ.get("TMPDIR") or "/tmp"
        return temp_path_for(os.path.join(scratch, os.path.basename(path)))
    return temp_path_for(path)


def writes_through(path: str) -> bool:
    """Whether `path` is to be written through rather than replaced by a rename.

    False: it does not exist or is a regular file (ours to replace atomically). True: it
    is a character device, a FIFO with a reader, or a symbolic link to one of those or
    to a regular file; writing opens it, as clang and `cp` do, and never replaces it.
    Anything else cannot be written either way and is refused (BadInput): a directory,
    a block device, a socket, a FIFO nobody reads (writing would block), a symbolic
    link to nothing."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False  # absent, or unreachable: the rename reports it
    if stat.S_ISREG(mode):
        return False
    if stat.S_ISDIR(mode):
        raise BadInput(f"{path}: is a directory, not a file to write")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as err:
        raise BadInput(f"{path}: {_cannot_write_through(path, err)}") from None
    try:
        target = os.fstat(fd).st_mode
    finally:
        os.close(fd)
    if stat.S_ISCHR(target) or stat.S_ISFIFO(target) or stat.S_ISREG(target):
        return True
    raise BadInput(f"{path}: is {_kind(target)}, not a file to write")


def _kind(mode: int) -> str:
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def _cannot_write_through(path: str, err: OSError) -> str:
    import errno  # only on this path: `dist-lto opt` imports this module per action

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "is a symbolic link to nothing, not a file to write"
    if stat.S_ISFIFO(mode) and err.errno == errno.ENXIO:
        return "is a FIFO that nobody reads: writing it would block"
    if not stat.S_ISREG(mode) and not stat.S_ISCHR(mode) and not stat.S_ISFIFO(mode):
        return f"is {_kind(mode)}, not a file to write"
    return f"cannot write: {err.strerror}"


def write_through(source: str, path: str) -> None:
    """Copy the complete file `source` into the existing `path` (see `writes_through`),
    then remove `source`."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as err:
        raise BadInput(f"{path}: {_cannot_write_through(path, err)}") from None
    try:
        os.set_blocking(fd, True)
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.ftruncate(fd, 0)
        with open(source, "rb") as src:
            while chunk := src.read(1 << 20):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
    except OSError as err:
        raise write_failure(err, path) from None
    finally:
        os.close(fd)
    remove_quietly(source)


def install(source: str, path: str) -> None:
    """Put the complete file `source` at `path`: renamed into place, or written through
    a device, FIFO or symbolic link that `path` already is (`writes_through`)."""
    if writes_through(path):
        write_through(source, path)
    else:
        os.replace(source, path)


def remove_output(path: str) -> None:
    """Remove an output at `path` (an earlier run's, so that a failure now cannot leave it
    looking fresh, or this run's, when it stops) if it is a regular file: a device, FIFO
    or symbolic link is not ours to remove."""
    try:
        if stat.S_ISREG(os.lstat(path).st_mode):
            os.unlink(path)
    except OSError:
        pass


class atomic_output:
    """Yield a temporary path to write; put it at `path` on success (`install`), remove
    it on failure."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.tmp = ""

    def __enter__(self) -> str:
        self.tmp = scratch_path_for(self.path)  # refuses what cannot be written, before any work
        return self.tmp

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is None:
            try:
                install(self.tmp, self.path)
                return
            except BaseException:
                remove_quietly(self.tmp)
                raise
        remove_quietly(self.tmp)


_INPUT_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
                stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket",
                stat.S_IFDIR: "a directory"}  # fmt: skip


def open_input(path: str, what: str) -> int:
    """A descriptor of the regular file at `path`, to read as `what`; anything else is bad
    input in one line, at once: a FIFO would block the read and a device never end it
    (opened without waiting, so a FIFO with no writer does not block the open)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as err:
        raise BadInput(f"{path}: cannot read {what}: {err.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as err:
        os.close(fd)
        raise BadInput(f"{path}: cannot read {what}: {err.strerror}") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = _INPUT_KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise BadInput(f"{path}: is {kind}, not a {what} (only regular files are read)")
    return fd


def read_input(path: str, what: str, size: int = -1) -> bytes:
    """The whole file at `path` (its first `size` bytes when given); one that cannot be
    read, or is not a regular file (`open_input`), is bad input naming it as `what`."""
    fd = open_input(path, what)
    try:
        with open(fd, "rb") as f:
            return f.read(size)
    except OSError as err:
        raise BadInput(f"{path}: cannot read {what}: {err.strerror}") from None


def remove_quietly(path: str) -> None:
    """Remove `path` if it exists; cleaning up must never mask the error being reported."""
    try:  # noqa: SIM105 (contextlib.suppress would cost the import this module avoids)
        os.unlink(path)
    except OSError:
        pass


def remove_named(directory: str, prefix: str) -> None:
    """Remove the files in `directory` whose names start with `prefix`, best effort."""
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return
    for name in names:
        if name.startswith(prefix):
            remove_quietly(os.path.join(directory, name))


def remove_private_dir(path: str) -> None:
    """Remove a private directory and what is in it, best effort: the files a compiler
    leaves there by hand, a tree below it (rare: a tool's scratch) through `remove_tree`,
    so that removing a compiler's directory imports nothing."""
    remove_named(path, "")
    try:
        os.rmdir(path)
    except OSError as err:
        import errno  # only on this path: `dist-lto opt` imports this module per action

        if err.errno == errno.ENOTEMPTY:
            remove_tree(path)


def remove_tree(path: str) -> None:
    """Remove the directory `path` and everything below it, best effort, and to the end
    when a stop signal arrives meanwhile: its StopRequested goes on once the tree is gone
    (later stops are ignored), where a removal it cut short would leave part of it."""
    import shutil

    try:
        shutil.rmtree(path, ignore_errors=True)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise


def write_atomic(path: str, data: bytes) -> None:
    """Write `data` to `path` through a temporary file and a rename."""
    with atomic_output(path) as tmp, open(tmp, "wb") as f:
        f.write(data)


def write_output(path: str, data: bytes) -> None:
    """`write_atomic`, a failure reported as one line naming `path` (`write_failure`)."""
    try:
        write_atomic(path, data)
    except OSError as err:
        raise write_failure(err, path) from None


def move(source: str, final: str) -> None:
    """Rename a file or directory to `final`; across file systems, copy it through a
    temporary name beside `final` and rename that, then remove `source`."""
    import errno

    if not os.path.isdir(source) and writes_through(final):
        write_through(source, final)
        return
    try:
        os.rename(source, final)
        return
    except OSError as err:
        if err.errno != errno.EXDEV:
            raise
    import shutil  # only across file systems: `dist-lto opt` imports this module per action

    temporary = temp_path_for(final)
    try:
        if os.path.isdir(source):
            shutil.copytree(source, temporary, symlinks=True)
        else:
            shutil.copyfile(source, temporary)
        os.rename(temporary, final)
    except BaseException:
        if os.path.isdir(temporary):
            shutil.rmtree(temporary, ignore_errors=True)
        remove_quietly(temporary)
        raise
    if os.path.isdir(source):
        shutil.rmtree(source)
    else:
        os.unlink(source)


def write_failure(err: OSError, path: str | None = None) -> DistLtoError:
    """The one-line error for an output that could not be written (`path`, else the
    error's file name): bad input when its path cannot name a file (a file where a
    directory must be, a directory where the file must be, too long, a FIFO nobody
    reads), a failure of the
    system otherwise (read-only, full, denied)."""
    import errno  # only on this path: `dist-lto opt` imports this module per action

    # ENXIO: a FIFO nobody reads, or a device without its driver.
    path_problems = (errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENAMETOOLONG, errno.ELOOP,
                     errno.ENXIO)  # fmt: skip
    kind = BadInput if err.errno in path_problems else DistLtoError
    return kind(f"{path or err.filename}: cannot write: {err.strerror or err}")
