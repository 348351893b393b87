"""Buck2's upstream (bundled) prelude running distributed ThinLTO with our tools.

`examples/upstream` is a Buck2 project on the bundled prelude whose toolchain names our
tools in upstream's `DistLtoToolsInfo` (docs/upstream-buck2.md). Real Buck2, real
clang/LLD 22: every program is built three ways, with `enable_distributed_thinlto =
True` (upstream's Starlark, our tools), with `dist_lto_cxx_binary` (our phases over the
same upstream libraries, `NAME-fine`) and as an in-process ThinLTO twin; all three are
run, and their output is compared and pinned.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from support import buildbarn
from support.real_buck2 import UPSTREAM_EXAMPLE as PROJECT
from support.real_buck2 import Buck2, Ran
from support.real_buck2 import upstream_scratch_project as scratch_copy

pytestmark = pytest.mark.slow  # drives real Buck2 or whole real pipelines

PROGRAMS = {
    "//c:wordstats": (
        ["one two  three"],
        "words 3\nchecksum 14823564760136413964\nvolume 11\nplugin zip\n",
    ),
    "//cpp:shapes_report": (
        ["2", "x", "-1"],
        "shapes 2 2\ncircle 2 12.566\nsquare 2 4.000\nerror: stod\n"
        "error: not a size: -1\nwords 3\n",
    ),
    "//rust:linestats_report": (["x\nyy\nx\nzzz z\n"], "lines 3 longest 5\nwords 5\n"),
}
"""Program -> (arguments, expected output): the distributed build, its in-process twin
(`NAME-inprocess`) and its build with our own phases (`NAME-fine`, dist_lto_cxx_binary)
must all print exactly this."""

VARIANTS = ("", "-inprocess", "-fine")
"""Each program's targets: upstream's distributed ThinLTO, in-process, our phases."""


@pytest.fixture(scope="module")
def buck2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Buck2]:
    session = Buck2(project=scratch_copy(tmp_path_factory.mktemp("upstream") / "project"))
    try:
        yield session
    finally:
        session.kill()


@pytest.fixture(scope="module")
def built(buck2: Buck2) -> tuple[dict[str, Path], list[Ran]]:
    """Every program and twin, built once; what that build ran."""
    targets = [p + v for p in PROGRAMS for v in VARIANTS]
    outputs = buck2.outputs(*targets)
    return {label.removeprefix("root"): path for label, path in outputs.items()}, buck2.what_ran()


def run(path: Path, args: list[str]) -> str:
    proc = subprocess.run([str(path), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_distributed_program_prints_what_its_in_process_twin_prints(
    built: tuple[dict[str, Path], list[Ran]], program: str
) -> None:
    outputs, _ = built
    args, expected = PROGRAMS[program]
    for variant in VARIANTS:
        assert run(outputs[program + variant], args) == expected, variant


def _ran(ran: list[Ran], target: str, category: str) -> set[str]:
    """What ran for `target` itself (not its `-fine` or `-inprocess` twin)."""
    return {r.identifier for r in ran if r.target == "root" + target and r.category == category}


def test_loaded_modules_get_opt_actions_and_never_loaded_members_do_not(
    built: tuple[dict[str, Path], list[Ran]],
) -> None:
    _, ran = built
    archive_opt = "thin_lto_opt_archive_executable"
    assert _ran(ran, "//c:wordstats", archive_opt) == {
        "m/checksum.c.o", "m/plugins.c.o", "m/words.c.o"
    }  # fmt: skip
    # Objects of a library without an archive (between --start-lib and --end-lib): shout.c
    # is loaded and optimised; quiet.c is never loaded and echo.c is native: no action.
    assert _ran(ran, "//c:wordstats", "thin_lto_opt_object_executable") == {
        "unknown-2/main.c.o", "libvoice.a/shout.c.o"
    }  # fmt: skip
    # unused.c is never loaded and mix.c is native: copied, not optimised.
    assert _ran(ran, "//c:wordstats", "thin_lto_opt_copy_executable") == {
        "m/mix.c.o", "m/unused.c.o"
    }  # fmt: skip
    # The C++ program loads only words.c from the C library; its thin archive's members
    # are all optimised.
    assert _ran(ran, "//cpp:shapes_report", archive_opt) == {
        "m/circle.cpp.o", "m/registry.cpp.o", "m/square.cpp.o", "m/words.c.o"
    }  # fmt: skip
    # The Rust staticlib: the crate's own members are bitcode and optimised; the standard
    # library's are native and copied.
    rust_opt = _ran(ran, "//rust:linestats_report", archive_opt) - {"m/words.c.o"}
    assert rust_opt and all(m.startswith("m/linestats-") for m in rust_opt), rust_opt
    rust_copied = _ran(ran, "//rust:linestats_report", "thin_lto_opt_copy_executable")
    assert [m for m in rust_copied if m.startswith("m/std-")]
    assert not [m for m in rust_copied if m.startswith("m/linestats-")]
    for program in PROGRAMS:
        assert _ran(ran, program, "thin_lto_index_executable") == {""}
        assert _ran(ran, program, "thin_lto_link_executable") == {""}


def _target_dir(built: tuple[dict[str, Path], list[Ran]], program: str) -> Path:
    outputs, _ = built
    return outputs[program].parent


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_index_directory_holds_only_its_declared_output(
    built: tuple[dict[str, Path], list[Ran]], program: str
) -> None:
    index_dirs = list(_target_dir(built, program).parent.glob("*/thin_lto_index_executable"))
    index_dirs += list(_target_dir(built, program).glob("**/thin_lto_index_executable"))
    assert index_dirs
    for directory in index_dirs:
        assert sorted(p.name for p in directory.rglob("*")) == ["index"]


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_final_link_lists_optimised_objects_and_no_crt_objects(
    built: tuple[dict[str, Path], list[Ran]], program: str
) -> None:
    directory = _target_dir(built, program)
    name = program.rsplit(":", 1)[1]
    lines = (directory / f"{name}.final_link_index").read_text().splitlines()
    assert not [line for line in lines if os.path.basename(line).startswith(("crt", "Scrt"))]
    assert not [line for line in lines if "unused.c.o" in line or "quiet.c.o" in line]
    assert [line for line in lines if line.endswith("main.c.o.opt.o") or
            line.endswith("main.cpp.o.opt.o")]  # fmt: skip
    assert all("/objects/" not in line for line in lines)  # members come from opt_objects


def test_objects_of_a_library_without_an_archive_stay_lazy_only_when_native(
    built: tuple[dict[str, Path], list[Ran]],
) -> None:
    """shout.c's constructor survives only if its optimised object is linked plainly: its
    one reference from main.c is inlined away (the program prints `volume 11`, not 6)."""
    lines = (_target_dir(built, "//c:wordstats") / "wordstats.final_link_index").read_text()
    lazy: dict[str, bool] = {}
    inside = False
    for line in lines.splitlines():
        if line in ("-Wl,--start-lib", "-Wl,--end-lib"):
            inside = line == "-Wl,--start-lib"
        else:
            lazy[os.path.basename(line)] = inside
    assert lazy["shout.c.o.opt.o"] is False
    assert lazy["echo.c.o"] is True
    assert not [name for name in lazy if name.startswith(("shout.c.o", "echo.c.o")) and
                name not in ("shout.c.o.opt.o", "echo.c.o")]  # fmt: skip


@pytest.mark.parametrize(
    ("mode", "variant", "named"),
    [("split", "", ("main.c.o.opt.dwo", "/words.c.dwo")),
     ("single", "", ("main.c.o.opt.o", "/words.c.o")),
     ("split", "-fine", ("/opt/main.c.o.dwo", "/words.c.o.dwo", "/shout.c.o.dwo")),
     ("single", "-fine", ("/opt/main.c.o", "/words.c.o", "/shout.c.o"))],
)  # fmt: skip
def test_split_dwarf_puts_each_backends_debug_information_where_its_skeleton_says(
    buck2: Buck2, mode: str, variant: str, named: tuple[str, ...]
) -> None:
    """With the toolchain's `split_debug_mode`, each opt action gets `--split-dwarf=split
    --dwo D` (a .dwo file of its own) or `--split-dwarf=single` (kept in the optimised
    object), on upstream's route and through our phases: every skeleton unit of the
    program names a file that holds its module's debug information."""
    split = Buck2(
        project=buck2.project,
        config={**buck2.config, "example.split_debug_mode": mode},
        isolation_dir=buck2.isolation_dir,
        binary=buck2.binary,
    )
    target = "//c:wordstats" + variant
    program = split.outputs(target)["root" + target]
    args, expected = PROGRAMS["//c:wordstats"]
    assert run(program, args) == expected
    dump = subprocess.run(
        ["/usr/lib/llvm-22/bin/llvm-dwarfdump", "--debug-info", str(program)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    names = re.findall(r'DW_AT_(?:GNU_)?dwo_name\s+\("([^"]+)"\)', dump)
    for suffix in named:
        assert any(n.endswith(suffix) for n in names), (suffix, names)
    split("build", "--console=simple", "--materializations=all", target)
    for name in names:
        dwo = buck2.project / name
        assert dwo.is_file(), name
        sections = subprocess.run(
            ["/usr/lib/llvm-22/bin/llvm-readobj", "--sections", str(dwo)],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert ".debug_info.dwo" in sections, name


def test_sanitized_programs_run_alike_with_instrumented_backends(buck2: Buck2) -> None:
    """With `-fsanitize=address,undefined` in the toolchain's compile and link flags,
    every program still prints what it prints without, and the distributed C program's
    optimised objects carry ASan's checks (the link adds the runtime)."""
    sanitized = Buck2(
        project=buck2.project,
        config={**buck2.config, "example.sanitize": "address,undefined"},
        isolation_dir=buck2.isolation_dir,
        binary=buck2.binary,
    )
    c_and_cpp = ["//c:wordstats", "//cpp:shapes_report"]
    outputs = sanitized.outputs(*c_and_cpp, *(p + "-fine" for p in c_and_cpp))
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0", "UBSAN_OPTIONS": "halt_on_error=1"}
    for label, path in outputs.items():
        args, expected = PROGRAMS[label.removeprefix("root").removesuffix("-fine")]
        proc = subprocess.run([str(path), *args], capture_output=True, text=True, env=env)
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, expected, ""), label
    # This configuration's own outputs (the program's directory is per configuration):
    # the optimised object is ELF, the prepared member bitcode.
    found = outputs["root//c:wordstats"].parent.glob("**/m/words.c.o")
    words = [p for p in found if p.read_bytes()[:4] == b"\x7fELF"]
    assert words
    undefined = subprocess.run(
        ["/usr/lib/llvm-22/bin/llvm-nm", "-u", str(words[0])],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "__asan_" in undefined
    # Through our phases: the archive member's optimised object.
    fine = list(outputs["root//c:wordstats-fine"].parent.glob("**/opt_members/**/words.c.o"))
    assert fine
    undefined = subprocess.run(
        ["/usr/lib/llvm-22/bin/llvm-nm", "-u", *(str(p) for p in fine)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "__asan_" in undefined


FAKE_CLANG = """#!/bin/sh
# A clang++ whose ThinLTO backend misbehaves for one module; everything else is clang.
case "$*" in
  *-fthinlto-index=*words.c.o.thinlto.bc*)
    while [ $# -gt 0 ]; do
      if [ "$1" = "-o" ]; then : > "$2"; fi
      shift
    done
    exit 0 ;;
  *-fthinlto-index=*checksum.c.o.thinlto.bc*)
    echo "fatal error: backend crashed" >&2
    exit 3 ;;
esac
exec {real} "$@"
"""


def test_failing_backends_fail_their_buck2_action_naming_the_module(
    buck2: Buck2, tmp_path: Path
) -> None:
    llvm = "/usr/lib/llvm-22/bin"
    bin_dir = tmp_path / "llvm-bin"
    bin_dir.mkdir()
    for tool in ("clang", "llvm-ar", "llvm-nm", "llvm-objcopy", "llvm-strip"):
        (bin_dir / tool).symlink_to(f"{llvm}/{tool}")
    fake = bin_dir / "clang++"
    fake.write_text(FAKE_CLANG.format(real=f"{llvm}/clang++"))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    failing = Buck2(
        project=buck2.project,
        config={**buck2.config, "llvm.bin": str(bin_dir)},
        isolation_dir=buck2.isolation_dir,
        binary=buck2.binary,
    )
    proc = failing(
        "build", "--console=simple", "--keep-going", "//c:wordstats", "//c:wordstats-fine",
        check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    err = proc.stderr
    assert "thin_lto_opt_archive_executable m/words.c.o" in err
    assert "thin_lto_opt_archive_executable m/checksum.c.o" in err
    # Through our phases (dist_lto_cxx_binary), the same two actions fail.
    assert "thin_lto_opt wordstats-fine/archive 0:words.c.o@3" in err
    assert "thin_lto_opt wordstats-fine/archive 0:checksum.c.o@0" in err
    assert "words.c.o" in err and "empty" in err
    assert "backend crashed" in err
    # The good modules still succeeded.
    assert "thin_lto_opt_archive_executable m/plugins.c.o" not in err
    assert "wordstats-fine/archive 0:plugins.c.o" not in err


# ---------------------------------------------------------------------------------
# dist_lto_cxx_binary (`NAME-fine`): our own phases over the same upstream libraries.


def _fine_modules(ran: list[Ran], target: str) -> set[str]:
    """The modules whose opt actions ran for a `-fine` target, by base name (an
    identifier is `LINK/N:PATH` or `LINK/archive N:PATH@POSITION`)."""
    found = set()
    for r in ran:
        if r.target == "root" + target and r.category == "thin_lto_opt":
            path = r.identifier.split(":", 1)[1].rsplit("@", 1)[0]
            found.add(os.path.basename(path))
    return found


def test_our_phases_optimise_exactly_the_loaded_modules_in_the_worker_with_no_copy_actions(
    built: tuple[dict[str, Path], list[Ran]],
) -> None:
    """Never-loaded members (unused.c, quiet.c) and native ones (mix.c, echo.c) get no
    action at all; the Rust staticlib's native members are linked from the prepared
    directory, not bound one action each."""
    _, ran = built
    assert _fine_modules(ran, "//c:wordstats-fine") == {
        "main.c.o", "checksum.c.o", "plugins.c.o", "words.c.o", "shout.c.o"
    }  # fmt: skip
    assert _fine_modules(ran, "//cpp:shapes_report-fine") == {
        "main.cpp.o", "circle.cpp.o", "registry.cpp.o", "square.cpp.o", "words.c.o"
    }  # fmt: skip
    rust = _fine_modules(ran, "//rust:linestats_report-fine") - {"main.c.o", "words.c.o"}
    assert rust and all(m.startswith("linestats-") for m in rust), rust
    for program in PROGRAMS:
        categories = Counter(r.category for r in ran if r.target == f"root{program}-fine")
        assert categories["thin_lto_plan"] == categories["thin_lto_link"] == 1
        assert set(categories) <= {"archive", "thin_lto_prepare", "thin_lto_plan",
                                   "thin_lto_opt_ready", "thin_lto_opt",
                                   "thin_lto_link"}, categories  # fmt: skip
    rust_actions = [r for r in ran if r.target == "root//rust:linestats_report-fine"]
    # Besides the opt actions: archive, prepare, the --ready request, plan, link.
    assert len(rust_actions) == len(_fine_modules(ran, "//rust:linestats_report-fine")) + 5
    # Run locally, our phases' opt actions go to the persistent opt worker (upstream's
    # cannot: docs/upstream-buck2.md), each link's largest module's too (docs/buck2.md).
    fine_opt = [r for r in ran if r.target.endswith("-fine") and r.category == "thin_lto_opt"]
    assert {r.executor for r in fine_opt} == {"Worker"}


def test_dist_lto_cxx_binary_refuses_a_library_attribute_naming_it(buck2: Buck2) -> None:
    package = buck2.project / "refused"
    package.mkdir()
    try:
        (package / "main.c").write_text("int main(void) { return 0; }\n")
        (package / "BUCK").write_text(
            'load("@dist_lto//upstream:cxx_binary.bzl", "dist_lto_cxx_binary")\n'
            'dist_lto_cxx_binary(name = "p", srcs = ["main.c"], use_archive = False)\n'
        )
        proc = buck2.build("//refused:p", check=False)
    finally:
        shutil.rmtree(package)
    assert proc.returncode != 0
    assert (
        "dist_lto_cxx_binary `p`: `use_archive` does not apply to a program's own objects"
        in proc.stderr
    )


def _lld_importers(objects: list[Path], plugin: Path, module: str, scratch: Path) -> set[str]:
    """The modules that import from `module` (a base name), as LLD's index step says:
    the program's objects linked as the build links them (libraries lazily), with
    `--thinlto-emit-imports-files`, in a directory of copies."""
    scratch.mkdir()
    groups: dict[str, list[str]] = {}
    for obj in objects:
        shutil.copy(obj, scratch / obj.name)
        groups.setdefault(obj.parent.parent.name, []).append(obj.name)
    line = groups.pop("__wordstats-fine-objects__")
    for members in groups.values():
        line += ["-Wl,--start-lib", *sorted(members), "-Wl,--end-lib"]
    subprocess.run(
        ["/usr/lib/llvm-22/bin/clang", "-fuse-ld=lld", "-O2", "-flto=thin", *line,
         "-Wl,--whole-archive", str(plugin), "-Wl,--no-whole-archive",
         "-Wl,--thinlto-index-only", "-Wl,--thinlto-emit-imports-files", "-o", "a.out"],
        cwd=scratch, check=True, capture_output=True,
    )  # fmt: skip
    return {
        f.name.removesuffix(".imports")
        for f in scratch.glob("*.imports")
        if module in f.read_text().split()
    }


EDIT = "\nint words_edited(int x) { return 3 * x + 1; }\n"
"""Appended to one library source: a function nobody calls."""


def test_one_edit_reruns_the_module_and_its_importers_where_upstream_reruns_the_archive(
    buck2: Buck2, tmp_path: Path
) -> None:
    """After one edit to c/words.c, our phases rerun the opt actions of words.c and of
    the modules LLD's .imports files say import from it; upstream's route reruns every
    optimised member of the archive (each takes the archive's whole directories)."""
    targets = ("//c:wordstats", "//c:wordstats-fine")
    outputs = buck2.outputs(*targets)
    source = buck2.project / "c" / "words.c"
    original = source.read_text()
    try:
        source.write_text(original + EDIT)
        buck2.build(*targets)
        ran = buck2.what_ran()
        configuration = outputs["root//c:wordstats-fine"].parents[2]
        objects = (
            [
                configuration / "c" / "__text__" / "__objects__" / f"{name}.c.o"
                for name in ("checksum", "mix", "plugins", "unused", "words")
            ]
            + [
                configuration / "c" / "__voice__" / "__objects__" / f"{name}.c.o"
                for name in ("echo", "quiet", "shout")
            ]
            + [configuration / "c" / "__wordstats-fine-objects__" / "__objects__" / "main.c.o"]
        )
        plugin = configuration / "plugin" / "__libzip_plugin__" / "out" / "libzip_plugin.a"
        importers = _lld_importers(objects, plugin, "words.c.o", tmp_path / "index")
    finally:
        source.write_text(original)
    assert importers, "nothing imports from words.c: the test would pin nothing"
    fine = _fine_modules(ran, "//c:wordstats-fine")
    assert fine == {"words.c.o"} | importers
    upstream = _ran(ran, "//c:wordstats", "thin_lto_opt_archive_executable")
    upstream |= _ran(ran, "//c:wordstats", "thin_lto_opt_object_executable")
    assert {"m/checksum.c.o", "m/plugins.c.o", "m/words.c.o"} <= upstream
    print(f"one edit to words.c: upstream reran {len(upstream)}, ours {len(fine)} opt actions")
    assert len(fine) < len(upstream)


# ---------------------------------------------------------------------------------
# Remote execution: the same build with Buck2's RE client on the loopback BuildBarn.


@pytest.fixture(scope="module")
def remote_buck2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Buck2]:
    """Buck2 pointed at a BuildBarn engine of its own. Buck2 reads the RE client's
    settings when its daemon starts, from the project's configuration files (not from
    `-c`), so they go to the scratch copy's `.buckconfig.local`."""
    try:
        engine = buildbarn.start(tmp_path_factory.mktemp("buildbarn-upstream"), workers=2)
    except buildbarn.EngineError as err:
        pytest.fail(f"the BuildBarn engine did not start (run `bash .ci/setup`): {err}")
    settings = (PROJECT / "remote.buckconfig").read_text()
    project = scratch_copy(
        tmp_path_factory.mktemp("upstream-remote") / "project",
        settings.replace("grpc://127.0.0.1:8980", engine.address),
    )
    session = Buck2(project=project)
    try:
        yield session
    finally:
        session.kill()
        engine.stop()


def test_opt_actions_run_on_the_remote_engine_and_the_programs_are_unchanged(
    remote_buck2: Buck2,
) -> None:
    targets = [p + v for p in PROGRAMS for v in VARIANTS]
    outputs = remote_buck2.outputs(*targets)
    for label, path in outputs.items():
        program = label.removeprefix("root").removesuffix("-inprocess").removesuffix("-fine")
        args, expected = PROGRAMS[program]
        assert run(path, args) == expected
    ran = remote_buck2.what_ran()
    wordstats = [r for r in ran if r.target == "root//c:wordstats"]
    where = {(r.category, r.identifier): r.executor for r in wordstats}
    opt = {k: v for k, v in where.items() if k[0].startswith("thin_lto_opt_")}
    assert set(opt) >= {
        ("thin_lto_opt_archive_executable", "m/words.c.o"),
        ("thin_lto_opt_object_executable", "unknown-2/main.c.o"),
    }
    assert set(opt.values()) == {"Re"}
    assert where[("thin_lto_prepare_executable", "libtext.a/libtext.a")] == "Re"
    # Upstream marks these two local_only.
    assert where[("thin_lto_index_executable", "")] == "Local"
    assert where[("thin_lto_link_executable", "")] == "Local"
    # The C++ library, thin locally, is a regular archive here (remote.buckconfig), and
    # its members are optimised remotely.
    shapes = [r for r in ran if r.target == "root//cpp:shapes_report"]
    shapes_opt = {
        r.identifier: r.executor for r in shapes if r.category == "thin_lto_opt_archive_executable"
    }
    assert {"m/circle.cpp.o", "m/registry.cpp.o", "m/square.cpp.o"} <= set(shapes_opt)
    assert set(shapes_opt.values()) == {"Re"}


def test_remote_prepare_of_a_thin_archive_fails_naming_the_missing_member(
    remote_buck2: Buck2,
) -> None:
    """With thin archives forced under remote execution, upstream gives the prepare
    action the archive without its members, so a remote worker has none of them
    (docs/upstream-buck2.md): one line naming one."""
    proc = remote_buck2(
        "build",
        "--console=simple",
        "-c",
        "dist_lto.remote_execution=false",
        "//cpp:shapes_report",
        check=False,
    )
    assert proc.returncode != 0
    assert "thin_lto_prepare_executable libshapes.a" in proc.stderr
    assert re.search(
        r"dist-lto upstream: error: \S*libshapes\.a: member '\S+\.cpp\.o'", proc.stderr
    )


def test_our_phases_plan_and_optimise_a_thin_archive_on_the_remote_engine(
    remote_buck2: Buck2,
) -> None:
    """Forced to thin archives under remote execution (where upstream's prepare action
    fails, above), dist_lto_cxx_binary prepares nothing (a thin archive's members are
    known) and its plan and opt actions run on the engine: each gets the members it
    reads as inputs."""
    proc = remote_buck2(
        "build",
        "--console=simple",
        "--show-full-json-output",
        "-c",
        "dist_lto.remote_execution=false",
        "//cpp:shapes_report-fine",
    )
    program = Path(orjson.loads(proc.stdout)["root//cpp:shapes_report-fine"])
    args, expected = PROGRAMS["//cpp:shapes_report"]
    assert run(program, args) == expected
    ran = [r for r in remote_buck2.what_ran() if r.target == "root//cpp:shapes_report-fine"]
    where = {(r.category, r.identifier): r.executor for r in ran}
    assert not [k for k in where if k[0] == "thin_lto_prepare"], where
    assert where[("thin_lto_plan", "shapes_report-fine")] == "Re", where
    opt = {
        os.path.basename(k[1].split(":", 1)[1]): v
        for k, v in where.items()
        if k[0] == "thin_lto_opt"
    }
    assert {"circle.cpp.o@0", "registry.cpp.o@1", "square.cpp.o@2"} <= set(opt), opt
    assert set(opt.values()) == {"Re"}, opt
