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
from pathlib import Path

import pytest
from dist_lto.llvm.toolchain import tool
from hypothesis import settings
from support import buildbarn, workloads
from support.links import SERIAL_DISTRIBUTOR, SMALL_PROGRAM, DtltoLink, ThinIndex
from support.pki import Pki, make_pki
from support.slow import slow_fixture, uses_slow_fixture
from support.tools import REPO, Llvm

# CI judges one submission by one run: there, property tests replay the same derived
# examples every time (a failure is reproducible, not luck) and no per-example deadline
# applies on a loaded 2-core machine. Locally they explore new examples on every run;
# the wide search is fuzz/fuzz.py's job.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

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
        if uses_slow_fixture(item):
            item.add_marker(pytest.mark.slow)


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


@pytest.fixture(scope="session")
@slow_fixture
def lua_objects(tmp_path_factory: pytest.TempPathFactory) -> workloads.Build:
    """Lua 5.4 compiled to ThinLTO bitcode (read-only: copy before changing)."""
    return workloads.build("lua", tmp_path_factory.mktemp("lua"))


@pytest.fixture(scope="session")
@slow_fixture
def zstd_objects(tmp_path_factory: pytest.TempPathFactory) -> workloads.Build:
    """zstd compiled to ThinLTO bitcode plus one native assembly object (read-only)."""
    return workloads.build("zstd", tmp_path_factory.mktemp("zstd"))


@pytest.fixture(scope="session")
@slow_fixture
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
@slow_fixture
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
@slow_fixture
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


@pytest.fixture(scope="session")
def serial_distributor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DTLTO distributor that runs the jobs serially, as LLVM's example does."""
    script = tmp_path_factory.mktemp("serial") / "serial-distributor"
    script.write_text(f"#!{sys.executable}\n{SERIAL_DISTRIBUTOR}")
    script.chmod(0o755)
    return script


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
