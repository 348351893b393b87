"""Writing outputs so that nothing half-written ever sits at a declared path.

Every output goes to a temporary name in its final directory and is renamed
into place only when complete; a killed process leaves at most a dot-file
temporary, never a partial output. Standard library only.
"""

import contextlib
import os
from collections.abc import Iterator


def temp_path_for(path: str) -> str:
    """A unique temporary name beside `path` (same directory, so rename is atomic)."""
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.tmp-{os.getpid()}-{os.urandom(4).hex()}")


@contextlib.contextmanager
def atomic_output(path: str) -> Iterator[str]:
    """Yield a temporary path to write; rename it to `path` on success, remove it on failure."""
    tmp = temp_path_for(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomic(path: str, data: bytes) -> None:
    """Write `data` to `path` through a temporary file and a rename."""
    with atomic_output(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
