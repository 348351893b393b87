"""`dist-lto upstream ...`: upstream's command lines and formats on our tools.

The whole route runs with real Buck2 in tests/test_upstream_buck2.py; these pin the
translations one by one, with real clang/llvm-ar where files are involved.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from dist_lto.errors import BadInput
from dist_lto.llvm.toolchain import tool
from dist_lto.upstream import formats as upstream_formats
from dist_lto.upstream import opt as upstream_opt
from dist_lto.upstream import plan as upstream_plan
from hypothesis import given, settings
from hypothesis import strategies as st
from support.budget import examples
from support.links import ThinIndex
from support.tools import REPO, Llvm, run_cli
from test_opt_cli import MAIN, OPT_PATH_MODULES, imported_modules


def test_buck2_source_list_is_the_whole_package() -> None:
    text = (REPO / "upstream" / "sources.bzl").read_text()
    listed = re.findall(r'^\s+"(dist_lto/[^"]+\.py)",$', text, re.M)
    package = sorted(
        str(p.relative_to(REPO / "tools")) for p in (REPO / "tools" / "dist_lto").rglob("*.py")
    )
    assert listed == package, "update upstream/sources.bzl"
    assert (REPO / "upstream" / "dist_lto").resolve() == REPO / "tools" / "dist_lto"
    # The servers' sources, which the opt worker builds: every one, and its header.
    native = re.findall(r'^\s+"(dist_lto/[^"]+\.(?:c|cpp|h))",$', text, re.M)
    built = sorted(str(p.relative_to(REPO / "tools")) for p in (REPO / "tools" / "dist_lto")
                   .rglob("*") if p.suffix in (".c", ".cpp", ".h"))  # fmt: skip
    assert sorted(native) == built and "dist_lto/process/jobsocket.h" in built


def test_opt_command_line_becomes_ours() -> None:
    argv = ["--out", "o/m.opt.o", "--input", "o/m.o", "--index", "i/m.o.thinlto.bc",
            "--split-dwarf=none", "--args", "link.args", "--", "/usr/bin/clang++"]  # fmt: skip
    assert upstream_opt.translate_argv(argv) == [
        "--input", "o/m.o", "--index", "i/m.o.thinlto.bc", "--out", "o/m.opt.o",
        "--args", "link.args", "--", "/usr/bin/clang++",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("upstream", "ours"),
    [(["--split-dwarf=split", "--dwo", "m.opt.dwo"], ["--split-dwarf=split", "--dwo", "m.opt.dwo"]),
     (["--split-dwarf=single"], ["--split-dwarf=single"]),
     (["--split-dwarf=none"], [])],
)  # fmt: skip
def test_split_dwarf_modes_become_ours(upstream: list[str], ours: list[str]) -> None:
    argv = ["--out", "m.opt.o", "--input", "m.o", "--index", "m.bc", *upstream, "--", "clang++"]
    assert upstream_opt.translate_argv(argv) == [
        "--input", "m.o", "--index", "m.bc", "--out", "m.opt.o", *ours, "--", "clang++",
    ]  # fmt: skip


@pytest.mark.parametrize("extra", [["--bogus", "x"], ["stray"]])
def test_opt_refuses_what_it_cannot_run(extra: list[str]) -> None:
    argv = ["--out", "m.opt.o", "--input", "m.o", "--index", "m.bc", *extra, "--", "clang"]
    with pytest.raises(BadInput):
        upstream_opt.translate_argv(argv)


def test_upstream_opt_imports_only_the_opt_path(lua_thin_index: ThinIndex, tmp_path: Path) -> None:
    """`dist-lto upstream opt` runs once per module: it loads what `dist-lto opt` loads
    plus the dispatcher and the adapter."""
    baseline = imported_modules(["-c", "import os, _signal"], tmp_path)
    args = tmp_path / "link.args"
    args.write_text("/usr/lib/llvm-22/bin/clang++\n-fuse-ld=lld\n-O2\n-lm\n")
    out = tmp_path / "lzio.opt.o"
    run = imported_modules(
        [MAIN, "upstream", "opt", "--out", str(out), "--input", "obj/lzio.o", "--index",
         "obj/lzio.o.thinlto.bc", "--split-dwarf=none", "--args", str(args), "--",
         tool("clang")],
        lua_thin_index.root,
    )  # fmt: skip
    assert out.stat().st_size > 0
    assert run - baseline == OPT_PATH_MODULES | {"dist_lto.upstream", "dist_lto.upstream.opt"}


def test_index_command_loses_the_real_output_and_patched_lld_flags() -> None:
    command = ["clang++", "-fuse-ld=lld", "@out/app.thinlto_index_argsfile", "-o", "out/app",
               "-Wl,--thinlto-index-only=out/idx/index", "-Wl,--thinlto-emit-imports-files",
               "-Wl,--thinlto-full-index", "-Wl,--thinlto-prefix-replace=;out/idx/",
               "-lm"]  # fmt: skip
    split = upstream_formats.split_index_command(command)
    assert split.head == ["clang++", "-fuse-ld=lld"]
    assert split.argsfile == "out/app.thinlto_index_argsfile"
    assert split.tail == ["-lm"]


def test_upstream_meta_with_a_torn_entry_is_bad_input(tmp_path: Path) -> None:
    meta = tmp_path / "app.thinlto.meta"
    meta.write_text("a.o\na.o.thinlto.bc\na.o.opt.plan\n0\n\n\n")
    with pytest.raises(BadInput, match="not a multiple of 7"):
        upstream_formats.read_upstream_meta(str(meta))


@pytest.mark.parametrize("end", ["\n", "\n\n"])
def test_upstream_meta_ending_with_an_object_keeps_its_empty_fields(
    tmp_path: Path, end: str
) -> None:
    """An object's entry ends with three empty lines (no archive): upstream's
    terminating empty line, and a newline after it, are not part of it (Buck2 writes
    the lines joined by newlines, the last one empty)."""
    meta = tmp_path / "app.thinlto.meta"
    entries = ["m/a.o", "", "", "1", "liba.a", "a/plan.json", "a/indexes",
               "main.o", "main.o.thinlto.bc", "main.o.opt.plan", "0", "", "", ""]  # fmt: skip
    meta.write_text("\n".join(entries) + end)
    up = upstream_formats.read_upstream_meta(str(meta))
    assert list(up.objects) == ["main.o"]
    assert up.member_archive == {"m/a.o": 1}


def test_archive_members_become_one_archive_of_our_meta() -> None:
    up = upstream_formats.UpstreamMeta({}, {}, {})
    up.objects["main.o"] = upstream_formats.UpstreamObject("main.o", 0, "x/main.o.thinlto.bc", "p")
    archive = upstream_formats.UpstreamArchive(1, "prep/lib/plan.json", "prep/lib/indexes")
    archive.members = ["prep/lib/objects/m/a.o", "prep/lib/objects/m/b.o"]
    up.archives[1] = archive
    up.member_archive = {m: 1 for m in archive.members}
    line = ["-pie", "main.o", "-Wl,--start-lib", *archive.members, "-Wl,--end-lib", "-lm"]
    meta, lazy = upstream_plan.our_meta(up, line, ["-lstdc++"], "scratch")
    assert lazy == []
    (group, tail) = meta["groups"]
    kinds = [(item["kind"], item.get("args")) for item in group["linkables"]]
    assert kinds == [("args", ["-pie"]), ("object", None), ("archive", None), ("args", ["-lm"])]
    lib = group["linkables"][2]
    assert lib["manifest"] == "prep/lib/objects/manifest.json"
    assert lib["opt_objects_dir"] == "prep/lib/opt_objects"
    assert lib["whole"] is False
    assert group["linkables"][1]["opt_output"] == "x/main.o.opt.o"
    assert tail == {"linkables": [{"kind": "args", "args": ["-lstdc++"]}]}


def test_objects_between_start_lib_and_end_lib_become_an_archive_of_their_own() -> None:
    """A `cxx_library(use_archive = False)`: its objects are lazy, like members."""
    up = upstream_formats.UpstreamMeta({}, {}, {})
    for i, path in enumerate(["main.o", "lib/a.o", "lib/b.o", "/abs/c.o"]):
        up.objects[path] = upstream_formats.UpstreamObject(path, i, f"x/{i}.thinlto.bc", f"p{i}")
    line = ["main.o", "-Wl,--start-lib", "lib/a.o", "lib/b.o", "-Wl,--end-lib", "--start-lib",
            "/abs/c.o", "--end-lib", "-Wl,--start-lib", "-lm", "-Wl,--end-lib"]  # fmt: skip
    meta, lazy = upstream_plan.our_meta(up, line, [], "scratch")
    kinds = [
        (item["kind"], item.get("index"), item.get("args"))
        for item in meta["groups"][0]["linkables"]
    ]
    assert kinds == [
        ("object", 0, None), ("archive", 4, None), ("archive", 5, None),
        ("args", None, ["-Wl,--start-lib", "-lm", "-Wl,--end-lib"]),
    ]  # fmt: skip
    assert [[o.path for o in g.objects] for g in lazy] == [["lib/a.o", "lib/b.o"], ["/abs/c.o"]]
    # Given to our planner by their objects, spelled as upstream spells them (nothing is
    # written for them: no manifest, no archive).
    given = [item.get("objects") for item in meta["groups"][0]["linkables"][1:3]]
    assert given == [["lib/a.o", "lib/b.o"], ["/abs/c.o"]]
    assert all("manifest" not in item for item in meta["groups"][0]["linkables"][1:3])
    assert all(item.get("whole") is False for item in meta["groups"][0]["linkables"][1:3])


_OBJECTS = ["a.o", "b.o", "c.o", "d.o"]
_MEMBERS = ["m/x.o", "m/y.o"]


@st.composite
def index_lines(draw: st.DrawFn) -> tuple[list[str], bool]:
    """A line as upstream writes one (objects, lazy groups of objects, args, the
    archive's members lazy or whole), sometimes with a stray --start-lib or --end-lib;
    and whether the archive is on it."""
    pool = list(draw(st.permutations(_OBJECTS)))
    line: list[str] = []
    kinds = ["object", "lazy", "arg", "stray", "archive", "whole"]
    archive = False
    for kind in draw(st.lists(st.sampled_from(kinds), max_size=7)):
        if kind == "object" and pool:
            line.append(pool.pop())
        elif kind == "lazy" and pool:
            take = draw(st.integers(1, len(pool)))
            line += ["-Wl,--start-lib", *pool[-take:], "-Wl,--end-lib"]
            del pool[-take:]
        elif kind == "arg":
            line.append(draw(st.sampled_from(["-lm", "-L.", "x.so"])))
        elif kind == "stray":
            line.append(draw(st.sampled_from(["-Wl,--start-lib", "-Wl,--end-lib"])))
        elif kind in ("archive", "whole") and not archive:
            archive = True
            lazy = kind == "archive"
            line += ["-Wl,--start-lib", *_MEMBERS, "-Wl,--end-lib"] if lazy else _MEMBERS
    return line, archive


@given(drawn=index_lines())
@settings(max_examples=examples(300), deadline=None)
def test_any_index_line_gives_each_object_one_place_or_bad_input(
    drawn: tuple[list[str], bool],
) -> None:
    """Every object on the line ends up in our meta exactly once, alone or in a lazy
    group (only between --start-lib and --end-lib), or the line is refused as bad input;
    lazy groups get archive indices of their own."""
    line, has_archive = drawn
    up = upstream_formats.UpstreamMeta({}, {}, {})
    for i, path in enumerate(_OBJECTS):
        up.objects[path] = upstream_formats.UpstreamObject(path, i, f"{path}.bc", f"{path}.plan")
    if has_archive:
        up.archives[7] = upstream_formats.UpstreamArchive(7, "prep/plan.json", "idx", _MEMBERS)
        up.member_archive = dict.fromkeys(_MEMBERS, 7)
    try:
        meta, lazy = upstream_plan.our_meta(up, line, [], "scratch")
    except BadInput:
        return
    items = meta["groups"][0]["linkables"]
    alone = [item["path"] for item in items if item["kind"] == "object"]
    grouped = [obj.path for group in lazy for obj in group.objects]
    assert sorted(alone + grouped) == sorted(t for t in line if t in up.objects)
    for group in lazy:
        first = line.index(group.objects[0].path)
        assert line[first - 1] == "-Wl,--start-lib"
        assert line[first + len(group.objects)] == "-Wl,--end-lib"
    indices = [item["index"] for item in items if item["kind"] == "archive"]
    assert len(indices) == len(set(indices))
    upstream_indices = [*up.archives, *(o.index for o in up.objects.values())]
    assert all(group.index > max(upstream_indices) for group in lazy)


def test_lazy_object_members_import_as_objects_to_upstream() -> None:
    group = upstream_plan.LazyGroup(7, [upstream_formats.UpstreamObject("a.o", 3, "a.bc", "a.p"),
                                        upstream_formats.UpstreamObject("b.o", 5, "b.bc", "b.p")],
                                    "i", "o")  # fmt: skip
    imports = upstream_plan.ImportMap.of([group])
    plan = {"imports": [1], "archive_imports": [2, 7], "member_imports": [[2, 0], [7, 1]]}
    assert imports.translate(plan) == {"imports": [1, 5], "archive_imports": [2]}


def test_duplicate_member_names_never_overwrite_a_real_member(llvm: Llvm, tmp_path: Path) -> None:
    """Upstream renames a second `util.o` to `util_1.o`, over a real `util_1.o`."""
    sources = {"a/util.c": "int a(void){return 1;}", "b/util.c": "int b(void){return 2;}",
               "util_1.c": "int c(void){return 3;}"}  # fmt: skip
    objects = []
    for name, text in sources.items():
        src = tmp_path / name
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(text)
        obj = src.with_suffix(".o")
        subprocess.run([llvm.clang, "-flto=thin", "-O2", "-c", src, "-o", obj], check=True)
        objects.append(obj)
    archive = tmp_path / "libutil.a"
    subprocess.run([llvm.ar, "rc", archive, *objects], check=True)
    result = run_cli(["upstream", "prepare", "--manifest-out", "prep/manifest.json",
                      "--objects-out", "prep/objects", "--ar", llvm.ar, "--archive",
                      str(archive), "--name", "libutil.a"], cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    listed = json.loads((tmp_path / "prep" / "manifest.json").read_text())["objects"]
    assert len(set(listed)) == 3
    assert sorted((tmp_path / p).read_bytes() for p in listed) == sorted(
        o.read_bytes() for o in objects
    )
    assert all(p.startswith("prep/objects/m/") for p in listed)


def test_thin_archive_members_are_copied_into_the_objects_directory(
    llvm: Llvm, tmp_path: Path
) -> None:
    src = tmp_path / "src" / "x.c"
    src.parent.mkdir()
    src.write_text("int x(void){return 4;}")
    obj = src.with_suffix(".o")
    subprocess.run([llvm.clang, "-flto=thin", "-O2", "-c", src, "-o", obj], check=True)
    subprocess.run([llvm.ar, "rcT", tmp_path / "lib" / "libx.a", obj], check=False)
    (tmp_path / "lib").mkdir(exist_ok=True)
    subprocess.run([llvm.ar, "rcT", tmp_path / "lib" / "libx.a", obj], check=True)
    result = run_cli(["upstream", "prepare", "--manifest-out", "prep/manifest.json",
                      "--objects-out", "prep/objects", "--archive", "lib/libx.a"],
                     cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    listed = json.loads((tmp_path / "prep" / "manifest.json").read_text())["objects"]
    assert listed == ["prep/objects/m/x.o"]
    assert (tmp_path / listed[0]).read_bytes() == obj.read_bytes()
    assert not (tmp_path / listed[0]).is_symlink()


def test_thin_archive_with_a_missing_member_is_one_line_of_bad_input(
    llvm: Llvm, tmp_path: Path
) -> None:
    src = tmp_path / "x.c"
    src.write_text("int x(void){return 4;}")
    obj = tmp_path / "x.o"
    subprocess.run([llvm.clang, "-flto=thin", "-c", src, "-o", obj], check=True)
    subprocess.run([llvm.ar, "rcT", tmp_path / "libx.a", obj], check=True)
    obj.unlink()
    result = run_cli(["upstream", "prepare", "--manifest-out", "p/manifest.json",
                      "--objects-out", "p/objects", "--archive", "libx.a"],
                     cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "x.o" in result.stderr
    assert not (tmp_path / "p" / "manifest.json").exists()


def test_upstream_plan_errors_name_the_users_meta_file_and_its_line(
    llvm: Llvm, tmp_path: Path
) -> None:
    """The planner reads upstream's meta translated in memory: a problem with an input
    names upstream's file and the input's line there, never a file of ours."""
    (tmp_path / "main.c").write_text("int main(void){return 0;}")
    (tmp_path / "shoüt.c").write_text("int shout(void){return 1;}")
    for name in ("main", "shoüt"):
        subprocess.run([llvm.clang, "-flto=thin", "-O2", "-c", f"{name}.c"], cwd=tmp_path,
                       check=True)  # fmt: skip
    entries = ["main.o", "out/main.o.thinlto.bc", "out/main.plan", "0", "", "", "",
               "shoüt.o", "out/shoüt.o.thinlto.bc", "out/shoüt.plan", "1", "", "", ""]  # fmt: skip
    (tmp_path / "up.meta").write_text("\n".join(entries) + "\n\n")
    (tmp_path / "x.thinlto_index_argsfile").write_text("main.o\nshoüt.o\n")
    result = run_cli(["upstream", "plan", "--meta", "up.meta", "--index", "idx", "--link-plan",
                      "lp.json", "--final-link-index", "fli", "--", llvm.clang, "-fuse-ld=lld",
                      "@x.thinlto_index_argsfile", "-o", "prog"], cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.startswith("dist-lto upstream: error: up.meta: line 8 (object 1):")
    assert "not ASCII" in result.stderr and len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("index", [str(1 << 64), "-1"])
def test_an_upstream_meta_index_beyond_64_bits_or_negative_is_bad_input(
    tmp_path: Path, index: str
) -> None:
    entries = ["main.o", "out/main.o.thinlto.bc", "out/main.plan", index, "", "", ""]
    (tmp_path / "up.meta").write_text("\n".join(entries) + "\n\n")
    (tmp_path / "x.thinlto_index_argsfile").write_text("main.o\n")
    result = run_cli(["upstream", "plan", "--meta", "up.meta", "--index", "idx", "--link-plan",
                      "lp.json", "--final-link-index", "fli", "--", "clang", "-fuse-ld=lld",
                      "@x.thinlto_index_argsfile", "-o", "prog"], cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (
        f"dist-lto upstream: error: up.meta: line 4: index {index!r} is not between 0 and 2**63-1"
    )
