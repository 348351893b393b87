"""`dist-lto opt` with real clang/LLD 22 on real programs.

The reference for "correct" is LLD's in-process ThinLTO: `--save-temps=prelink`
keeps the native object it generated for each module, and every function that
`dist-lto opt` generates must be byte-identical to it (code and relocations).
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from dist_lto.llvm.toolchain import tool
from support import objcode, workloads
from support.links import SMALL_PROGRAM, ThinIndex
from support.opt_command import OPT, opt_command
from support.slow import slow_fixture
from support.tools import Llvm

# ---------------------------------------------------------------------------------
# Comparing functions between objects


def compare(reference: Path, ours: Path) -> tuple[int, list[str]]:
    """(identical functions, names that differ or are missing on either side)."""
    ref, mine = objcode.functions(reference), objcode.functions(ours)
    same = {name for name in ref if mine.get(name) == ref[name]}
    return len(same), sorted((set(ref) | set(mine)) - same)


# ---------------------------------------------------------------------------------
# Lua, distributed with dist-lto opt vs in-process


@dataclass(frozen=True)
class Distributed:
    build: workloads.Build
    link_flags_file: Path
    reference: str
    """Output name of the in-process link; its objects are obj/<reference>.lto.<stem>.o."""
    opt_objects: dict[str, Path]


def run_opt(root: Path, module: str, out: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        opt_command(module, out, tool_clang(), *options), cwd=root, capture_output=True, text=True
    )


def tool_clang() -> str:
    return tool("clang")


def index_and_reference(
    llvm: Llvm, build: workloads.Build, link_flags: list[str], ref: str
) -> None:
    """The index step and the in-process reference link, with the same link flags."""
    objects = build.objects
    subprocess.run(
        [
            llvm.clang,
            *link_flags,
            *objects,
            "-o",
            "index-only",
            "-Wl,--thinlto-index-only",
            "-Wl,--thinlto-emit-imports-files",
        ],
        cwd=build.root,
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [llvm.clang, *link_flags, *objects, "-o", ref, "-Wl,--save-temps=prelink"],
        cwd=build.root,
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="module")
@slow_fixture
def lua_distributed(tmp_path_factory: pytest.TempPathFactory, llvm: Llvm) -> Distributed:
    """Lua's every module through `dist-lto opt`, beside LLD's in-process ThinLTO.

    The link names no optimisation level, so both sides use LLD's default: a wrong
    default in `opt` shows up as different code.
    """
    build = workloads.build("lua", tmp_path_factory.mktemp("lua-dist"))
    link_flags = ["-flto=thin", "-fuse-ld=lld", *build.link_flags]
    index_and_reference(llvm, build, link_flags, "lua-inprocess")
    args = build.root / "link.args"
    args.write_text("".join(f"{flag}\n" for flag in link_flags))
    out_dir = build.root / "opt"

    def one(module: str) -> tuple[str, Path]:
        out = out_dir / f"{module}.native.o"
        out.parent.mkdir(parents=True, exist_ok=True)
        result = run_opt(build.root, module, out, "--args", str(args))
        assert result.returncode == 0, result.stderr
        return module, out

    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        opt_objects = dict(pool.map(one, build.objects))
    return Distributed(build, args, "lua-inprocess", opt_objects)


def reference_object(d: Distributed, module: str) -> Path:
    stem = Path(module).stem
    return d.build.root / Path(module).parent / f"{d.reference}.lto.{stem}.o"


def disassembly(exe: Path) -> dict[str, list[str]]:
    """Each function of a linked program as disassembly lines; a call into the PLT is
    named by its target only (PLT slots are numbered in the order the link met them)."""
    text = subprocess.run(
        [tool("llvm-objdump"), "-d", "--no-show-raw-insn", "--section=.text", str(exe)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in text.splitlines():
        start = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if start:
            lines = result.setdefault(start.group(1), [])
        elif line.strip():
            lines.append(re.sub(r"0x[0-9a-f]+ <([^>]+@plt)>", r"<\1>", line))
    return result


@pytest.fixture(scope="module")
def lua_linked(llvm: Llvm, lua_distributed: Distributed) -> Path:
    """The final link of the `dist-lto opt` objects, in the link's order."""
    d = lua_distributed
    exe = d.build.root / "lua-distributed"
    subprocess.run(
        [llvm.clang, "-fuse-ld=lld", *map(str, d.opt_objects.values()), "-o", str(exe),
         *d.build.link_flags],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return exe


def test_distributed_lua_links_and_runs(lua_linked: Path) -> None:
    workloads.check_binary("lua", lua_linked)


def test_linked_code_equals_in_process_thinlto(
    lua_distributed: Distributed, lua_linked: Path
) -> None:
    reference = disassembly(lua_distributed.build.root / lua_distributed.reference)
    ours = disassembly(lua_linked)
    assert sorted(ours) == sorted(reference)
    differing = sorted(name for name in reference if ours[name] != reference[name])
    assert differing == []
    lua_functions = set().union(
        *(objcode.functions(o) for o in lua_distributed.opt_objects.values())
    )
    assert len(lua_functions) > 600  # Lua 5.4 has 639 functions after ThinLTO
    assert lua_functions <= set(reference)


def test_object_code_equals_in_process_thinlto(lua_distributed: Distributed) -> None:
    # Before linking, one function differs: luaL_openlibs takes the addresses of the
    # luaopen_* functions of other modules. In-process LTO knows they are local to the
    # link and uses `lea`; the individual index does not say so, and the backend loads
    # them from the GOT, a relocation the linker relaxes back into the same `lea`.
    total = identical = 0
    differing: dict[str, list[str]] = {}
    for module, ours in lua_distributed.opt_objects.items():
        reference = reference_object(lua_distributed, module)
        same, diff = compare(reference, ours)
        identical += same
        total += len(objcode.functions(reference))
        if diff:
            differing[module] = diff
    assert differing == {"obj/linit.o": ["luaL_openlibs"]}
    assert identical == total - 1


def test_without_lld_defaults_the_code_differs(
    lua_distributed: Distributed, tmp_path: Path
) -> None:
    # The default flags are what make the code identical; without them most of it differs.
    d = lua_distributed
    identical = total = 0
    for module in ("obj/lvm.o", "obj/lstrlib.o", "obj/lapi.o"):
        out = tmp_path / Path(module).name
        result = run_opt(
            d.build.root, module, out, "--args", str(d.link_flags_file), "--no-lld-defaults"
        )
        assert result.returncode == 0, result.stderr
        same, _ = compare(reference_object(d, module), out)
        identical += same
        total += len(objcode.functions(reference_object(d, module)))
    assert identical < total


@pytest.mark.slow  # compiles Lua itself
def test_o3_non_pie_link_also_equals_in_process(
    llvm: Llvm, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # A non-PIC link needs -fno-pic: clang's default (PIE) would generate different code.
    build = workloads.build("lua", tmp_path_factory.mktemp("lua-nopie"))
    link_flags = [
        "-O3",
        "-no-pie",
        "-flto=thin",
        "-fuse-ld=lld",
        "-Wl,--gc-sections",
        *build.link_flags,
    ]
    index_and_reference(llvm, build, link_flags, "lua-o3")
    args = build.root / "link.args"
    args.write_text("\n".join(link_flags))
    d = Distributed(build, args, "lua-o3", {})
    for module in ("obj/lvm.o", "obj/lua.o", "obj/lstrlib.o"):
        out = build.root / f"{module}.native.o"
        result = run_opt(build.root, module, out, "--args", str(args))
        assert result.returncode == 0, result.stderr
        assert (
            "-O3"
            in run_opt(
                build.root, module, out, "--args", str(args), "--print-command"
            ).stdout.split()
        )
        same, diff = compare(reference_object(d, module), out)
        assert diff == [], module
        assert same == len(objcode.functions(reference_object(d, module)))


# ---------------------------------------------------------------------------------
# Strictness with the real compiler


def clang_alone(root: Path, module: str, index: str, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool_clang(), "-c", "-x", "ir", module, f"-fthinlto-index={index}", "-O2", "-o", str(out)],
        cwd=root,
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize("spelling", ["./obj/lua.o", "ABSOLUTE"])
def test_input_spelled_differently_from_the_index_step_fails_before_clang(
    lua_thin_index: ThinIndex, tmp_path: Path, spelling: str
) -> None:
    root = lua_thin_index.root
    module = str(root / "obj/lua.o") if spelling == "ABSOLUTE" else spelling
    # What clang alone does with that spelling: exit 0, an object without code.
    alone = clang_alone(root, module, "obj/lua.o.thinlto.bc", tmp_path / "alone.o")
    assert alone.returncode == 0
    assert objcode.functions(tmp_path / "alone.o") == {}
    result = subprocess.run(
        [
            *OPT,
            "--input",
            module,
            "--index",
            "obj/lua.o.thinlto.bc",
            "--out",
            str(tmp_path / "lua.opt.o"),
            "--",
            tool_clang(),
        ],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "it has 'obj/lua.o': spell the input exactly as the index step saw it" in result.stderr
    assert not (tmp_path / "lua.opt.o").exists()


def test_missing_imported_module_fails_with_clangs_message(
    lua_thin_index: ThinIndex, tmp_path: Path
) -> None:
    (tmp_path / "obj").mkdir()
    for name in ("lua.o", "lua.o.thinlto.bc"):
        shutil.copy(lua_thin_index.root / "obj" / name, tmp_path / "obj" / name)
    alone = clang_alone(tmp_path, "obj/lua.o", "obj/lua.o.thinlto.bc", tmp_path / "alone.o")
    assert alone.returncode == 0  # clang alone: exit 0, 0-byte object
    assert (tmp_path / "alone.o").stat().st_size == 0
    result = run_opt(tmp_path, "obj/lua.o", tmp_path / "lua.opt.o")
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0].startswith("dist-lto opt: error: obj/lua.o: ")
    assert "exited 0 but its output is empty (0 bytes)" in lines[0]
    assert "Error loading imported file" in result.stderr
    assert not (tmp_path / "lua.opt.o").exists()


def test_real_backend_error_passes_clangs_status(lua_thin_index: ThinIndex, tmp_path: Path) -> None:
    (tmp_path / "obj").mkdir()
    bitcode = (lua_thin_index.root / "obj/lua.o").read_bytes()
    (tmp_path / "obj/lua.o").write_bytes(bitcode[: len(bitcode) // 2])  # corrupt bitcode
    shutil.copy(lua_thin_index.root / "obj/lua.o.thinlto.bc", tmp_path / "obj/lua.o.thinlto.bc")
    result = run_opt(tmp_path, "obj/lua.o", tmp_path / "lua.opt.o")
    assert result.returncode == 1
    assert "obj/lua.o: " in result.stderr.splitlines()[0]
    assert "clang exited with status 1" in result.stderr.splitlines()[0]
    assert "error:" in result.stderr
    assert not (tmp_path / "lua.opt.o").exists()


def test_empty_index_is_rejected(lua_thin_index: ThinIndex, tmp_path: Path) -> None:
    empty = tmp_path / "empty.thinlto.bc"
    empty.write_bytes(b"")
    result = subprocess.run(
        [
            *OPT,
            "--input",
            "obj/lua.o",
            "--index",
            str(empty),
            "--out",
            str(tmp_path / "o.o"),
            "--",
            tool_clang(),
        ],
        cwd=lua_thin_index.root,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "ThinLTO index is empty (0 bytes)" in result.stderr


@pytest.fixture(scope="module")
def small_program(tmp_path_factory: pytest.TempPathFactory, llvm: Llvm) -> Path:
    """main.c and lib.c with debug info, plus a lazy member never pulled in, indexed."""
    root = tmp_path_factory.mktemp("small")
    (root / "main.c").write_text("int lib(int);\nint main(int c, char **v) { return lib(c); }\n")
    (root / "lib.c").write_text("int lib(int x) { return x * 7 + 1; }\n")
    (root / "unused.c").write_text("int never_called(int x) { return x - 1; }\n")
    (root / "native.c").write_text("int native(int x) { return x; }\n")
    for name in ("main", "lib", "unused"):
        subprocess.run(
            [llvm.clang, "-O2", "-g", "-flto=thin", "-c", f"{name}.c", "-o", f"{name}.o"],
            cwd=root,
            check=True,
        )
    subprocess.run([llvm.clang, "-O2", "-c", "native.c", "-o", "native.o"], cwd=root, check=True)
    subprocess.run(
        [
            llvm.clang,
            "-flto=thin",
            "-fuse-ld=lld",
            "main.o",
            "lib.o",
            "-Wl,--start-lib",
            "unused.o",
            "-Wl,--end-lib",
            "-o",
            "prog",
            "-Wl,--thinlto-index-only",
            "-Wl,--thinlto-emit-imports-files",
        ],
        cwd=root,
        check=True,
    )
    return root


def test_lazy_member_the_index_step_skipped_is_accepted(
    small_program: Path, tmp_path: Path
) -> None:
    result = run_opt(small_program, "unused.o", tmp_path / "unused.opt.o")
    assert result.returncode == 0, result.stderr
    assert objcode.functions(tmp_path / "unused.opt.o") == {}


def test_non_bitcode_object_passes_through_without_running_clang(
    small_program: Path, tmp_path: Path
) -> None:
    out, dwo = tmp_path / "native.opt.o", tmp_path / "native.opt.dwo"
    result = subprocess.run(
        [
            *OPT,
            "--input",
            "native.o",
            "--index",
            "native.o.thinlto.bc",
            "--out",
            str(out),
            "--dwo",
            str(dwo),
            "--",
            str(tmp_path / "clang-that-does-not-exist"),
        ],
        cwd=small_program,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert out.read_bytes() == (small_program / "native.o").read_bytes()
    assert out.stat().st_ino == (small_program / "native.o").stat().st_ino  # a hard link
    assert dwo.read_bytes() == b""


def batch(*modules: tuple[str, Path]) -> list[str]:
    """`dist-lto opt` for several modules (indexes beside them) in one command."""
    files = [
        arg
        for module, out in modules
        for arg in ("--input", module, "--index", f"{module}.thinlto.bc", "--out", str(out))
    ]
    return [*OPT, *files, "--", tool_clang()]  # fmt: skip


def test_a_batch_writes_each_modules_object_as_its_own_command_does(
    small_program: Path, tmp_path: Path
) -> None:
    alone = {m: tmp_path / f"{m}.alone.o" for m in ("main.o", "lib.o", "native.o")}
    for module, out in alone.items():
        assert run_opt(small_program, module, out).returncode == 0
    batched = {m: tmp_path / f"{m}.batched.o" for m in alone}
    done = subprocess.run(batch(*batched.items()), cwd=small_program, capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    for module in alone:
        assert batched[module].read_bytes() == alone[module].read_bytes(), module
    printing = [*batch(*batched.items())[:-2], "--print-command", "--", tool_clang()]
    printed = subprocess.run(printing, cwd=small_program, capture_output=True, text=True)
    lines = printed.stdout.splitlines()
    assert printed.returncode == 0 and len(lines) == 3, printed.stderr
    assert "main.o" in lines[0] and "lib.o" in lines[1] and "not LLVM bitcode" in lines[2]


def test_a_batch_stops_at_its_first_failing_backend_with_that_backends_line(
    small_program: Path, tmp_path: Path
) -> None:
    shutil.copy(small_program / "lib.o.thinlto.bc", tmp_path / "lib.o.thinlto.bc")
    (tmp_path / "lib.o").write_bytes((small_program / "lib.o").read_bytes()[:200])  # corrupt
    for name in ("main.o", "main.o.thinlto.bc", "unused.o", "unused.o.thinlto.bc"):
        shutil.copy(small_program / name, tmp_path / name)
    outs = [tmp_path / "unused.opt.o", tmp_path / "lib.opt.o", tmp_path / "main.opt.o"]
    command = batch(("unused.o", outs[0]), ("lib.o", outs[1]), ("main.o", outs[2]))
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode != 0
    first = done.stderr.splitlines()[0]
    assert first.startswith("dist-lto opt: error: ") and "lib.o" in first, done.stderr
    assert outs[0].exists() and not outs[1].exists() and not outs[2].exists()


@pytest.mark.parametrize(
    ("files", "problem"),
    [
        (["--input", "a.o", "--input", "b.o", "--index", "a.bc", "--out", "a.opt"],
         "give each --input its own --index and --out"),
        (["--input", "a.o", "--index", "a.bc", "--out", "b.o", "--input", "b.o", "--index",
          "b.bc", "--out", "c.o"], "b.o: --out names the same file as --input 'b.o'"),
    ],
)  # fmt: skip
def test_a_batch_whose_files_do_not_pair_up_or_collide_is_refused(
    files: list[str], problem: str, tmp_path: Path
) -> None:
    done = subprocess.run([*OPT, *files, "--", tool_clang()], cwd=tmp_path, capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 2
    assert problem in done.stderr, done.stderr


def test_input_neither_bitcode_nor_elf_is_bad_input(small_program: Path, tmp_path: Path) -> None:
    result = run_opt(small_program, "main.c", tmp_path / "x.o")
    assert result.returncode == 2
    assert "main.c: not LLVM bitcode, and not an ELF object either" in result.stderr
    assert not (tmp_path / "x.o").exists()


def test_split_dwarf_writes_the_dwo_the_object_names(small_program: Path, tmp_path: Path) -> None:
    for name in ("lib.o", "lib.o.thinlto.bc"):
        shutil.copy(small_program / name, tmp_path / name)
    (tmp_path / "out").mkdir()
    result = subprocess.run(
        [
            *OPT,
            "--input",
            "lib.o",
            "--index",
            "lib.o.thinlto.bc",
            "--out",
            "out/lib.opt.o",
            "--dwo",
            "out/lib.opt.dwo",
            "--",
            tool_clang(),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["lib.opt.dwo", "lib.opt.o"]
    assert (tmp_path / "out/lib.opt.dwo").stat().st_size > 0
    dump = subprocess.run(
        [tool("llvm-dwarfdump"), "--debug-info", "out/lib.opt.o"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert 'DW_AT_dwo_name\t("out/lib.opt.dwo")' in dump
    dwo_dump = subprocess.run(
        [tool("llvm-dwarfdump"), "--debug-info", "out/lib.opt.dwo"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert '"lib"' in dwo_dump  # the function's debug information went to the .dwo


def test_split_dwarf_single_keeps_it_in_the_object_that_its_skeleton_names(
    small_program: Path, tmp_path: Path
) -> None:
    for name in ("lib.o", "lib.o.thinlto.bc"):
        shutil.copy(small_program / name, tmp_path / name)
    (tmp_path / "out").mkdir()
    result = subprocess.run(
        [*OPT, "--input", "lib.o", "--index", "lib.o.thinlto.bc", "--out", "out/lib.opt.o",
         "--split-dwarf=single", "--", tool_clang()],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["lib.opt.o"]
    dump = subprocess.run(
        [tool("llvm-dwarfdump"), "--debug-info", "out/lib.opt.o"],
        cwd=tmp_path, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert 'DW_AT_dwo_name\t("out/lib.opt.o")' in dump  # the final name, not a temporary
    sections = subprocess.run(
        [tool("llvm-readobj"), "--sections", "out/lib.opt.o"],
        cwd=tmp_path, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert "Name: .debug_info.dwo" in sections


@pytest.mark.parametrize(
    ("extra", "problem"),
    [(["--split-dwarf=split"], "--split-dwarf=split and --dwo go together"),
     (["--split-dwarf=single", "--dwo", "x.dwo"], "--split-dwarf=split and --dwo go together"),
     (["--split-dwarf=both"], "--split-dwarf=both: expected one of single, split")],
)  # fmt: skip
def test_split_dwarf_modes_that_do_not_fit_are_bad_input(
    small_program: Path, tmp_path: Path, extra: list[str], problem: str
) -> None:
    result = run_opt(small_program, "lib.o", tmp_path / "lib.opt.o", *extra)
    assert result.returncode == 2
    assert problem in result.stderr
    assert not (tmp_path / "lib.opt.o").exists()


def test_split_dwarf_in_the_link_flags_needs_dwo(small_program: Path, tmp_path: Path) -> None:
    args = tmp_path / "link.args"
    args.write_text("-flto=thin\n-gsplit-dwarf\n-g\n")
    result = run_opt(small_program, "lib.o", tmp_path / "lib.opt.o", "--args", str(args))
    assert result.returncode == 2
    assert "the link asks for split DWARF" in result.stderr


def test_print_command_runs_nothing_and_is_the_exact_command(
    small_program: Path, tmp_path: Path
) -> None:
    out = tmp_path / "lib.opt.o"
    printed = run_opt(small_program, "lib.o", out, "--print-command")
    assert printed.returncode == 0, printed.stderr
    assert not out.exists()
    command = shlex.split(printed.stdout)
    assert command[:6] == [
        tool_clang(),
        "-c",
        "-x",
        "ir",
        "lib.o",
        "-fthinlto-index=lib.o.thinlto.bc",
    ]
    assert command[-2:] == ["-o", str(out)]
    subprocess.run(command, cwd=small_program, check=True)
    by_hand = out.read_bytes()
    out.unlink()
    assert run_opt(small_program, "lib.o", out).returncode == 0
    assert out.read_bytes() == by_hand


def test_an_index_from_another_build_of_the_module_is_refused(tmp_path: Path, llvm: Llvm) -> None:
    """The module was compiled again after the index step: clang alone compiles the new
    code with the old imports and exits 0; the index's module hash says it is stale."""
    for name, text in SMALL_PROGRAM.items():
        (tmp_path / name).write_text(text)
        subprocess.run([llvm.clang, "-O2", "-flto=thin", "-c", name], cwd=tmp_path, check=True)
    objects = ["main.o", "twice.o", "add.o", "shout.o"]
    subprocess.run([llvm.clang, "-flto=thin", "-fuse-ld=lld", *objects, "-o", "prog",
                    "-Wl,--thinlto-index-only"], cwd=tmp_path, check=True)  # fmt: skip
    fresh = run_opt(tmp_path, "twice.o", tmp_path / "fresh.o")
    assert fresh.returncode == 0, fresh.stderr
    changed = "int add(int, int);\nint twice(int x) { return add(x, 3); }\n"
    (tmp_path / "twice.c").write_text(changed)
    subprocess.run([llvm.clang, "-O2", "-flto=thin", "-c", "twice.c"], cwd=tmp_path, check=True)
    alone = clang_alone(tmp_path, "twice.o", "twice.o.thinlto.bc", tmp_path / "alone.o")
    assert alone.returncode == 0  # what clang does with a stale index
    result = run_opt(tmp_path, "twice.o", tmp_path / "stale.o")
    assert (result.returncode, result.stderr) == (2, (
        "dist-lto opt: error: twice.o.thinlto.bc: made for another build of 'twice.o' (the"
        " module's hash differs from the one the index step recorded): the index is stale;"
        " run the index step again\n"))  # fmt: skip
    assert not (tmp_path / "stale.o").exists()


def test_an_index_made_before_an_imported_module_changed_is_refused(
    tmp_path: Path, llvm: Llvm
) -> None:
    """`twice.o` imports `add` from `add.o`; `add.o` compiled again after the index step
    would give `twice.o` old decisions about new code, and clang alone exits 0."""
    for name, text in SMALL_PROGRAM.items():
        (tmp_path / name).write_text(text)
        subprocess.run([llvm.clang, "-O2", "-flto=thin", "-c", name], cwd=tmp_path, check=True)
    objects = ["main.o", "twice.o", "add.o", "shout.o"]
    subprocess.run([llvm.clang, "-flto=thin", "-fuse-ld=lld", *objects, "-o", "prog",
                    "-Wl,--thinlto-index-only", "-Wl,--thinlto-emit-imports-files"],
                   cwd=tmp_path, check=True)  # fmt: skip
    assert (tmp_path / "twice.o.imports").read_text() == "add.o\n"
    assert run_opt(tmp_path, "twice.o", tmp_path / "fresh.o").returncode == 0
    (tmp_path / "add.c").write_text("int add(int a, int b) { return a - b; }\n")
    subprocess.run([llvm.clang, "-O2", "-flto=thin", "-c", "add.c"], cwd=tmp_path, check=True)
    alone = clang_alone(tmp_path, "twice.o", "twice.o.thinlto.bc", tmp_path / "alone.o")
    assert alone.returncode == 0  # what clang does with a stale index
    result = run_opt(tmp_path, "twice.o", tmp_path / "stale.o")
    assert (result.returncode, result.stderr) == (2, (
        "dist-lto opt: error: twice.o.thinlto.bc: made for another build of 'add.o', which"
        " 'twice.o' imports from (the module's hash differs from the one the index step"
        " recorded): the index is stale; run the index step again\n"))  # fmt: skip
    assert not (tmp_path / "stale.o").exists()


def small_program_indexed(root: Path, llvm: Llvm) -> None:
    """SMALL_PROGRAM compiled to bitcode in `root`, and its index step run."""
    for name, text in SMALL_PROGRAM.items():
        (root / name).write_text(text)
        subprocess.run([llvm.clang, "-O2", "-flto=thin", "-c", name], cwd=root, check=True)
    subprocess.run([llvm.clang, "-flto=thin", "-fuse-ld=lld", "main.o", "twice.o", "add.o",
                    "shout.o", "-o", "prog", "-Wl,--thinlto-index-only"],
                   cwd=root, check=True)  # fmt: skip


def test_a_verified_module_is_read_once_and_again_once_it_is_compiled_again(
    tmp_path: Path, llvm: Llvm, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dist_lto import backend

    small_program_indexed(tmp_path, llvm)
    monkeypatch.chdir(tmp_path)
    reads: list[str] = []
    read_module = backend._read_module
    monkeypatch.setattr(backend, "_read_module", lambda p: reads.append(p) or read_module(p))
    verified = backend.VerifiedModules(files=True)
    backend.check_primary("twice.o", "twice.o.thinlto.bc", verified=verified)
    assert sorted(reads) == ["add.o", "twice.o"]
    reads.clear()
    backend.check_primary("twice.o", "twice.o.thinlto.bc", verified=verified)
    assert reads == []
    (tmp_path / "add.c").write_text("int add(int a, int b) { return a - b; }\n")
    subprocess.run([llvm.clang, "-O2", "-flto=thin", "-c", "add.c"], cwd=tmp_path, check=True)
    with pytest.raises(backend.BadInput, match=re.escape("made for another build of 'add.o'")):
        backend.check_primary("twice.o", "twice.o.thinlto.bc", verified=verified)


def test_the_opt_worker_refuses_a_stale_index_after_serving_its_modules(
    tmp_path: Path, llvm: Llvm
) -> None:
    """A module the worker has verified for one request is compiled again before the
    next: that request's index, made before, is refused as the command refuses it."""
    from dist_lto.worker.client import WorkerClient

    small_program_indexed(tmp_path, llvm)
    client = WorkerClient(str(tmp_path / "w.sock"), str(tmp_path))
    try:

        def opt(out: str) -> tuple[int, str]:
            reply = client.execute(["--input", "twice.o", "--index", "twice.o.thinlto.bc",
                                    "--out", out, "--", llvm.clang])  # fmt: skip
            return reply.exit_code, reply.stderr

        assert opt("fresh.o") == (0, "")
        (tmp_path / "add.c").write_text("int add(int a, int b) { return a - b; }\n")
        subprocess.run([llvm.clang, "-O2", "-flto=thin", "-c", "add.c"], cwd=tmp_path,
                       check=True)  # fmt: skip
        command = run_opt(tmp_path, "twice.o", tmp_path / "stale.o")
        assert command.returncode == 2
        assert opt("stale.o") == (2, command.stderr)
    finally:
        client.close()
    assert not (tmp_path / "stale.o").exists()


def test_a_crashing_compiler_leaves_no_reproducer_in_the_temporary_directory(
    tmp_path: Path, llvm: Llvm
) -> None:
    """The real clang crashes (`#pragma clang __debug crash`, through a wrapper standing
    in for the backend) and writes its reproducer files under TMPDIR."""
    small_program_indexed(tmp_path, llvm)
    (tmp_path / "crash.c").write_text("#pragma clang __debug crash\nint x;\n")
    wrapper = tmp_path / "crashing-clang"
    wrapper.write_text(f'#!/bin/sh\nwhile [ "$1" != -o ]; do shift; done\n'
                       f'exec {llvm.clang} -c {tmp_path / "crash.c"} "$@"\n')  # fmt: skip
    wrapper.chmod(0o755)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    result = subprocess.run(
        [*OPT, "--input", "twice.o", "--index", "twice.o.thinlto.bc", "--out", "twice.opt.o",
         "--", str(wrapper)],
        cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "TMPDIR": str(temporary)},
    )  # fmt: skip
    assert result.returncode != 0
    assert "diagnostic msg: " in result.stderr
    assert list(temporary.iterdir()) == []
    assert not (tmp_path / "twice.opt.o").exists()


# ---------------------------------------------------------------------------------
# The module's own target triple


def test_a_module_for_another_triple_is_compiled_for_its_own_without_clangs_warning(
    llvm: Llvm, tmp_path: Path
) -> None:
    from dist_lto.llvm.bitcode import module_triple

    (tmp_path / "main.c").write_text("int other(int);\nint main(int c, char **v) { (void)v;"
                                     " return other(c) - 4; }\n")  # fmt: skip
    (tmp_path / "other.c").write_text("int other(int x) { return x * 3 + 1; }\n")
    for name, target in (("main", []), ("other", ["--target=x86_64-unknown-linux-gnu"])):
        subprocess.run([llvm.clang, "-O2", "-flto=thin", *target, "-c", f"{name}.c"],
                       cwd=tmp_path, check=True)  # fmt: skip
    assert module_triple((tmp_path / "other.o").read_bytes()) == "x86_64-unknown-linux-gnu"
    default = subprocess.run([llvm.clang, "-print-target-triple"], capture_output=True,
                             text=True, check=True).stdout.strip()  # fmt: skip
    assert (
        module_triple((tmp_path / "main.o").read_bytes()) == default != "x86_64-unknown-linux-gnu"
    )
    with pytest.raises(ValueError):
        module_triple(b"\x7fELF" + bytes(60))
    subprocess.run([llvm.clang, "-flto=thin", "-fuse-ld=lld", "-O2", "main.o", "other.o", "-o",
                    "prog", "-Wl,--thinlto-index-only"], cwd=tmp_path, check=True)  # fmt: skip
    bare = clang_alone(tmp_path, "other.o", "other.o.thinlto.bc", tmp_path / "bare.o")
    assert bare.returncode == 0 and "overriding the module target triple" in bare.stderr
    for module in ("main.o", "other.o"):
        result = run_opt(tmp_path, module, tmp_path / f"{module}.opt.o")
        assert result.returncode == 0, result.stderr
        # (main.o, importing from other.o, is told the two triples differ: as in LLD.)
        assert "overriding the module target triple" not in result.stderr, module
    assert run_opt(tmp_path, "other.o", tmp_path / "other.o.opt.o").stderr == ""
    printed = run_opt(tmp_path, "other.o", tmp_path / "x.o", "--print-command").stdout.split()
    assert "--target=x86_64-unknown-linux-gnu" in printed
    subprocess.run([llvm.clang, "-fuse-ld=lld", "main.o.opt.o", "other.o.opt.o", "-o", "dist"],
                   cwd=tmp_path, check=True)  # fmt: skip
    assert subprocess.run([str(tmp_path / "dist")]).returncode == 0  # other(1) - 4 == 0
