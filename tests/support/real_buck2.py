"""Drive the real Buck2 binary from tests and benchmarks.

Each `Buck2` runs in its own isolation dir (its own daemon and `buck-out/<dir>`), so
concurrent sessions and a user's own daemon never share state, and `kill()` stops that
daemon. The binary is `$DIST_LTO_BUCK2`, else the one `.ci/setup` installs into
`.cache/buck2/bin`, else `buck2` on PATH; a missing binary is a failure, never a skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent.parent
INSTALLED = REPO / ".cache" / "buck2" / "bin" / "buck2"
RUSTUP_PROXY = Path.home() / ".cargo" / "bin" / "rustc"


class Buck2Missing(RuntimeError):
    pass


def find_buck2() -> str:
    """The Buck2 binary the tests use."""
    for candidate in (os.environ.get("DIST_LTO_BUCK2"), str(INSTALLED), shutil.which("buck2")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise Buck2Missing("no buck2: run `bash .ci/setup` (installs ../shared/buck2 into .cache)")


def python_with_tools() -> str:
    """An interpreter that imports orjson and libarchive, spelled so that it stays in its
    virtualenv: a venv's `bin/python` is a symlink, and its resolved target is the base
    interpreter, which has neither."""
    for candidate in (sys.executable, str(REPO / ".venv" / "bin" / "python")):
        if candidate and os.access(candidate, os.X_OK):
            probe = subprocess.run(
                [candidate, "-c", "import orjson, libarchive"], capture_output=True
            )
            if probe.returncode == 0:
                return os.path.abspath(candidate)
    raise RuntimeError("no Python with orjson and libarchive-c: run `bash .ci/setup`")


def real_rustc() -> str | None:
    """The rustc binary behind rustup's proxy (actions run without HOME, where the proxy
    cannot find its toolchain); None when there is no rustc."""
    found = shutil.which("rustc") or (str(RUSTUP_PROXY) if RUSTUP_PROXY.exists() else None)
    if found is None:
        return None
    sysroot = subprocess.run([found, "--print", "sysroot"], capture_output=True, text=True)
    if sysroot.returncode != 0:
        return None
    real = Path(sysroot.stdout.strip()) / "bin" / "rustc"
    return str(real) if real.exists() else found


PROJECT_FILES = ("prelude", "tools/dist_lto", "platforms", "BUCK", "project.bzl", ".buckconfig")
"""What a copy of this project needs to build with our rules: the prelude, the toolchain
target (root BUCK, through project.bzl) with the dist-lto sources it ships to actions,
the platforms."""


def _not_sources(directory: str, names: list[str]) -> set[str]:
    """What a copy leaves out: bytecode, Buck2 outputs, and `examples/upstream` (a Buck2
    project of its own, which `.buckconfig` ignores; tests build it where it is)."""
    skip = {"__pycache__", "buck-out"} & set(names)
    if Path(directory) == REPO / "examples":
        skip.add("upstream")
    return skip


def scratch_project(
    dest: Path, files: dict[str, str] | None = None, *, examples: bool = False
) -> Path:
    """A copy of this Buck2 project at `dest` (so that tests may write its
    `.buckconfig.local` and packages), with `files` (path -> text, dedented) added and,
    if asked, `examples/`."""
    names = PROJECT_FILES + (("examples",) if examples else ())
    for name in names:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=_not_sources)
        else:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dest / name)
    for name, text in (files or {}).items():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_text(textwrap.dedent(text))
    return dest


UPSTREAM_EXAMPLE = REPO / "examples" / "upstream"
"""A Buck2 project on Buck2's bundled upstream prelude that uses our cell (its toolchain
names our tools; docs/upstream-buck2.md)."""


def upstream_scratch_project(dest: Path, local_config: str = "") -> Path:
    """`examples/upstream` copied to `dest` with the `dist_lto` cell vendored into it, so
    a caller may write its packages and `.buckconfig.local` and leaves nothing in the
    repository."""
    sys.path.insert(0, str(UPSTREAM_EXAMPLE))
    try:
        import vendor
    finally:
        sys.path.remove(str(UPSTREAM_EXAMPLE))
    shutil.copytree(
        UPSTREAM_EXAMPLE,
        dest,
        ignore=shutil.ignore_patterns(
            "buck-out", "third-party", ".buckconfig.local", "__pycache__"
        ),
    )
    vendor.vendor(dest / "third-party" / "dist-lto")
    if local_config:
        (dest / ".buckconfig.local").write_text(local_config)
    return dest


def machine_config() -> dict[str, str]:
    """`-c` values that have no portable default in `.buckconfig`."""
    config = {"dist_lto.python": python_with_tools()}
    rustc = real_rustc()
    if rustc:
        config["rust.rustc"] = rustc
    return config


@dataclass(frozen=True)
class Ran:
    """One action from `buck2 log what-ran`: the target, category and identifier from its
    identity (`root//pkg:name (<cfg>) (category identifier)`), where it ran, its argv."""

    target: str
    category: str
    identifier: str
    executor: str
    argv: tuple[str, ...]

    @classmethod
    def from_json(cls, row: dict) -> Ran:
        identity = row["identity"]
        target = identity.split(" ", 1)[0]
        what = identity.rsplit(" (", 1)[-1].rstrip(")")
        category, _, identifier = what.partition(" ")
        details = row.get("reproducer", {})
        argv = details.get("details", {}).get("command", [])
        return cls(target, category, identifier, details.get("executor", ""), tuple(argv))


@dataclass
class Buck2:
    """One project and one isolated daemon."""

    project: Path
    config: dict[str, str] = field(default_factory=machine_config)
    isolation_dir: str = field(default_factory=lambda: f"t-{uuid.uuid4().hex[:10]}")
    binary: str = field(default_factory=find_buck2)
    env: dict[str, str] = field(default_factory=dict)
    """Variables for the client, and so for a daemon it starts (which expands `$VAR`
    in `[buck2_re_client]` values)."""

    def command(self, *args: str, config: bool = True) -> list[str]:
        """The argv of `buck2 ARGS` in this isolation dir with this project's config."""
        verb, *rest = args
        overrides = [f"-c{k}={v}" for k, v in sorted(self.config.items())] if config else []
        return [self.binary, "--isolation-dir", self.isolation_dir, verb, *overrides, *rest]

    def __call__(
        self, *args: str, check: bool = True, config: bool = True, timeout: float = 1800
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            self.command(*args, config=config),
            cwd=self.project,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "BUCK2_NO_INTERACTIVE_CONSOLE": "1", **self.env},
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"buck2 {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-6000:]}"
            )
        return proc

    def build(self, *targets: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self("build", "--console=simple", *targets, check=check)

    def outputs(self, *targets: str) -> dict[str, Path]:
        """Each target's default output, built, as an absolute path."""
        proc = self("build", "--console=simple", "--show-full-json-output", *targets)
        shown = orjson.loads(proc.stdout)
        return {label: Path(path) for label, path in shown.items()}

    def what_ran(self, *, worker_starts: bool = False) -> list[Ran]:
        """The actions the last command ran (not those served from a cache).

        An action that started a persistent worker (the opt worker) is listed twice,
        first as `WorkerInit` with the worker's command, then as `Worker` with its own
        arguments: the first is left out unless `worker_starts`.
        """
        proc = self("log", "what-ran", "--format", "json", config=False)
        ran = [Ran.from_json(orjson.loads(line)) for line in proc.stdout.splitlines() if line]
        return [r for r in ran if worker_starts or r.executor != "WorkerInit"]

    def kill(self) -> None:
        subprocess.run(
            [self.binary, "--isolation-dir", self.isolation_dir, "kill"],
            cwd=self.project,
            capture_output=True,
            timeout=120,
        )


REPOSITORY_ONLY = (
    "buck-out", "__pycache__", ".git", ".venv", ".cache", ".hypothesis", ".mypy_cache",
    ".ruff_cache", ".pytest_cache", "*.egg-info", "build",
)  # fmt: skip
"""What a checkout holds that is not the repository's: outputs, caches, the venv."""


def repository_as_cell(dest: Path) -> Path:
    """This repository copied whole to `dest`, as a submodule of another project would
    hold it (symbolic links inside it kept)."""
    shutil.copytree(REPO, dest, symlinks=True, ignore=shutil.ignore_patterns(*REPOSITORY_ONLY))
    return dest
