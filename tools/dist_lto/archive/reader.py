"""Regular ar archives read with libarchive (libarchive-c), without copying member data.

The archive is mapped into memory (a private mapping) and handed to libarchive's
memory reader, so every data block libarchive returns points into the mapping
and its distance from the start is the member's offset in the file. Members can
then be copied file-to-file inside the kernel (`copy_file_range`) and told apart
by reading 4 bytes, which keeps `prepare` close to `llvm-ar x` in speed.

The per-member loop calls libarchive-c's `ffi` functions on one reused entry:
its iterator allocates an entry object per member and decodes names through the
locale, and the names must stay byte-exact.

Two libarchive behaviours are worked around here:
- its GNU name-table parser requires every `/` in the table to end a name, so it
  rejects names with directories (`llvm-ar qcL` writes them when it flattens a
  thin archive). Those slashes are replaced, in our private mapping only, by a
  byte that never occurs in UTF-8, and turned back into `/` in the names read.
- it reports a header cut short at the end of the file as a clean end of the
  archive; we check that the last member ends where the file does.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import re
import stat
from typing import NamedTuple

from dist_lto.archive.ar_headers import ARCH_MAGIC, gnu_name_table
from dist_lto.errors import BadInput, DistLtoError

# libarchive-c finds libarchive with ctypes.util.find_library, which runs
# `ldconfig -p`; naming Debian's libarchive13 by its soname avoids running it.
os.environ.setdefault("LIBARCHIVE", "libarchive.so.13")

import libarchive
from libarchive import ffi

# libarchive-c logs ARCHIVE_WARN results, which would print to stderr; we turn
# them into errors instead.
ffi.logger.addHandler(logging.NullHandler())
ffi.logger.propagate = False

# Where the current header starts; libarchive-c does not declare it, so declare it
# with its own helper. Used to check the end of the archive and name-table names.
_read_header_position = ffi.ffi("read_header_position", [ffi.c_archive_p], ctypes.c_longlong)

INTERNAL_NAMES = frozenset(
    {
        b"/",
        b"/SYM64/",
        b"//",
        b"__.SYMDEF",
        b"__.SYMDEF SORTED",
        b"__.SYMDEF_64",
        b"__.SYMDEF_64 SORTED",
    }
)
"""Symbol and name tables: not members when they come before the first real member."""

_NEVER_UTF8 = bytes([0xC0, 0xC1, *range(0xF5, 0x100)])
"""Bytes that occur in no valid UTF-8 text, so in no name we accept."""
_INNER_SLASH = re.compile(rb"/(?!\n)")
_NO_KERNEL_COPY = frozenset(
    {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EPERM, errno.EBADF}
)
"""copy_file_range failures that mean "not here": fall back to write()."""


class Member(NamedTuple):
    """One real member of a regular archive, in archive order."""

    name: bytes
    """As recorded (GNU and BSD long names resolved), not decoded."""
    offset: int
    """Where its data starts in the archive file (0 when it has no data)."""
    size: int
    mode: int
    """The header's mode field; its S_IFMT bits are 0 when it records no file type."""
    head: bytes
    """The first 4 bytes of its data (fewer when it is shorter): enough to tell bitcode."""


class RegularArchive:
    """An open regular archive: its `members`, and `copy_to` to write one out.

    Opening reads every header, so a malformed or truncated archive fails here,
    before anything is written anywhere.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._kernel_copy = True
        self._fd = -1
        self._map: mmap.mmap | None = None
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            info = os.fstat(self._fd)
            if not stat.S_ISREG(info.st_mode):
                raise BadInput(f"{path}: not a regular file")
            if info.st_size < len(ARCH_MAGIC):
                raise BadInput(f"{path}: not an ar archive (too short)")
            self._map = mmap.mmap(self._fd, info.st_size, access=mmap.ACCESS_COPY)
            if self._map[: len(ARCH_MAGIC)] != ARCH_MAGIC:
                raise BadInput(f"{path}: not an ar archive")
            self.members = self._scan(self._map)
        except OSError as err:
            self.close()
            raise BadInput(f"{path}: cannot read: {err.strerror}") from None
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> RegularArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _scan(self, data: mmap.mmap) -> list[Member]:
        """Read every header with libarchive; return the real members."""
        mask = self._unslash_name_table(data)
        buffer = (ctypes.c_char * len(data)).from_buffer(data)
        try:
            with libarchive.read.new_archive_read("ar", "none") as archive_p:
                ffi.read_open_memory(archive_p, ctypes.addressof(buffer), len(data))
                return self._members(data, archive_p, ctypes.addressof(buffer), mask)
        except libarchive.ArchiveError as err:
            raise BadInput(f"{self.path}: {err.msg}") from None
        finally:
            del buffer

    def _members(
        self, data: mmap.mmap, archive_p: int, base: int, mask: int | None
    ) -> list[Member]:
        """The per-member loop, kept to a few libarchive calls per member."""
        end = len(data)
        members: list[Member] = []
        name = b""
        next_header = ffi.read_next_header2
        pathname = ffi.entry_pathname
        entry_size = ffi.entry_size
        entry_mode = ffi.entry_mode
        read_block = ffi.read_data_block
        block, block_size, block_offset = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_longlong()
        block_args = (ctypes.byref(block), ctypes.byref(block_size), ctypes.byref(block_offset))
        with libarchive.entry.new_archive_entry() as entry_p:
            while True:
                in_member = False
                try:
                    status = next_header(archive_p, entry_p)
                    if status == ffi.ARCHIVE_EOF:
                        break
                    if status != ffi.ARCHIVE_OK:
                        raise libarchive.ArchiveError(_error(archive_p))
                    name = pathname(entry_p) or b""
                    if mask is not None and mask in name:
                        name = _restore_slashes(data, archive_p, name, mask)
                    if not members and name in INTERNAL_NAMES:
                        continue
                    in_member = True
                    size = entry_size(entry_p)
                    offset = got = 0
                    while got < size:
                        status = read_block(archive_p, *block_args)
                        address = (block.value or 0) - base
                        if status != ffi.ARCHIVE_OK or block_size.value == 0:
                            raise libarchive.ArchiveError("Truncated ar archive")
                        if got == 0:
                            offset = address
                        elif address != offset + got:
                            raise DistLtoError(
                                f"{self.path}: libarchive returned member {_show(name)}"
                                " in pieces that are not contiguous"
                            )
                        got += block_size.value
                    if not 0 <= offset <= end - size:
                        raise DistLtoError(
                            f"{self.path}: libarchive returned the data of member"
                            f" {_show(name)} from outside the mapped archive"
                        )
                except libarchive.ArchiveError as err:
                    where = _where(name, in_member, members)
                    raise BadInput(f"{self.path}: {err.msg} ({where})") from None
                head = data[offset : offset + min(size, 4)]
                members.append(Member(name, offset, size, entry_mode(entry_p), head))
            stop = _read_header_position(archive_p) or len(ARCH_MAGIC)
        if stop != end:
            where = _where(name, False, members)
            raise BadInput(f"{self.path}: truncated member header at offset {stop} ({where})")
        return members

    def _unslash_name_table(self, data: mmap.mmap) -> int | None:
        """Mask the `/` inside GNU long names so libarchive accepts them; return the mask byte."""
        found = gnu_name_table(data, self.path)
        if found is None:
            return None
        start, size = found
        table = data[start : start + size]
        if not _INNER_SLASH.search(table):
            return None
        mask = next((b for b in _NEVER_UTF8 if b not in table), None)
        if mask is None:
            raise BadInput(f"{self.path}: the GNU name table holds names that are not UTF-8")
        data[start : start + size] = _INNER_SLASH.sub(bytes([mask]), table)
        return mask

    def copy_to(self, member: Member, out_fd: int) -> None:
        """Write `member`'s data to `out_fd`, inside the kernel when it can."""
        done = 0
        size = member.size
        if self._kernel_copy:
            try:
                while done < size:
                    n = os.copy_file_range(self._fd, out_fd, size - done, member.offset + done)
                    if n == 0:
                        break
                    done += n
            except OSError as err:
                if err.errno not in _NO_KERNEL_COPY:
                    raise
                self._kernel_copy = False
        if done < size and self._map is not None:
            with memoryview(self._map) as view:
                start, stop = member.offset + done, member.offset + size
                while start < stop:
                    start += os.write(out_fd, view[start:stop])


def _restore_slashes(data: mmap.mmap, archive_p: int, name: bytes, mask: int) -> bytes:
    """Undo the masking in `name` if it came from the name table (its header says `/N`)."""
    header = _read_header_position(archive_p)
    field = data[header : header + 2] if header >= len(ARCH_MAGIC) else b""
    if field[:1] == b"/" and field[1:2].isdigit():
        return name.replace(bytes([mask]), b"/")
    return name


def _where(name: bytes, in_member: bool, members: list[Member]) -> str:
    if in_member:
        return f"in member {_show(name)}"
    if members:
        return f"after member {_show(members[-1].name)}"
    return "before the first member"


def _error(archive_p: int) -> str:
    message = ffi.error_string(archive_p)
    return message.decode("utf-8", "replace") if message else "malformed archive"


def _show(name: bytes) -> str:
    """A member name for a one-line message: quoted, with odd bytes escaped."""
    return repr(name.decode("utf-8", "backslashreplace"))
