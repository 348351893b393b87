"""`dist-lto distribute` as LLD 22's DTLTO distributor on real Lua and zstd links.

Every link here is a real `clang -flto=thin -fuse-ld=lld -fthinlto-distributor=...` run;
the reference is the same link with a serial distributor in the style of LLVM's
example (`serial_distributor`), and the binaries must be byte-identical to it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from dist_lto.distribute.result_cache import ResultCache
from dist_lto.formats.jobfile import read_job_file
from support import workloads
from support.links import DtltoLink
from support.slow import slow_fixture
from support.tools import Llvm

LUA_SOURCE_CHANGE = ("invalid conversion '%s' to 'format'", "no such conversion '%s' in 'format'")


@pytest.fixture(scope="module")
def dist_lto(dist_lto_cmd: list[str]) -> str:
    """The installed console script: what `$(command -v dist-lto)` names."""
    (exe,) = dist_lto_cmd
    return exe


def distributor_flags(dist_lto: str, *args: str) -> list[str]:
    return [f"-fthinlto-distributor={dist_lto}", "-Xthinlto-distributor=distribute",
            *(f"-Xthinlto-distributor={arg}" for arg in args)]  # fmt: skip


def link(
    command: list[str], root: Path, out: str, *flags: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*command, "-o", out, *flags], cwd=root, capture_output=True,
                          text=True, env=env)  # fmt: skip


@dataclass(frozen=True)
class Program:
    """A workload ready to link in `root`: `command` is the clang link line without `-o`;
    `serial` is the binary the serial reference distributor produced."""

    build: workloads.Build
    command: list[str]
    serial: Path

    @property
    def root(self) -> Path:
        return self.build.root


def _program(build: workloads.Build, llvm: Llvm, serial: Path, ar: list[str], lib: str) -> Program:
    subprocess.run([llvm.ar, *ar, lib, *build.library, *build.native], cwd=build.root, check=True)
    command = [llvm.clang, "-flto=thin", "-fuse-ld=lld", "-O2", *build.main, lib,
               *build.link_flags]  # fmt: skip
    done = link(command, build.root, "serial", f"-fthinlto-distributor={serial}")
    assert done.returncode == 0, done.stderr
    workloads.check_binary(build.name, build.root / "serial")
    return Program(build, command, build.root / "serial")


@pytest.fixture(scope="module")
@slow_fixture
def lua(tmp_path_factory: pytest.TempPathFactory, llvm: Llvm, serial_distributor: Path) -> Program:
    """Lua with its library in a thin archive (DTLTO reads thin members where they are)."""
    build = workloads.build("lua", tmp_path_factory.mktemp("lua-dtlto"))
    return _program(build, llvm, serial_distributor, ["rcs", "--thin"], "liblua.a")


@pytest.fixture(scope="module")
@slow_fixture
def zstd(tmp_path_factory: pytest.TempPathFactory, llvm: Llvm, serial_distributor: Path) -> Program:
    """zstd with its library, bitcode and the native assembly object, in a regular archive
    (DTLTO extracts bitcode members to files named after LLD's process id)."""
    build = workloads.build("zstd", tmp_path_factory.mktemp("zstd-dtlto"))
    return _program(build, llvm, serial_distributor, ["rcs"], "libzstd.a")


def logging_compiler(directory: Path, real: str) -> tuple[Path, Path]:
    """A remote compiler that logs the module of every backend it runs, then is clang."""
    log = directory / "compiles.log"
    script = directory / "logging-clang"
    script.write_text(
        "#!/bin/sh\n"
        'previous=""\n'
        'for arg in "$@"; do\n'
        '  case "$arg" in -fthinlto-index=*) printf "%s\\n" "$previous" >> '
        + f"'{log}'"
        + ";; esac\n"
        '  previous="$arg"\n'
        "done\n"
        f'exec {real} "$@"\n'
    )
    script.chmod(0o755)
    return script, log


def compiled_modules(log: Path) -> list[str]:
    """The module of every backend the logging compiler ran, in order."""
    return log.read_text().splitlines() if log.exists() else []


def test_zstd_links_byte_identical_to_the_serial_distributor_then_from_the_cache(
    zstd: Program, dist_lto: str, tmp_path: Path
) -> None:
    """Its library is a regular archive: LLD extracts each bitcode member to a file named
    after its process id, and writes indexes whose values it numbers differently in every
    link; the second link must still find every job in the cache."""
    compiler, log = logging_compiler(tmp_path, zstd.command[0])
    cache = f"--cache-dir={tmp_path / 'cache'}"
    flags = [f"-Wl,--thinlto-remote-compiler={compiler}",
             *distributor_flags(dist_lto, "--jobs=4", cache)]  # fmt: skip
    done = link(zstd.command, zstd.root, "ours", *flags)
    assert done.returncode == 0, done.stderr
    # off a terminal, one summary line
    assert done.stderr.startswith("dist-lto distribute: ours: ")
    assert done.stderr.count("\n") == 1
    workloads.check_binary("zstd", zstd.root / "ours")
    assert (zstd.root / "ours").read_bytes() == zstd.serial.read_bytes()
    compiled = compiled_modules(log)
    assert any(module.startswith("libzstd.a(zstd_compress.o at ") for module in compiled)
    done = link(zstd.command, zstd.root, "again", *flags)
    assert done.returncode == 0, done.stderr
    assert compiled_modules(log) == compiled  # no compiler ran
    assert (zstd.root / "again").read_bytes() == zstd.serial.read_bytes()


@dataclass(frozen=True)
class Raced:
    """Two Lua links run at once on one empty cache (the default one, under XDG_CACHE_HOME)."""

    results: list[subprocess.CompletedProcess[str]]
    env: dict[str, str]
    compiler: Path
    log: Path
    cache: Path


@pytest.fixture(scope="module")
def lua_raced(lua: Program, dist_lto: str, tmp_path_factory: pytest.TempPathFactory) -> Raced:
    tmp = tmp_path_factory.mktemp("race")
    compiler, log = logging_compiler(tmp, lua.command[0])
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp / "xdg")}
    flags = [f"-Wl,--thinlto-remote-compiler={compiler}", *distributor_flags(dist_lto, "--jobs=2")]
    racers = [subprocess.Popen([*lua.command, "-o", f"race{i}", *flags], cwd=lua.root, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for i in (1, 2)]  # fmt: skip
    results = []
    for racer in racers:
        stdout, stderr = racer.communicate(timeout=600)
        results.append(subprocess.CompletedProcess(racer.args, racer.returncode, stdout, stderr))
    return Raced(results, env, compiler, log, tmp / "xdg" / "dist-lto")


def test_two_lua_links_racing_on_one_cache_both_succeed_byte_identical(
    lua: Program, lua_raced: Raced
) -> None:
    for i, result in enumerate(lua_raced.results, 1):
        assert result.returncode == 0, result.stderr
        assert result.stderr.startswith(f"dist-lto distribute: race{i}: ")
        assert result.stderr.count("\n") == 1
        workloads.check_binary("lua", lua.root / f"race{i}")
        assert (lua.root / f"race{i}").read_bytes() == lua.serial.read_bytes()
    # LLD's --thinlto-remote-compiler= was the compiler of every job
    jobs = len(lua.build.objects)
    assert len(compiled_modules(lua_raced.log)) >= jobs
    entries = list((lua_raced.cache / "v2" / "entries").glob("*/*"))
    assert len(entries) == jobs
    assert not list((lua_raced.cache / "v2" / "tmp").iterdir())


def test_a_second_identical_link_runs_no_compiler(
    lua: Program, lua_raced: Raced, dist_lto: str
) -> None:
    before = len(compiled_modules(lua_raced.log))
    done = link(lua.command, lua.root, "warm",
                f"-Wl,--thinlto-remote-compiler={lua_raced.compiler}",
                *distributor_flags(dist_lto, "--verbose"), env=lua_raced.env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert compiled_modules(lua_raced.log)[before:] == []
    jobs = len(lua.build.objects)
    assert f"warm: {jobs} jobs, {jobs} cached, 0 failed, " in done.stderr
    assert sum(" cached " in line for line in done.stderr.splitlines()) == jobs
    assert (lua.root / "warm").read_bytes() == lua.serial.read_bytes()


def input_contents(root: Path, job_file: Path) -> dict[str, list[bytes]]:
    """Every job's input files' contents, by module (Lua's modules have no process id)."""
    return {job.module: [(root / path).read_bytes() for path in job.inputs]
            for job in read_job_file(str(job_file)).jobs}  # fmt: skip


def test_a_changed_source_recompiles_only_the_jobs_that_read_it(
    lua: Program, lua_raced: Raced, dist_lto: str, tmp_path: Path, llvm: Llvm
) -> None:
    """In a copy of the build elsewhere (keys do not depend on the directory). Only the
    jobs that read lstrlib.o run, although LLD rewrites other indexes too: it numbers the
    summary's values over the whole program, so a new string in lstrlib.c renumbers
    lmathlib's index without changing its meaning."""
    root = tmp_path / "lua"
    shutil.copytree(lua.root, root, symlinks=True)
    flags = [f"-Wl,--thinlto-remote-compiler={lua_raced.compiler}", "-Wl,--save-temps",
             *distributor_flags(dist_lto)]  # fmt: skip
    before = len(compiled_modules(lua_raced.log))
    done = link(lua.command, root, "same", *flags, env=lua_raced.env)
    assert done.returncode == 0, done.stderr
    assert compiled_modules(lua_raced.log)[before:] == []
    (job_file,) = root.glob("same.*.dist-file.json")
    old_inputs = input_contents(root, job_file)

    source = workloads.source_dir("lua") / "src"
    old, new = LUA_SOURCE_CHANGE
    changed = tmp_path / "lstrlib.c"
    changed.write_text((source / "lstrlib.c").read_text().replace(old, new))
    subprocess.run([llvm.clang, "-O2", "-flto=thin", "-c", str(changed), "-o", "obj/lstrlib.o",
                    "-DLUA_COMPAT_5_3", "-DLUA_USE_LINUX", f"-I{source}"],
                   cwd=root, check=True)  # fmt: skip
    (root / "liblua.a").unlink()
    subprocess.run([llvm.ar, "rcs", "--thin", "liblua.a", *lua.build.library], cwd=root, check=True)
    done = link(lua.command, root, "changed", *flags, env=lua_raced.env)
    assert done.returncode == 0, done.stderr
    (job_file,) = root.glob("changed.*.dist-file.json")
    new_inputs = input_contents(root, job_file)
    changed_bytes = {m for m in new_inputs if new_inputs[m] != old_inputs.get(m)}
    jobs = read_job_file(str(job_file)).jobs
    readers = sorted(job.module for job in jobs if "obj/lstrlib.o" in job.inputs)
    recompiled = sorted(compiled_modules(lua_raced.log)[before:])
    assert recompiled == readers
    assert "obj/lstrlib.o" in recompiled
    assert set(readers) <= changed_bytes  # the others' indexes were only renumbered, if at all
    workloads.check_binary("lua", root / "changed")
    run = subprocess.run([root / "changed", "-e", "string.format('%y', 1)"],
                         capture_output=True, text=True)  # fmt: skip
    assert "no such conversion '%y' in 'format'" in run.stderr


@pytest.mark.slow  # a load test: eight links at once
def test_eight_links_sharing_one_cache_with_a_pruner_running_all_work(
    tmp_path: Path, small_dtlto: DtltoLink, dist_lto: str
) -> None:
    """A load test: 8 links of the small program at once, twice (cold, then warm), all on
    one cache that a pruner keeps shrinking to about two entries meanwhile. Every link
    succeeds without a warning and every binary prints the right answer."""
    cache = tmp_path / "cache"
    roots = []
    for i in range(8):
        root = tmp_path / f"link{i}"
        root.mkdir()
        for name in ("main.o", "shout.o", "libm.a"):
            shutil.copy(small_dtlto.root / name, root / name)
        roots.append(root)
    biggest = max(p.stat().st_size for p in small_dtlto.root.glob("*.native.o"))
    stop = threading.Event()
    pruned = [0]
    problems: list[str] = []

    def pruner() -> None:
        store = ResultCache(str(cache), max_size=2 * biggest)
        try:
            while not stop.is_set():
                pruned[0] += store.prune()
                time.sleep(0.01)
        except Exception as err:  # a thread's exception must fail the test
            problems.append(f"pruner: {type(err).__name__}: {err}")

    flags = distributor_flags(dist_lto, f"--cache-dir={cache}", "--jobs=2", "--quiet")
    thread = threading.Thread(target=pruner)
    thread.start()
    try:
        for _round in ("cold", "warm"):
            procs = [subprocess.Popen([*small_dtlto.link, *flags], cwd=root, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                     for root in roots]  # fmt: skip
            for root, proc in zip(roots, procs, strict=True):
                _, stderr = proc.communicate(timeout=300)
                assert (proc.returncode, stderr) == (0, ""), root
                run = subprocess.run([root / "prog", "x"], capture_output=True, text=True)
                assert (run.returncode, run.stdout) == (0, "4\n"), root
                (root / "prog").unlink()
    finally:
        stop.set()
        thread.join()
    assert problems == []
    assert pruned[0] > 0
    assert sorted(p.name for p in roots[0].iterdir()) == ["libm.a", "main.o", "shout.o"]


def test_a_distribution_gives_its_compilers_a_private_tmpdir_and_leaves_the_callers_environment(
    tmp_path: Path, small_dtlto: DtltoLink, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compilers' TMPDIR is the distribution's own directory, passed to them, never
    set in this process: a library call must not change its caller's environment."""
    from dist_lto.distribute.reporting import Reporter
    from dist_lto.distribute.session import run_jobs
    from dist_lto.distribute.settings import Options, Settings

    root = small_dtlto.clone(tmp_path / "link")
    monkeypatch.chdir(root)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    opts = Options()
    opts.no_cache = True
    files = read_job_file(small_dtlto.job_file)
    reporter = Reporter(len(files.jobs), verbose=False, tty=False, quiet=True)
    distribution = run_jobs(files, Settings(opts), reporter)
    assert os.environ["TMPDIR"] == str(tmp_path)
    assert distribution.env is not None
    private = distribution.env["TMPDIR"]
    assert private.startswith(f"{tmp_path}/dist-lto-")
    assert not Path(private).exists()  # removed with the distribution
    assert len(list(root.glob("*.native.o"))) == len(files.jobs)
