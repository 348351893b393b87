"""The `dist-lto` command surface: help, unknown subcommands, error reporting."""

import subprocess
from pathlib import Path

from dist_lto import cli
from support.links import DtltoLink
from support.tools import run_cli


def test_help_lists_every_subcommand() -> None:
    result = run_cli(["--help"])
    assert result.returncode == 0
    for name, (_, summary) in cli.SUBCOMMANDS.items():
        assert f"  {name}" in result.stdout
        assert summary in result.stdout


def test_each_subcommand_has_complete_help() -> None:
    for name in cli.SUBCOMMANDS:
        result = run_cli([name, "--help"])
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"usage: dist-lto {name}"), result.stdout


def test_unknown_subcommand_is_a_usage_error() -> None:
    result = run_cli(["frobnicate"])
    assert result.returncode == 2
    assert "unknown subcommand 'frobnicate'" in result.stderr


def test_console_script_runs(dist_lto_cmd: list[str]) -> None:
    result = subprocess.run([*dist_lto_cmd, "--help"], capture_output=True, text=True)
    assert result.returncode == 0
    assert "subcommands:" in result.stdout


def test_version_is_the_packages_and_the_installed_distributions(dist_lto_cmd: list[str]) -> None:
    from importlib.metadata import version

    from dist_lto import __version__

    for flag in ("--version", "-V"):
        result = subprocess.run([*dist_lto_cmd, flag], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"dist-lto {__version__}\n"
    assert version("dist-lto") == __version__


_MAIN = str(cli.__file__).replace("cli.py", "__main__.py")


def _without_site_packages(argv: list[str], cwd: str) -> subprocess.CompletedProcess[str]:
    """`dist-lto ARGV` run as Buck2 runs it, from the package's directory with `-S`: a
    Python whose site-packages (orjson, libarchive-c, grpc) are out of reach."""
    import sys

    return subprocess.run([sys.executable, "-S", "-E", _MAIN, *argv], cwd=cwd,
                          capture_output=True, text=True, check=False)  # fmt: skip


def test_a_missing_remote_extra_is_one_line_naming_the_install(
    tmp_path: Path, small_dtlto: DtltoLink
) -> None:
    root = small_dtlto.clone(tmp_path / "link")
    argv = ["distribute", "--no-cache", "--remote", "grpc://127.0.0.1:1", small_dtlto.job_file]
    result = _without_site_packages(argv, str(root))
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("dist-lto distribute: error: no module named 'grpc': remote")
    assert line.endswith("pip install 'dist-lto[remote]'")


def test_a_python_without_the_dependencies_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    member = b"a.o/".ljust(16) + b"0".ljust(12) + b"0".ljust(6) * 2 + b"644".ljust(8)
    (tmp_path / "lib.a").write_bytes(b"!<arch>\n" + member + b"4".ljust(10) + b"`\nELF!")
    argv = ["prepare", "--archive", "lib.a", "--objects-out", "o", "--manifest-out", "m.json"]
    result = _without_site_packages(argv, str(tmp_path))
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("dist-lto prepare: error: no module named 'libarchive':")
    assert "[dist_lto] python" in line


def test_an_older_python_is_told_the_version_it_needs() -> None:
    """No older Python is installed here: the check is run with 3.10's version number."""
    import sys

    code = ("import runpy, sys; sys.version_info = (3, 10, 0);"
            f" sys.argv = ['dist-lto', '--version']; runpy.run_path({_MAIN!r})")  # fmt: skip
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=False)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.startswith("dist-lto: error: needs Python 3.11 or newer, not ")
