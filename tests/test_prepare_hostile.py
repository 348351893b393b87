"""Hostile and broken archives: one-line errors, exit 2, nothing written outside DIR, no manifest.

Most archives here are crafted byte by byte (`ar_member`, `gnu_archive`), since no
real tool writes absolute names or device members; the `..` case is also made by
the real llvm-ar, which copies a thin archive's `../` paths when flattening it.
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from contextlib import redirect_stderr
from pathlib import Path

import pytest
from dist_lto import cli
from dist_lto.archive import prepare as prepare_engine
from dist_lto.archive.reader import RegularArchive
from dist_lto.formats import jsonio
from support.tools import Llvm, run_cli

ELF_HEAD = b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 24
BITCODE_HEAD = b"BC\xc0\xde" + b"\x35\x14\x00\x00"


def ar_header(name_field: bytes, size: int | bytes, mode: bytes = b"100644") -> bytes:
    """One 60-byte ar header with the given raw name field, size and mode."""
    size_field = size if isinstance(size, bytes) else str(size).encode()
    return (
        name_field.ljust(16)
        + b"0".ljust(12)
        + b"0".ljust(6)
        + b"0".ljust(6)
        + mode.ljust(8)
        + size_field.ljust(10)
        + b"`\n"
    )


def ar_member(name_field: bytes, data: bytes, mode: bytes = b"100644") -> bytes:
    return ar_header(name_field, len(data), mode) + data + (b"\n" if len(data) % 2 else b"")


def bsd_member(name: bytes, data: bytes, mode: bytes = b"100644") -> bytes:
    """A BSD-style member whose name (any bytes) is stored before its data."""
    return ar_member(b"#1/%d" % len(name), name + data, mode)


def gnu_archive(members: list[tuple[bytes, bytes]], magic: bytes = b"!<arch>\n") -> bytes:
    """A GNU archive; names longer than 15 bytes or holding `/` go to the `//` name table."""
    table = b""
    fields: list[bytes] = []
    for name, _ in members:
        if len(name) > 15 or b"/" in name:
            fields.append(b"/%d" % len(table))
            table += name + b"/\n"
        else:
            fields.append(name + b"/")
    out = magic
    if table:
        out += ar_member(b"//", table)
    for field, (_, data) in zip(fields, members, strict=True):
        out += ar_header(field, len(data)) if magic == b"!<thin>\n" else ar_member(field, data)
    return out


def run_prepare(tmp_path: Path, archive: Path) -> tuple[int, str]:
    """Run prepare as a user would; return (status, stderr)."""
    result = run_cli(
        [
            "prepare",
            "--archive",
            str(archive),
            "--objects-out",
            "out/objects",
            "--manifest-out",
            "out/manifest.json",
        ],
        cwd=tmp_path,
    )
    return result.returncode, result.stderr


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def assert_clean_bad_input(tmp_path: Path, archive: Path, expected: str) -> None:
    """Exit 2, one line naming the archive and containing `expected`, nothing written."""
    before = files_under(tmp_path)
    status, stderr = run_prepare(tmp_path, archive)
    assert status == 2, stderr
    assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    assert stderr.startswith(f"dist-lto prepare: error: {archive}: "), stderr
    assert expected in stderr, stderr
    assert files_under(tmp_path) == before


HOSTILE_REGULAR = {
    "absolute long name": (
        gnu_archive([(b"ok.o", ELF_HEAD), (b"/etc/cron.d/evil", ELF_HEAD)]),
        "member '/etc/cron.d/evil' (position 1): name is absolute",
    ),
    "absolute BSD name": (
        b"!<arch>\n" + bsd_member(b"/tmp/evil.o", ELF_HEAD),
        "member '/tmp/evil.o' (position 0): name is absolute",
    ),
    "dot-dot BSD name": (
        b"!<arch>\n" + bsd_member(b"../../escape.o", ELF_HEAD),
        "member '../../escape.o' (position 0): name climbs out",
    ),
    "dot-dot inside a long name": (
        gnu_archive([(b"a/../../b.o", ELF_HEAD)]),
        "member 'a/../../b.o' (position 0): name climbs out",
    ),
    "symbolic link member": (
        b"!<arch>\n" + ar_member(b"link.o/", b"/etc/passwd\n", mode=b"120777"),
        "member 'link.o' (position 0): is a symbolic link (mode 120777)",
    ),
    "character device member": (
        b"!<arch>\n" + ar_member(b"tty.o/", b"", mode=b"20620"),
        "member 'tty.o' (position 0): is a character device",
    ),
    "block device member": (
        b"!<arch>\n" + ar_member(b"disk.o/", b"", mode=b"60660"),
        "member 'disk.o' (position 0): is a block device",
    ),
    "fifo member": (
        b"!<arch>\n" + ar_member(b"pipe.o/", b"", mode=b"10644"),
        "member 'pipe.o' (position 0): is a FIFO",
    ),
    "directory member": (
        b"!<arch>\n" + ar_member(b"dir/", b"", mode=b"40755"),
        "member 'dir' (position 0): is a directory",
    ),
    "name that is not UTF-8": (
        b"!<arch>\n" + ar_member(b"caf\xe9.o/", ELF_HEAD),
        "member 'caf\\\\xe9.o' (position 0): name is not UTF-8",
    ),
    "name that names no file": (
        b"!<arch>\n" + bsd_member(b"./", ELF_HEAD),
        "member './' (position 0): name names no file",
    ),
    "component too long for the file system": (
        gnu_archive([(b"x" * 300 + b".o", ELF_HEAD)]),
        "name has a component longer than 255 bytes",
    ),
    "data cut short": (
        (b"!<arch>\n" + ar_member(b"a.o/", ELF_HEAD) + ar_member(b"b.o/", BITCODE_HEAD * 8))[:-20],
        "Truncated ar archive (in member 'b.o')",
    ),
    "header cut short": (
        b"!<arch>\n" + ar_member(b"a.o/", ELF_HEAD) + ar_header(b"b.o/", 4)[:30],
        "truncated member header at offset 100 (after member 'a.o')",
    ),
    "bad header terminator": (
        b"!<arch>\n" + ar_member(b"a.o/", ELF_HEAD)[:58] + b"XX" + ELF_HEAD,
        "Incorrect file header signature",
    ),
    "long name without a name table": (
        b"!<arch>\n" + ar_member(b"/42", ELF_HEAD),
        "Can't find long filename",
    ),
    "BSD name longer than the member": (
        b"!<arch>\n" + ar_member(b"#1/400", b"short"),
        "(before the first member)",
    ),
    "text file": (b"this is not an archive\n", "not an ar archive"),
    "empty file": (b"", "not an ar archive"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_REGULAR))
def test_hostile_regular_archive_is_a_clean_bad_input(tmp_path: Path, case: str) -> None:
    data, expected = HOSTILE_REGULAR[case]
    archive = tmp_path / "evil.a"
    archive.write_bytes(data)
    assert_clean_bad_input(tmp_path, archive, expected)


def test_tar_archive_is_not_an_ar_archive(tmp_path: Path) -> None:
    """libarchive reads tar happily; prepare must only accept ar."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("a.o")
        info.size = len(ELF_HEAD)
        tar.addfile(info, io.BytesIO(ELF_HEAD))
    archive = tmp_path / "lib.a"
    archive.write_bytes(buffer.getvalue())
    assert_clean_bad_input(tmp_path, archive, "not an ar archive")


def test_dot_dot_names_written_by_llvm_ar_are_refused(llvm: Llvm, tmp_path: Path) -> None:
    """Flattening a thin archive whose members live in `../obj` gives real `../` names."""
    (tmp_path / "obj").mkdir()
    (tmp_path / "lib").mkdir()
    (tmp_path / "obj/x.o").write_bytes(b"not an object\n")
    subprocess.run([llvm.ar, "rcT", "thin.a", "../obj/x.o"], cwd=tmp_path / "lib", check=True)
    subprocess.run([llvm.ar, "qcL", "flat.a", "thin.a"], cwd=tmp_path / "lib", check=True)
    archive = tmp_path / "lib/flat.a"
    assert_clean_bad_input(tmp_path, archive, "member '../obj/x.o' (position 0): name climbs out")


def test_hostile_member_after_good_ones_leaves_nothing_behind(tmp_path: Path) -> None:
    """Every name is checked before the first byte is written."""
    good = [bsd_member(b"good%d.o" % i, ELF_HEAD) for i in range(20)]
    archive = tmp_path / "evil.a"
    archive.write_bytes(b"!<arch>\n" + b"".join(good) + bsd_member(b"../evil.o", ELF_HEAD))
    assert_clean_bad_input(tmp_path, archive, "member '../evil.o' (position 20)")


THIN_BROKEN = {
    "name reference without a name table": (
        b"!<thin>\n" + ar_header(b"/0", 4),
        "refers to a missing name table",
    ),
    "name reference past the table": (
        gnu_archive([(b"some/long/name.o", b"")], magic=b"!<thin>\n").replace(b"/0 ", b"/99"),
        "bad name-table entry 99",
    ),
    "bad terminator": (b"!<thin>\n" + ar_header(b"a.o/", 4)[:58] + b"??", "bad terminator"),
    "size that is not a number": (
        b"!<thin>\n" + ar_header(b"a.o/", b"x"),
        "malformed member header at offset 8 (size b'x')",
    ),
    "symbol table cut short": (
        b"!<thin>\n" + ar_header(b"/", 400) + b"\0" * 10,
        "truncated '/' table",
    ),
    "header cut short": (b"!<thin>\n" + ar_header(b"a.o/", 4)[:40], "truncated member header"),
    "BSD name": (b"!<thin>\n" + ar_header(b"#1/12", 4), "not a GNU member name"),
}


@pytest.mark.parametrize("case", sorted(THIN_BROKEN))
def test_broken_thin_archive_is_a_clean_bad_input(tmp_path: Path, case: str) -> None:
    data, expected = THIN_BROKEN[case]
    archive = tmp_path / "thin.a"
    archive.write_bytes(data)
    assert_clean_bad_input(tmp_path, archive, expected)


def test_thin_member_that_is_a_device_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "thin.a"
    archive.write_bytes(gnu_archive([(b"/dev/null", b"")], magic=b"!<thin>\n"))
    assert_clean_bad_input(tmp_path, archive, "/dev/null is not a regular file")


def test_thin_member_behind_a_symlinked_directory_is_refused(llvm: Llvm, tmp_path: Path) -> None:
    """The linker resolves `lib/../x.o` through the symlink; the manifest could not."""
    (tmp_path / "real/deep/lib").mkdir(parents=True)
    (tmp_path / "real/deep/x.o").write_bytes(b"the file the linker reads\n")
    (tmp_path / "x.o").write_bytes(b"the file the manifest would name\n")
    (tmp_path / "lib").symlink_to(tmp_path / "real/deep/lib")
    subprocess.run([llvm.ar, "rcT", "t.a", "../x.o"], cwd=tmp_path / "real/deep/lib", check=True)
    archive = tmp_path / "lib/t.a"
    assert_clean_bad_input(tmp_path, archive, "are different files (a symbolic link on the way)")


def test_a_member_named_like_another_members_directory_is_renamed(tmp_path: Path) -> None:
    """`a` (a file) and `a/b.o` cannot both be extracted as named: the file moves aside."""
    archive = tmp_path / "lib.a"
    archive.write_bytes(gnu_archive([(b"a", b"file a\n"), (b"a/b.o", b"file a/b.o\n")]))
    status, stderr = run_prepare(tmp_path, archive)
    assert status == 0, stderr
    assert (tmp_path / "out/objects/a~2").read_bytes() == b"file a\n"
    assert (tmp_path / "out/objects/a/b.o").read_bytes() == b"file a/b.o\n"


def test_write_failure_is_an_internal_error_that_removes_partial_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk cannot be made on demand here: the third copy is made to fail."""
    archive = tmp_path / "lib.a"
    archive.write_bytes(gnu_archive([(b"d/a.o", ELF_HEAD), (b"b.o", ELF_HEAD), (b"c.o", ELF_HEAD)]))
    copy_to = RegularArchive.copy_to
    calls: list[int] = []

    def failing_copy(self: RegularArchive, member, out_fd: int) -> None:
        calls.append(1)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        copy_to(self, member, out_fd)

    monkeypatch.setattr(RegularArchive, "copy_to", failing_copy)
    stderr = io.StringIO()
    with redirect_stderr(stderr):
        status = cli.main(
            [
                "prepare",
                "--archive",
                str(archive),
                "--objects-out",
                str(tmp_path / "objects"),
                "--manifest-out",
                str(tmp_path / "m.json"),
            ]
        )
    assert status == 1
    where = tmp_path / "objects/c.o"
    assert stderr.getvalue() == (
        f"dist-lto prepare: error: {where}: cannot write: No space left on device\n"
    )
    assert files_under(tmp_path) == {"lib.a"}


@pytest.mark.parametrize("failure", ["unsupported", "short copies"])
def test_extraction_without_kernel_copy_is_byte_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """copy_file_range may be missing (EXDEV, ENOSYS, seccomp) or copy in small steps."""
    payloads = [bytes(range(256)) * 9 + b"x", BITCODE_HEAD * 100, b"", b"odd"]
    archive = tmp_path / "lib.a"
    archive.write_bytes(gnu_archive([(b"m%d.o" % i, p) for i, p in enumerate(payloads)]))
    real = os.copy_file_range

    def fake(src: int, dst: int, count: int, offset_src: int | None = None) -> int:
        if failure == "unsupported":
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        return real(src, dst, min(count, 7), offset_src)

    monkeypatch.setattr(os, "copy_file_range", fake)
    status = cli.main(
        [
            "prepare",
            "--archive",
            str(archive),
            "--objects-out",
            str(tmp_path / "objects"),
            "--manifest-out",
            str(tmp_path / "m.json"),
        ]
    )
    assert status == 0
    for i, payload in enumerate(payloads):
        assert (tmp_path / f"objects/m{i}.o").read_bytes() == payload


def test_symlinks_planted_in_the_objects_directory_are_never_followed(tmp_path: Path) -> None:
    """A non-empty objects directory is refused outright, symlinks and all."""
    archive = tmp_path / "lib.a"
    archive.write_bytes(gnu_archive([(b"a.o", ELF_HEAD)]))
    (tmp_path / "outside").mkdir()
    (tmp_path / "out/objects").mkdir(parents=True)
    (tmp_path / "out/objects/a.o").symlink_to(tmp_path / "outside/a.o")
    status, stderr = run_prepare(tmp_path, archive)
    assert status == 2
    assert "objects directory is not empty" in stderr
    assert list((tmp_path / "outside").iterdir()) == []


def test_unwritable_manifest_location_fails_before_extracting(tmp_path: Path) -> None:
    archive = tmp_path / "lib.a"
    archive.write_bytes(gnu_archive([(b"a.o", ELF_HEAD)]))
    (tmp_path / "not-a-dir").write_text("a file where the manifest's directory should be\n")
    result = run_cli(
        [
            "prepare",
            "--archive",
            "lib.a",
            "--objects-out",
            "objects",
            "--manifest-out",
            "not-a-dir/m.json",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 2  # the path cannot name a file: bad input
    message = "dist-lto prepare: error: not-a-dir/m.json: cannot write: Not a directory\n"
    assert result.stderr == message
    assert files_under(tmp_path) == {"lib.a", "not-a-dir"}


def test_failing_manifest_write_removes_the_extracted_objects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills up after extraction, while the manifest is written."""
    archive = tmp_path / "lib.a"
    archive.write_bytes(gnu_archive([(b"sub/a.o", ELF_HEAD), (b"b.o", BITCODE_HEAD)]))

    def full_disk(*document: object) -> bytes:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(prepare_engine, "manifest_bytes", full_disk)
    stderr = io.StringIO()
    with redirect_stderr(stderr):
        status = cli.main(
            [
                "prepare",
                "--archive",
                str(archive),
                "--objects-out",
                str(tmp_path / "out/objects"),
                "--manifest-out",
                str(tmp_path / "out/m.json"),
            ]
        )
    assert status == 1
    assert stderr.getvalue().endswith("m.json: cannot write: No space left on device\n")
    assert files_under(tmp_path) == {"lib.a"}


def test_a_member_shorter_than_a_magic_is_never_bitcode(tmp_path: Path) -> None:
    """Its data is followed by the next header, which must not be read as its magic."""
    archive = tmp_path / "lib.a"
    archive.write_bytes(b"!<arch>\n" + ar_member(b"BC/", b"BC") + ar_member(b"\xc0\xde.o/", b"x"))
    with RegularArchive(str(archive)) as opened:
        assert [m.head for m in opened.members] == [b"BC", b"x"]


# ---------------------------------------------------------------------------------
# Inputs and outputs that are not plain files and directories on one file system


@pytest.mark.parametrize("name", [b"a\nb.o", b"tab\t.o", b"esc\x1b[31m.o", b"del\x7f.o"])
def test_a_member_name_with_a_control_character_is_refused_before_extracting(
    tmp_path: Path, name: bytes
) -> None:
    archive = tmp_path / "lib.a"
    archive.write_bytes(b"!<arch>\n" + ar_member(b"good.o/", ELF_HEAD) + bsd_member(name, ELF_HEAD))
    char = next(c for c in name.decode() if c < " " or c == "\x7f")
    expected = f"name contains the control character U+{ord(char):04X}"
    assert_clean_bad_input(tmp_path, archive, expected)


def test_a_thin_member_name_with_a_newline_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "thin.a"
    archive.write_bytes(gnu_archive([(b"x\ny.o", b"")], magic=b"!<thin>\n"))
    assert_clean_bad_input(tmp_path, archive, "name contains the control character U+000A")


def test_a_fifo_as_the_archive_is_refused_at_once(tmp_path: Path) -> None:
    """Nothing writes to the FIFO: reading it would wait for ever."""
    os.mkfifo(tmp_path / "lib.a")
    result = subprocess.run(
        [sys.executable, "-m", "dist_lto", "prepare", "--archive", "lib.a", "--objects-out",
         "out/objects", "--manifest-out", "out/manifest.json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (result.returncode, result.stderr) == (
        2, "dist-lto prepare: error: lib.a: is a FIFO, not an archive (only regular files are"
        " read)\n")  # fmt: skip
    assert files_under(tmp_path) == {"lib.a"}


def test_a_character_device_as_the_archive_is_refused(tmp_path: Path) -> None:
    status, stderr = run_prepare(tmp_path, Path("/dev/zero"))
    assert status == 2
    assert stderr == ("dist-lto prepare: error: /dev/zero: is a character device, not an"
                      " archive (only regular files are read)\n")  # fmt: skip


def other_file_system(tmp_path: Path) -> Path:
    """A directory on /dev/shm (tmpfs), which is not the file system of `tmp_path`."""
    shm = Path(tempfile.mkdtemp(dir="/dev/shm"))
    assert shm.stat().st_dev != tmp_path.stat().st_dev, "/dev/shm is not another file system"
    return shm


def test_an_objects_directory_linked_to_another_file_system_is_filled(tmp_path: Path) -> None:
    elsewhere = other_file_system(tmp_path)
    try:
        archive = tmp_path / "lib.a"
        archive.write_bytes(gnu_archive([(b"sub/a.o", ELF_HEAD), (b"b.o", BITCODE_HEAD)]))
        (elsewhere / "objects").mkdir()
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "objects").symlink_to(elsewhere / "objects")
        status, stderr = run_prepare(tmp_path, archive)
        assert (status, stderr) == (0, "")
        assert files_under(elsewhere) == {"objects", "objects/sub", "objects/sub/a.o",
                                          "objects/b.o"}  # fmt: skip
        assert (elsewhere / "objects" / "b.o").read_bytes() == BITCODE_HEAD
        manifest = jsonio.loads((tmp_path / "out" / "manifest.json").read_bytes())
        assert [m["path"] for m in manifest["members"]] == ["objects/sub/a.o", "objects/b.o"]
    finally:
        shutil.rmtree(elsewhere)


MOUNTED = """\
set -e
mount {options} out/objects
status=0
"$@" || status=$?
find out -path out/objects -prune -o -print | sort
echo ---
(cd out/objects && find . | sort)
umount out/objects
exit $status
"""


def prepare_on_mount(tmp_path: Path, options: str) -> tuple[int, str, str]:
    """Run prepare with `out/objects` a mount point (`mount OPTIONS out/objects`) in a
    mount namespace of its own: (status, stderr, what was written outside and inside)."""
    archive = tmp_path / "lib.a"
    archive.write_bytes(gnu_archive([(b"sub/a.o", ELF_HEAD), (b"b.o", BITCODE_HEAD)]))
    (tmp_path / "out" / "objects").mkdir(parents=True)
    script = MOUNTED.format(options=options)
    result = subprocess.run(
        ["unshare", "--mount", "--map-root-user", "sh", "-c", script, "sh", sys.executable,
         "-m", "dist_lto", "prepare", "--archive", "lib.a", "--objects-out", "out/objects",
         "--manifest-out", "out/manifest.json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    return result.returncode, result.stderr, result.stdout


@pytest.mark.parametrize("mount", ["tmpfs", "bind"])
def test_an_objects_directory_that_is_a_mount_point_is_filled(tmp_path: Path, mount: str) -> None:
    """tmpfs: another file system. A bind mount of the same file system: the same device,
    but a rename between two mounts fails all the same (EXDEV)."""
    (tmp_path / "bound").mkdir()
    options = "-t tmpfs none" if mount == "tmpfs" else f"--bind {tmp_path / 'bound'}"
    status, stderr, listing = prepare_on_mount(tmp_path, options)
    assert (status, stderr) == (0, "")
    assert listing == "out\nout/manifest.json\n---\n.\n./b.o\n./sub\n./sub/a.o\n"


def test_a_read_only_objects_directory_is_named_not_the_manifest(tmp_path: Path) -> None:
    status, stderr, listing = prepare_on_mount(tmp_path, "-t tmpfs -o ro none")
    message = "dist-lto prepare: error: out/objects: cannot write: Read-only file system\n"
    assert (status, stderr) == (1, message)
    assert listing == "out\n---\n.\n"
