"""The `dist-lto` command surface: help, unknown subcommands, error reporting."""

import subprocess

from conftest import run_cli
from dist_lto import cli


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
