"""Writing outputs so that nothing half-written ever sits at a declared path.

Every output goes to a temporary name in its final directory and is renamed
into place only when complete; a killed process leaves at most a dot-file
temporary, never a partial output. Standard library only.
"""

import os

from dist_lto.errors import BadInput, DistLtoError

# No contextlib or collections.abc: `dist-lto opt` imports this module once per
# backend action, and those two pull in `collections` and `functools`.


def temp_path_for(path: str) -> str:
    """A unique temporary name beside `path` (same directory, so rename is atomic)."""
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.tmp-{os.getpid()}-{os.urandom(4).hex()}")


class atomic_output:
    """Yield a temporary path to write; rename it to `path` on success, remove it on failure."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.tmp = temp_path_for(path)

    def __enter__(self) -> str:
        return self.tmp

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is None:
            try:
                os.replace(self.tmp, self.path)
                return
            except BaseException:
                remove_quietly(self.tmp)
                raise
        remove_quietly(self.tmp)


def read_input(path: str, what: str) -> bytes:
    """The whole file at `path`; one that cannot be read is bad input naming it as `what`."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as err:
        raise BadInput(f"{path}: cannot read {what}: {err.strerror}") from None


def remove_quietly(path: str) -> None:
    """Remove `path` if it exists; cleaning up must never mask the error being reported."""
    try:  # noqa: SIM105 (contextlib.suppress would cost the import this module avoids)
        os.unlink(path)
    except OSError:
        pass


def write_atomic(path: str, data: bytes) -> None:
    """Write `data` to `path` through a temporary file and a rename."""
    with atomic_output(path) as tmp, open(tmp, "wb") as f:
        f.write(data)


def move(source: str, final: str) -> None:
    """Rename a file or directory to `final`; across file systems, copy it through a
    temporary name beside `final` and rename that, then remove `source`."""
    import errno

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
    directory must be, a directory where the file must be, too long), a failure of the
    system otherwise (read-only, full, denied)."""
    import errno  # only on this path: `dist-lto opt` imports this module per action

    path_problems = (errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENAMETOOLONG, errno.ELOOP)
    kind = BadInput if err.errno in path_problems else DistLtoError
    return kind(f"{path or err.filename}: cannot write: {err.strerror or err}")
