"""`dist-lto prepare` on archives written by the real llvm-ar 22, GNU ar and rustc."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support.tools import Llvm, run_cli

RUSTC = shutil.which("rustc") or "/root/.cargo/bin/rustc"

_SOURCES = {
    "alpha.c": "int alpha(int x) { return x * 3 + 1; }\n",
    "beta_with_a_long_name.c": "extern int alpha(int); int beta(int x) { return alpha(x) + 2; }\n",
    "gamma.c": "int gamma_native(void) { return 42; }\n",
}


@pytest.fixture(scope="session")
def small_objects(llvm: Llvm, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two ThinLTO bitcode objects and one native object, compiled once."""
    root = tmp_path_factory.mktemp("small")
    objects: dict[str, Path] = {}
    for source, text in _SOURCES.items():
        (root / source).write_text(text)
        out = root / source.replace(".c", ".o")
        lto = [] if source == "gamma.c" else ["-flto=thin"]
        cmd = [llvm.clang, "-O2", *lto, "-c", source, "-o", out.name]
        subprocess.run(cmd, cwd=root, check=True)
        objects[out.name] = out
    return objects


@pytest.fixture(scope="session")
def rust_staticlib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Rust staticlib built with linker-plugin LTO: bitcode for our crate, native std."""
    root = tmp_path_factory.mktemp("rust")
    (root / "lib.rs").write_text(
        '#[no_mangle]\npub extern "C" fn add_numbers(a: u64, b: u64) -> u64 { a.wrapping_add(b) }\n'
    )
    cmd = [RUSTC, "--crate-type=staticlib", "-Clinker-plugin-lto", "-Copt-level=2", "lib.rs"]
    subprocess.run([*cmd, "-o", "libtiny.a"], cwd=root, check=True, capture_output=True)
    return root / "libtiny.a"


def prepare(archive: Path, objects: Path, manifest: Path, cwd: Path | None = None) -> dict:
    result = run_cli(
        [
            "prepare",
            "--archive",
            str(archive),
            "--objects-out",
            str(objects),
            "--manifest-out",
            str(manifest),
        ],
        cwd=cwd,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return json.loads((cwd / manifest if cwd else manifest).read_text())


def llvm_ar_names(llvm: Llvm, archive: Path) -> list[str]:
    out = subprocess.run([llvm.ar, "t", str(archive)], check=True, capture_output=True, text=True)
    return out.stdout.splitlines()


def member_bytes(llvm: Llvm, archive: Path, name: str, occurrence: int = 1) -> bytes:
    """A member's bytes as `llvm-ar xN` extracts them (N picks the n-th member of that name)."""
    with tempfile.TemporaryDirectory() as scratch:
        cmd = [llvm.ar, "xN", str(occurrence), str(archive.resolve()), name]
        subprocess.run(cmd, cwd=scratch, check=True, capture_output=True)
        return (Path(scratch) / name).read_bytes()


def test_regular_archive_extracts_every_member_in_order(
    llvm: Llvm, small_objects: dict[str, Path], tmp_path: Path
) -> None:
    names = ["alpha.o", "beta_with_a_long_name.o", "gamma.o"]
    for name in names:
        shutil.copy(small_objects[name], tmp_path / name)
    subprocess.run([llvm.ar, "rcs", "libfoo.a", *names], cwd=tmp_path, check=True)

    doc = prepare(tmp_path / "libfoo.a", tmp_path / "out/objects", tmp_path / "out/manifest.json")

    assert doc["version"] == 1
    assert doc["archive"] == "libfoo.a"
    assert doc["thin"] is False
    assert [m["name"] for m in doc["members"]] == names
    assert [m["position"] for m in doc["members"]] == [0, 1, 2]
    assert [m["path"] for m in doc["members"]] == [f"objects/{n}" for n in names]
    assert [m["bitcode"] for m in doc["members"]] == [True, True, False]
    for member in doc["members"]:
        extracted = (tmp_path / "out" / member["path"]).read_bytes()
        assert extracted == (tmp_path / member["name"]).read_bytes()
        assert member["size"] == len(extracted)


@pytest.mark.parametrize("fmt", ["gnu", "bsd", "darwin"])
def test_every_llvm_ar_format_gives_the_same_members(
    llvm: Llvm, small_objects: dict[str, Path], tmp_path: Path, fmt: str
) -> None:
    names = list(small_objects)
    for name in names:
        shutil.copy(small_objects[name], tmp_path / name)
    subprocess.run([llvm.ar, "rcs", f"--format={fmt}", "lib.a", *names], cwd=tmp_path, check=True)

    doc = prepare(tmp_path / "lib.a", tmp_path / "objects", tmp_path / "manifest.json")

    assert [m["name"] for m in doc["members"]] == llvm_ar_names(llvm, tmp_path / "lib.a")
    for member in doc["members"]:
        # Darwin pads member data to 8 bytes inside the recorded size: llvm-ar p prints it too.
        expected = member_bytes(llvm, tmp_path / "lib.a", member["name"])
        assert (tmp_path / member["path"]).read_bytes() == expected
        assert expected.startswith(small_objects[member["name"]].read_bytes())


def test_gnu_ar_long_and_nested_names(small_objects: dict[str, Path], tmp_path: Path) -> None:
    """GNU ar with P stores paths in its name table, which libarchive alone rejects."""
    (tmp_path / "src/deep/er").mkdir(parents=True)
    shutil.copy(small_objects["alpha.o"], tmp_path / "src/deep/er/alpha_with_a_long_name.o")
    shutil.copy(small_objects["gamma.o"], tmp_path / "src/g.o")
    members = ["src/deep/er/alpha_with_a_long_name.o", "src/g.o"]
    subprocess.run(["ar", "rcsP", "lib.a", *members], cwd=tmp_path, check=True)

    doc = prepare(tmp_path / "lib.a", tmp_path / "objects", tmp_path / "manifest.json")

    assert [m["name"] for m in doc["members"]] == members
    assert [m["path"] for m in doc["members"]] == [f"objects/{m}" for m in members]
    for member in doc["members"]:
        assert (tmp_path / member["path"]).read_bytes() == (tmp_path / member["name"]).read_bytes()


def test_nested_names_from_a_flattened_thin_archive(
    llvm: Llvm, small_objects: dict[str, Path], tmp_path: Path
) -> None:
    """`llvm-ar qcL` copies a thin archive's member paths into a regular archive's name table."""
    (tmp_path / "obj/sub").mkdir(parents=True)
    shutil.copy(small_objects["alpha.o"], tmp_path / "obj/sub/alpha.o")
    shutil.copy(small_objects["gamma.o"], tmp_path / "obj/gamma.o")
    thin = [llvm.ar, "rcT", "thin.a", "obj/sub/alpha.o", "obj/gamma.o"]
    subprocess.run(thin, cwd=tmp_path, check=True)
    subprocess.run([llvm.ar, "qcL", "flat.a", "thin.a"], cwd=tmp_path, check=True)

    doc = prepare(tmp_path / "flat.a", tmp_path / "out", tmp_path / "manifest.json")

    assert [m["name"] for m in doc["members"]] == ["obj/sub/alpha.o", "obj/gamma.o"]
    assert [m["path"] for m in doc["members"]] == ["out/obj/sub/alpha.o", "out/obj/gamma.o"]
    assert [m["bitcode"] for m in doc["members"]] == [True, False]
    assert (tmp_path / "out/obj/sub/alpha.o").read_bytes() == small_objects["alpha.o"].read_bytes()


def test_duplicate_names_never_collide_with_a_real_member_named_like_a_renamed_one(
    llvm: Llvm, tmp_path: Path
) -> None:
    """The reference renames the 2nd foo.o to foo_1.o and clobbers a real foo_1.o; we must not.

    Here a real `foo_1.o` and a real `foo~2.o` (our own scheme's first choice) come
    *after* the duplicate, so names can only be given out once all are known.
    """
    layout = [
        ("d1", "foo.o"),
        ("d2", "foo.o"),
        ("d3", "foo_1.o"),
        ("d4", "foo~2.o"),
        ("d5", "foo.o"),
    ]
    paths = []
    for i, (directory, name) in enumerate(layout):
        (tmp_path / directory).mkdir()
        (tmp_path / directory / name).write_bytes(f"member {i}\n".encode())
        paths.append(f"{directory}/{name}")
    subprocess.run([llvm.ar, "rc", "dups.a", *paths], cwd=tmp_path, check=True)
    assert llvm_ar_names(llvm, tmp_path / "dups.a") == [n for _, n in layout]

    doc = prepare(tmp_path / "dups.a", tmp_path / "objects", tmp_path / "manifest.json")

    extracted = [m["path"] for m in doc["members"]]
    assert extracted == [
        "objects/foo.o",
        "objects/foo~3.o",
        "objects/foo_1.o",
        "objects/foo~2.o",
        "objects/foo~4.o",
    ]
    assert sorted(os.listdir(tmp_path / "objects")) == sorted(p.split("/")[1] for p in extracted)
    for i, member in enumerate(doc["members"]):
        assert (tmp_path / member["path"]).read_bytes() == f"member {i}\n".encode()
        assert member["name"] == layout[i][1]


def test_duplicates_in_lua_objects_match_llvm_ar_occurrences(
    llvm: Llvm, lua_objects, tmp_path: Path
) -> None:
    """Real bitcode, every name twice: the n-th `foo.o` holds what `llvm-ar pN n` prints."""
    library = [lua_objects.root / o for o in lua_objects.library[:6]]
    for copy in ("a", "b"):
        (tmp_path / copy).mkdir()
        for obj in library:
            shutil.copy(obj, tmp_path / copy / obj.name)
    members = [f"{c}/{o.name}" for c in ("a", "b") for o in library]
    subprocess.run([llvm.ar, "rcs", "liblua.a", *members], cwd=tmp_path, check=True)

    doc = prepare(tmp_path / "liblua.a", tmp_path / "objects", tmp_path / "manifest.json")

    assert len(doc["members"]) == 12
    assert len({m["path"] for m in doc["members"]}) == 12
    seen: dict[str, int] = {}
    for member in doc["members"]:
        seen[member["name"]] = seen.get(member["name"], 0) + 1
        expected = member_bytes(llvm, tmp_path / "liblua.a", member["name"], seen[member["name"]])
        assert (tmp_path / member["path"]).read_bytes() == expected
        assert member["bitcode"] is True


def test_thin_archive_points_at_members_where_they_are(
    llvm: Llvm, small_objects: dict[str, Path], tmp_path: Path
) -> None:
    (tmp_path / "obj/sub").mkdir(parents=True)
    (tmp_path / "lib").mkdir()
    for name, place in (("alpha.o", "obj/sub"), ("gamma.o", "obj")):
        shutil.copy(small_objects[name], tmp_path / place / name)
    members = ["../obj/sub/alpha.o", "../obj/gamma.o"]
    subprocess.run([llvm.ar, "rcsT", "libthin.a", *members], cwd=tmp_path / "lib", check=True)

    doc = prepare(
        tmp_path / "lib/libthin.a", tmp_path / "out/objects", tmp_path / "out/meta/manifest.json"
    )

    assert doc["thin"] is True
    assert doc["archive"] == "libthin.a"
    assert [m["name"] for m in doc["members"]] == members
    assert [m["path"] for m in doc["members"]] == ["../../obj/sub/alpha.o", "../../obj/gamma.o"]
    assert [m["bitcode"] for m in doc["members"]] == [True, False]
    for member in doc["members"]:
        target = tmp_path / "out/meta" / member["path"]
        assert target.resolve() == (tmp_path / "lib" / member["name"]).resolve()
        assert member["size"] == target.stat().st_size
    assert list((tmp_path / "out/objects").iterdir()) == []


def test_thin_archive_member_with_an_absolute_path(
    llvm: Llvm, small_objects: dict[str, Path], tmp_path: Path
) -> None:
    member = tmp_path / "elsewhere/alpha.o"
    member.parent.mkdir()
    shutil.copy(small_objects["alpha.o"], member)
    (tmp_path / "lib").mkdir()
    subprocess.run([llvm.ar, "rcT", "lib/t.a", str(member)], cwd=tmp_path, check=True)

    doc = prepare(tmp_path / "lib/t.a", tmp_path / "objects", tmp_path / "m.json")

    assert doc["members"][0]["name"] == str(member)
    assert doc["members"][0]["path"] == "elsewhere/alpha.o"


def test_thin_archive_with_a_missing_member_is_bad_input(
    llvm: Llvm, small_objects: dict[str, Path], tmp_path: Path
) -> None:
    for name in ("alpha.o", "gamma.o"):
        shutil.copy(small_objects[name], tmp_path / name)
    subprocess.run([llvm.ar, "rcT", "t.a", "alpha.o", "gamma.o"], cwd=tmp_path, check=True)
    (tmp_path / "gamma.o").unlink()

    result = run_cli(
        ["prepare", "--archive", "t.a", "--objects-out", "objects", "--manifest-out", "m.json"],
        cwd=tmp_path,
    )

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "t.a: member 'gamma.o' (position 1): missing" in result.stderr
    assert not (tmp_path / "m.json").exists()


def test_thin_archive_of_many_members_records_each_ones_size_and_kind_in_order(
    llvm: Llvm, small_objects: dict[str, Path], tmp_path: Path
) -> None:
    # Members are probed in batches (opened, hinted, then read): more members than a
    # batch, with a member that is not a file after the first batch.
    kinds = ["alpha.o", "gamma.o", "beta_with_a_long_name.o"]
    names = [f"m{i // 100}/{i}-{kinds[i % 3]}" for i in range(700)]
    for i, name in enumerate(names):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy(small_objects[kinds[i % 3]], tmp_path / name)
    (tmp_path / "names.rsp").write_text("\n".join(names) + "\n")
    subprocess.run([llvm.ar, "rcT", "t.a", "@names.rsp"], cwd=tmp_path, check=True)

    doc = prepare(tmp_path / "t.a", tmp_path / "objects", tmp_path / "m.json")

    assert [m["path"] for m in doc["members"]] == names
    assert [m["bitcode"] for m in doc["members"]] == [i % 3 != 1 for i in range(700)]
    sizes = [small_objects[kinds[i % 3]].stat().st_size for i in range(700)]
    assert [m["size"] for m in doc["members"]] == sizes

    (tmp_path / names[300]).unlink()
    (tmp_path / names[300]).mkdir()
    result = run_cli(
        ["prepare", "--archive", "t.a", "--objects-out", "o2", "--manifest-out", "m2.json"],
        cwd=tmp_path,
    )
    assert (result.returncode, result.stderr.count("\n")) == (2, 1)
    assert f"member '{names[300]}' (position 300): {names[300]} is not a regular file" in (
        result.stderr
    )
    assert not (tmp_path / "m2.json").exists()


def test_empty_archive_gives_an_empty_manifest(llvm: Llvm, tmp_path: Path) -> None:
    subprocess.run([llvm.ar, "rc", "empty.a"], cwd=tmp_path, check=True)
    assert (tmp_path / "empty.a").read_bytes() == b"!<arch>\n"

    doc = prepare(tmp_path / "empty.a", tmp_path / "objects", tmp_path / "m.json")

    assert doc["members"] == []
    assert (tmp_path / "objects").is_dir()


def test_rust_staticlib_mixes_bitcode_and_native_members(
    llvm: Llvm, rust_staticlib: Path, tmp_path: Path
) -> None:
    doc = prepare(rust_staticlib, tmp_path / "objects", tmp_path / "manifest.json")

    members = doc["members"]
    assert [m["name"] for m in members] == llvm_ar_names(llvm, rust_staticlib)
    ours = [m for m in members if m["name"].startswith("libtiny.")]
    assert ours and all(m["bitcode"] for m in ours)
    assert any(not m["bitcode"] for m in members)  # std and compiler_builtins come native
    for member in members:
        head = (tmp_path / member["path"]).read_bytes()[:4]
        assert member["bitcode"] == (head == b"BC\xc0\xde")
        assert member["size"] == (tmp_path / member["path"]).stat().st_size
    assert len({m["path"] for m in members}) == len(members)


def test_bitcode_wrapper_magic_counts_as_bitcode(llvm: Llvm, tmp_path: Path) -> None:
    """Darwin targets wrap bitcode in a header starting \\xDE\\xC0\\x17\\x0B."""
    (tmp_path / "w.c").write_text("int w(void) { return 7; }\n")
    cmd = [llvm.clang, "--target=arm64-apple-macos11", "-flto=thin", "-c", "w.c", "-o", "w.o"]
    subprocess.run(cmd, cwd=tmp_path, check=True)
    assert (tmp_path / "w.o").read_bytes()[:4] == b"\xde\xc0\x17\x0b"
    subprocess.run([llvm.ar, "rc", "--format=darwin", "w.a", "w.o"], cwd=tmp_path, check=True)

    doc = prepare(tmp_path / "w.a", tmp_path / "objects", tmp_path / "m.json")

    assert doc["members"][0]["bitcode"] is True


def test_manifest_is_byte_identical_from_any_working_directory(
    llvm: Llvm, small_objects: dict[str, Path], tmp_path: Path
) -> None:
    for name in small_objects:
        shutil.copy(small_objects[name], tmp_path / name)
    subprocess.run([llvm.ar, "rcs", "lib.a", *small_objects], cwd=tmp_path, check=True)
    (tmp_path / "one").mkdir()
    (tmp_path / "two/deeper").mkdir(parents=True)

    prepare(Path("../lib.a"), Path("out/objects"), Path("out/m.json"), cwd=tmp_path / "one")
    prepare(
        Path("../../lib.a"),
        Path("../../one/again/objects"),
        Path("../../one/again/m.json"),
        cwd=tmp_path / "two/deeper",
    )
    prepare(tmp_path / "lib.a", tmp_path / "abs/objects", tmp_path / "abs/m.json", cwd=tmp_path)

    first = (tmp_path / "one/out/m.json").read_bytes()
    assert (tmp_path / "one/again/m.json").read_bytes() == first
    assert (tmp_path / "abs/m.json").read_bytes() == first


def test_objects_directory_beside_the_manifest_is_spelled_relative_to_it(
    llvm: Llvm, small_objects: dict[str, Path], tmp_path: Path
) -> None:
    shutil.copy(small_objects["alpha.o"], tmp_path / "alpha.o")
    subprocess.run([llvm.ar, "rc", "lib.a", "alpha.o"], cwd=tmp_path, check=True)

    doc = prepare(tmp_path / "lib.a", tmp_path / "a/objects", tmp_path / "b/m.json")

    assert doc["members"][0]["path"] == "../a/objects/alpha.o"


def test_non_empty_objects_directory_is_bad_input(
    llvm: Llvm, small_objects: dict[str, Path], tmp_path: Path
) -> None:
    shutil.copy(small_objects["alpha.o"], tmp_path / "alpha.o")
    subprocess.run([llvm.ar, "rc", "lib.a", "alpha.o"], cwd=tmp_path, check=True)
    (tmp_path / "objects").mkdir()
    (tmp_path / "objects/stale.o").write_bytes(b"old")

    result = run_cli(
        ["prepare", "--archive", "lib.a", "--objects-out", "objects", "--manifest-out", "m.json"],
        cwd=tmp_path,
    )

    assert result.returncode == 2
    assert result.stderr == "dist-lto prepare: error: objects: objects directory is not empty\n"
    assert os.listdir(tmp_path / "objects") == ["stale.o"]
    assert not (tmp_path / "m.json").exists()


def test_manifest_inside_the_objects_directory_is_bad_input(
    llvm: Llvm, small_objects: dict[str, Path], tmp_path: Path
) -> None:
    shutil.copy(small_objects["alpha.o"], tmp_path / "alpha.o")
    subprocess.run([llvm.ar, "rc", "lib.a", "alpha.o"], cwd=tmp_path, check=True)

    result = run_cli(
        [
            "prepare",
            "--archive",
            "lib.a",
            "--objects-out",
            "objects",
            "--manifest-out",
            "objects/m.json",
        ],
        cwd=tmp_path,
    )

    assert result.returncode == 2
    assert "must not be inside the objects directory" in result.stderr
    assert not (tmp_path / "objects").exists()


def test_missing_arguments_are_a_usage_error() -> None:
    result = run_cli(["prepare", "--archive", "lib.a"])
    assert result.returncode == 2
    assert result.stderr.startswith("usage: dist-lto prepare")


def test_prepare_runs_no_other_program(
    llvm: Llvm, small_objects: dict[str, Path], tmp_path: Path
) -> None:
    """Not ar, not file(1), and not the ldconfig that libarchive-c would run to find libarchive."""
    shutil.copy(small_objects["alpha.o"], tmp_path / "alpha.o")
    subprocess.run([llvm.ar, "rc", "lib.a", "alpha.o"], cwd=tmp_path, check=True)
    code = (
        "import os, subprocess, sys\n"
        "def refuse(*args, **kwargs):\n"
        "    raise RuntimeError(f'ran a program: {args!r}')\n"
        "subprocess.Popen.__init__ = refuse\n"
        "os.fork = os.posix_spawn = os.posix_spawnp = os.execv = os.execve = os.system = refuse\n"
        "from dist_lto import cli\n"
        "sys.exit(cli.main(['prepare', '--archive', 'lib.a', '--objects-out', 'objects',"
        " '--manifest-out', 'm.json']))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("LIBARCHIVE", "DIST_LTO_DEBUG")}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "objects/alpha.o").read_bytes() == small_objects["alpha.o"].read_bytes()
