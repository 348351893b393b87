"""Member names made safe to extract: checked, normalised and made distinct.

An archive member's name comes from the archive, so it is input: it may be absolute,
climb out with `..`, hold control characters, be too long, or repeat another member's
name (archives allow duplicates, and `a` next to `a/b.o`). Every name is checked
before anything is written, and every member gets a distinct path that no other
member can claim (`foo.o`, `foo~2.o`).
"""

import stat

from dist_lto.errors import BadInput

NAME_MAX = 255
"""Longest file name component Linux file systems accept, in bytes."""
PATH_MAX = 4095
"""Longest path the kernel accepts, in bytes (without the terminating NUL)."""

_DUPLICATE_MARK = "~"
"""Separates a renamed member's stem from its occurrence number: `foo.o` -> `foo~2.o`."""
REJECTED_TYPES = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}
"""Member types (from the header's mode field) that are never extracted."""


class UnsafeName(ValueError):
    """A member name that cannot be extracted safely; the message says why."""


def safe_path(name: str) -> str:
    """The normalised relative path `name` extracts to, or UnsafeName.

    `.` and empty components are dropped (`./a//b.o` is `a/b.o`); absolute names,
    `..` components and names that are too long for the file system are refused.
    """
    if "/" not in name and name not in ("", ".", ".."):
        parts = [name]
    else:
        if name.startswith("/"):
            raise UnsafeName("is absolute")
        parts = [part for part in name.split("/") if part not in ("", ".")]
        if ".." in parts:
            raise UnsafeName("climbs out of the objects directory with '..'")
        if not parts:
            raise UnsafeName("names no file")
    # A character is at most 4 bytes in UTF-8: short strings skip the encoding.
    for part in parts:
        if len(part) > NAME_MAX // 4 and len(part.encode()) > NAME_MAX:
            raise UnsafeName(f"has a component longer than {NAME_MAX} bytes")
    path = "/".join(parts)
    if len(path) > PATH_MAX // 4 and len(path.encode()) > PATH_MAX:
        raise UnsafeName(f"is longer than {PATH_MAX} bytes")
    return path


def assign_paths(paths: list[str]) -> list[str]:
    """A distinct file path for each member, given their safe paths in archive order.

    A member keeps its own path unless an earlier member already has it or it is
    a directory of another member (`a` next to `a/b.o`). Those members get
    `stem~K.ext` in the same directory, with the smallest K >= 2 that is no
    member's path, no directory and not yet given out. Every path is known
    before any is given out, so a renamed `foo.o` can never take the name of a
    real `foo~2.o`, wherever in the archive that member comes.
    """
    directories = directories_of(paths)
    given: set[str] = set()
    result = list(paths)
    renamed: list[int] = []
    for i, path in enumerate(paths):
        if path in given or path in directories:
            renamed.append(i)
        else:
            given.add(path)
    next_number: dict[str, int] = {}
    for i in renamed:
        path = paths[i]
        head, _, base = path.rpartition("/")
        prefix = f"{head}/" if head else ""
        stem, ext = _split_extension(base)
        number = next_number.get(path, 2)
        while True:
            candidate = prefix + _numbered(stem, number, ext)
            number += 1
            if candidate not in given and candidate not in directories:
                break
        next_number[path] = number
        given.add(candidate)
        result[i] = candidate
    return result


def directories_of(paths: list[str]) -> set[str]:
    """Every directory the relative `paths` need (`a`, `a/b` for `a/b/c.o`)."""
    directories: set[str] = set()
    for path in paths:
        cut = path.rfind("/")
        while cut > 0 and path[:cut] not in directories:
            directories.add(path[:cut])
            cut = path.rfind("/", 0, cut)
    return directories


def _split_extension(base: str) -> tuple[str, str]:
    dot = base.rfind(".")
    if dot <= 0:
        return base, ""
    return base[:dot], base[dot:]


def _numbered(stem: str, number: int, ext: str) -> str:
    """`stem~number.ext`, with the stem shortened if the name would be too long."""
    tail = f"{_DUPLICATE_MARK}{number}{ext}"
    while stem and len((stem + tail).encode()) > NAME_MAX:
        stem = stem[:-1]
    return stem + tail


def decode_name(name: bytes, archive: str, position: int) -> str:
    try:
        return name.decode()
    except UnicodeDecodeError:
        shown = repr(name.decode("utf-8", "backslashreplace"))
        problem = "name is not UTF-8"
        raise BadInput(f"{archive}: member {shown} (position {position}): {problem}") from None


def check_name_characters(archive: str, name: str, position: int) -> None:
    """Refuse a name with a control character (a newline, a NUL, an escape): it would be
    extracted, then break every line-based file that names it (`.imports`, argument
    files) and every message that shows it."""
    if name.isascii() and name.isprintable():
        return  # printable ASCII: no control character
    for char in name:
        if char < " " or char == "\x7f":
            problem = f"name contains the control character U+{ord(char):04X}"
            raise member_error(archive, name, position, problem)


def member_error(archive: str, name: str, position: int, problem: str) -> BadInput:
    return BadInput(f"{archive}: member {name!r} (position {position}): {problem}")
