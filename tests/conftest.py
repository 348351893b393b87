"""Shared fixtures: the real LLVM 22 tools and real programs compiled to ThinLTO bitcode.

Tests use real clang/lld/llvm-ar wherever the behaviour depends on them; a
missing toolchain is a failure (run `.ci/setup`), never a skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from dist_lto.llvm.toolchain import tool
from hypothesis import settings
from support import buildbarn, workloads
from support.pki import Pki, make_pki

REPO = Path(__file__).resolve().parent.parent

# CI judges one submission by one run: there, property tests replay the same derived
# examples every time (a failure is reproducible, not luck) and no per-example deadline
# applies on a loaded 2-core machine. Locally they explore new examples on every run;
# the wide search is bench/fuzz.py's job.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

SLOW_FIXTURES = {"lua_objects", "zstd_objects", "lua_thin_index", "engine", "tls_engine",
                 "chromium", "lua", "zstd", "lua_distributed"}  # fmt: skip
"""Fixtures that compile a real program from Debian's sources, start the BuildBarn
engine or a browser: a test using one (directly or through another fixture) is `slow`."""
SLOW_MODULES = {"test_buck2_examples", "test_buck2_remote", "test_buck2_rules",
                "test_upstream_buck2", "test_kill", "test_determinism", "test_fuzz"}  # fmt: skip
"""Modules whose every test drives real Buck2 or whole real pipelines."""
SLOW_TESTS = {
    "test_o3_non_pie_link_also_equals_in_process",
    "test_large_replay_in_workers_writes_what_one_process_writes_and_reruns_alike",
    "test_eight_links_sharing_one_cache_with_a_pruner_running_all_work",
}
"""Tests that take many seconds through no slow fixture: one compiles Lua itself, one
plans a large synthetic link twice, one is a load test of eight links at once."""

# The inner loop tries a tenth of each property test's examples (`support.budget`);
# CI and full runs keep every test's whole budget.
INNER_LOOP_EXAMPLES = 10


def pytest_configure(config: pytest.Config) -> None:
    if "not slow" in " ".join(str(config.getoption("markexpr", "")).split()):
        settings.register_profile("inner-loop", settings.default, max_examples=INNER_LOOP_EXAMPLES)
        settings.load_profile("inner-loop")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`pytest -m "not slow"` is the inner loop; CI runs everything."""
    for item in items:
        module = item.module.__name__ if item.module else ""
        name = getattr(item, "originalname", item.name)
        if (
            module in SLOW_MODULES
            or name in SLOW_TESTS
            or SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))
        ):
            item.add_marker(pytest.mark.slow)


@dataclass(frozen=True)
class Llvm:
    clang: str
    clangxx: str
    lld: str
    ar: str
    nm: str
    objdump: str
    readelf: str


@pytest.fixture(scope="session")
def llvm() -> Llvm:
    tools = Llvm(
        clang=tool("clang"),
        clangxx=tool("clang++"),
        lld=tool("ld.lld"),
        ar=tool("llvm-ar"),
        nm=tool("llvm-nm"),
        objdump=tool("llvm-objdump"),
        readelf=tool("llvm-readelf"),
    )
    for path in vars(tools).values():
        if not os.access(path, os.X_OK):
            pytest.fail(
                f"{path} is missing: run `bash .ci/setup` (installs clang-22 lld-22 llvm-22)"
            )
    return tools


@pytest.fixture(scope="session")
def dist_lto_cmd() -> list[str]:
    """The installed `dist-lto` command (the console script in the venv)."""
    exe = shutil.which("dist-lto", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "dist_lto"]


def run_cli(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m dist_lto ARGS` as a user would, capturing text output."""
    return subprocess.run(
        [sys.executable, "-m", "dist_lto", *args], cwd=cwd, capture_output=True, text=True
    )


@pytest.fixture(scope="session")
def lua_objects(tmp_path_factory: pytest.TempPathFactory) -> workloads.Build:
    """Lua 5.4 compiled to ThinLTO bitcode (read-only: copy before changing)."""
    return workloads.build("lua", tmp_path_factory.mktemp("lua"))


@pytest.fixture(scope="session")
def zstd_objects(tmp_path_factory: pytest.TempPathFactory) -> workloads.Build:
    """zstd compiled to ThinLTO bitcode plus one native assembly object (read-only)."""
    return workloads.build("zstd", tmp_path_factory.mktemp("zstd"))


@dataclass(frozen=True)
class ThinIndex:
    """A program after the index step, run in `build.root` with objects spelled as in
    `build.objects` (`obj/x.o`), so every `obj/x.o` has `obj/x.o.thinlto.bc` and
    `obj/x.o.imports` beside it. `link_flags` are the clang-driver link flags the index
    step used (minus the index options); read-only: copy before changing."""

    build: workloads.Build
    link_flags: list[str]

    @property
    def root(self) -> Path:
        return self.build.root


@pytest.fixture(scope="session")
def lua_thin_index(tmp_path_factory: pytest.TempPathFactory, llvm: Llvm) -> ThinIndex:
    """Lua after LLD 22's index step (`--thinlto-index-only --thinlto-emit-imports-files`)."""
    build = workloads.build("lua", tmp_path_factory.mktemp("lua-index"))
    link_flags = ["-flto=thin", "-fuse-ld=lld", *build.link_flags]
    subprocess.run(
        [llvm.clang, *link_flags, *build.objects, "-o", "lua",
         "-Wl,--thinlto-index-only", "-Wl,--thinlto-emit-imports-files"],
        cwd=build.root, check=True, capture_output=True,
    )  # fmt: skip
    return ThinIndex(build, link_flags)


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[buildbarn.Engine]:
    """The BuildBarn engine on loopback (two workers), shared by every remote test;
    tests keep their action caches apart with instance names."""
    try:
        running = buildbarn.start(tmp_path_factory.mktemp("buildbarn"), workers=2)
    except buildbarn.EngineError as err:
        pytest.fail(f"the BuildBarn engine did not start (run `bash .ci/setup`): {err}")
    yield running
    running.stop()


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA, certificates and tokens for a TLS-protected service (tests/support/pki.py)."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def tls_engine(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[buildbarn.Engine]:
    """A second BuildBarn engine (two workers) whose clients need TLS, a client
    certificate and a bearer token (`pki`)."""
    try:
        engine = buildbarn.start(tmp_path_factory.mktemp("buildbarn-tls"), workers=2,
                                 tls_dir=pki.ca.parent)  # fmt: skip
    except buildbarn.EngineError as err:
        pytest.fail(f"the BuildBarn engine did not start (run `bash .ci/setup`): {err}")
    yield engine
    engine.stop()


CAPTURED = REPO / "examples" / "captured"


@pytest.fixture
def captured(tmp_path: Path) -> Path:
    """A private copy of examples/captured: a small link LLD 22 planned, with its index."""
    dest = tmp_path / "captured"
    shutil.copytree(CAPTURED, dest)
    return dest


@pytest.fixture(scope="session")
def real_object(tmp_path_factory: pytest.TempPathFactory, llvm: Llvm) -> Path:
    """A genuine native object (real clang) without debug information, for fake
    compilers that copy or damage one (read-only)."""
    src = tmp_path_factory.mktemp("obj") / "f.c"
    src.write_text("int f(int x) { return x + 1; }\n")
    subprocess.run([llvm.clang, "-O2", "-c", str(src), "-o", str(src.with_suffix(".o"))],
                   check=True)  # fmt: skip
    return src.with_suffix(".o")


# ---------------------------------------------------------------------------------
# LLD's DTLTO (`dist-lto distribute`)

SERIAL_DISTRIBUTOR = """\
import json
import subprocess
import sys

# Reference distributor in the style of LLVM's example: every job, one after another.
with open(sys.argv[-1]) as f:
    jobs = json.load(f)
for job in jobs["jobs"]:
    subprocess.run(jobs["common"]["args"] + job["args"], check=True)
"""


@pytest.fixture(scope="session")
def serial_distributor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DTLTO distributor that runs the jobs serially, as LLVM's example does."""
    script = tmp_path_factory.mktemp("serial") / "serial-distributor"
    script.write_text(f"#!{sys.executable}\n{SERIAL_DISTRIBUTOR}")
    script.chmod(0o755)
    return script


SMALL_PROGRAM = {
    "main.c": '#include <stdio.h>\nint twice(int);\nint shout(const char *);\n'
              'int main(int c, char **v) { printf("%d\\n", twice(c)); return shout(v[0]) < 0; }\n',
    "twice.c": "int add(int, int);\nint twice(int x) { return add(x, x); }\n",
    "add.c": "int add(int a, int b) { return a + b; }\n",
    "shout.c": '#include <string.h>\nint shout(const char *s) { return (int)strlen(s); }\n',
}  # fmt: skip


@dataclass(frozen=True)
class DtltoLink:
    """A small real program linked by LLD 22 through DTLTO (the serial distributor) with
    `--save-temps`, so the job file, the indexes and the archive members LLD extracted
    stay in `root`, the link's directory. `job_file` is relative to `root`; `link` is the
    clang command without distributor flags (objects `main.o shout.o libm.a`, where the
    regular archive holds `twice.o` and `add.o`). Read-only: copy `root` first."""

    root: Path
    job_file: str
    link: list[str]

    def clone(self, dest: Path) -> Path:
        """A copy of the link's directory at `dest` without the backends' objects, as a
        clean checkout of the same link on another machine would have it."""
        shutil.copytree(self.root, dest)
        for output in dest.glob("*.native.o"):
            output.unlink()
        return dest


@pytest.fixture(scope="session")
def small_dtlto(
    tmp_path_factory: pytest.TempPathFactory, llvm: Llvm, serial_distributor: Path
) -> DtltoLink:
    root = tmp_path_factory.mktemp("small-dtlto")
    for name, text in SMALL_PROGRAM.items():
        (root / name).write_text(text)
        subprocess.run([llvm.clang, "-O2", "-flto=thin", "-c", name], cwd=root, check=True)
    subprocess.run([llvm.ar, "rcs", "libm.a", "twice.o", "add.o"], cwd=root, check=True)
    link = [llvm.clang, "-flto=thin", "-fuse-ld=lld", "-O2", "main.o", "shout.o", "libm.a",
            "-o", "prog"]  # fmt: skip
    subprocess.run(
        [*link, f"-fthinlto-distributor={serial_distributor}", "-Wl,--save-temps"],
        cwd=root, check=True, capture_output=True,
    )  # fmt: skip
    (job_file,) = (p.name for p in root.glob("prog.*.dist-file.json"))
    return DtltoLink(root, job_file, link)
