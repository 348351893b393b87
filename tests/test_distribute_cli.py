"""The `dist-lto distribute` command line: `--help`, usage errors, the fast parser, imports."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dist_lto.commands import distribute
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support.budget import examples
from support.links import DtltoLink
from support.terminal import run_on_terminal
from support.tools import run_cli


def test_help_documents_every_option() -> None:
    result = run_cli(["distribute", "--help"])
    assert result.returncode == 0
    for text in ("--jobs", "--cache-dir", "--no-cache", "--cache-max-size", "--verbose",
                 "--quiet", "--trace FILE", "jobserver", "summary line",
                 "JOB_FILE", "-fthinlto-distributor=$(command -v dist-lto)",
                 "-Xthinlto-distributor=distribute", "XDG_CACHE_HOME", "128+N",
                 "docs/distribute.md"):  # fmt: skip
        assert text in result.stdout


def test_cli_lists_the_subcommand() -> None:
    assert "distribute" in run_cli(["--help"]).stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--jobs=0", "j.json"], "--jobs: expected a positive integer, got '0'"),
     (["-j", "two", "j.json"], "--jobs: expected a positive integer, got 'two'"),
     (["--cache-max-size=12X", "j.json"], "--cache-max-size: not a size: '12X'"),
     (["--no-cache", "--cache-dir=c", "j.json"], "not allowed with argument"),
     (["--verbose"], "the following arguments are required: JOB_FILE"),
     (["a.json", "b.json"], "unrecognized arguments: b.json")],
)  # fmt: skip
def test_a_bad_command_line_is_a_usage_error(argv: list[str], message: str, tmp_path: Path) -> None:
    result = run_cli(["distribute", *argv], cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------
# The fast parser must agree with argparse, the reference

VALUES = st.text("abc0123./-=", min_size=0, max_size=6)
VALUE_OPTIONS = ["--jobs", "-j", "--cache-dir", "--cache-max-size", "--trace", "--remote",
                 "--remote-cache", "--instance", "--remote-instance-name",
                 "--remote-timeout", "--remote-action-timeout"]  # fmt: skip
OPTION = st.one_of(
    st.tuples(st.sampled_from(VALUE_OPTIONS), VALUES),
    st.tuples(st.sampled_from(["--no-cache", "--verbose", "-v", "--quiet", "-q"])),
    st.tuples(st.sampled_from(["--job", "--bogus", "-h", "--", "-j4", "x.json", "y.json"])),
)


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    argv: list[str] = []
    for option in draw(st.lists(OPTION, max_size=6)):
        if len(option) == 2 and option[0].startswith("--") and draw(st.booleans()):
            argv.append(f"{option[0]}={option[1]}")
        else:
            argv.extend(option)
    return argv


def argparse_result(argv: list[str]) -> argparse.Namespace | None:
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            return distribute.build_parser().parse_args(argv)
        except SystemExit:
            return None


@given(argv=command_lines())
@example(argv=["--jobs=--", "x.json"])
@example(argv=["--remote", "", "--remote-cache", "", "x.json"])
@settings(max_examples=examples(400), deadline=None)
def test_fast_parser_agrees_with_argparse(argv: list[str]) -> None:
    fast = distribute._parse_fast(argv)
    if fast is None:
        return  # argparse decides: it is what parse_args falls back to
    reference = argparse_result(argv)
    assert reference is not None, argv
    for name in distribute.Options.__slots__:
        assert getattr(fast, name) == getattr(reference, name), (name, argv)


def test_fast_parser_takes_what_lld_passes() -> None:
    """`-Xthinlto-distributor=` arguments come one per word, then the job file."""
    argv = ["--jobs=4", "--cache-dir", "/c", "--cache-max-size=1G", "-v", "p.77.dist-file.json"]
    parsed = distribute._parse_fast(argv)
    assert parsed is not None
    assert (parsed.jobs, parsed.cache_dir, parsed.cache_max_size, parsed.verbose) == (
        "4", "/c", "1G", True)  # fmt: skip
    assert parsed.job_file == "p.77.dist-file.json"
    parsed = distribute._parse_fast(["--no-cache", "-j", "2", "p.json"])
    assert parsed is not None and (parsed.no_cache, parsed.jobs) == (True, "2")


# ---------------------------------------------------------------------------------
# Start-up


def imported_modules(argv: list[str], cwd: Path) -> set[str]:
    result = subprocess.run([sys.executable, "-X", "importtime", *argv], cwd=cwd,
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return {
        line.rsplit("|", 1)[1].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def test_a_link_imports_no_process_pool_argparse_or_subprocess(
    tmp_path: Path, small_dtlto: DtltoLink
) -> None:
    """The distributor starts once per link; it runs compilers with `posix_spawn` from
    threads and loads argparse only for `--help` and usage errors. (`subprocess` is
    loaded only to ask a compiler for its version the first time the cache sees it.)
    Nor, cold or warm, `dataclasses` (with `inspect`) or `typing`: the job file's
    classes are slotted classes and JSON is read with `json`, as orjson would load
    `dataclasses`, `uuid` and `datetime` (~20 ms of every link)."""
    root = tmp_path / "link"
    shutil.copytree(small_dtlto.root, root)
    argv = ["-m", "dist_lto", "distribute", "--cache-dir=cache", small_dtlto.job_file]
    for cold in (True, False):
        for output in root.glob("*.native.o"):
            output.unlink()
        loaded = imported_modules(argv, root)
        assert "dist_lto.commands.distribute" in loaded
        heavy = {"argparse", "shlex", "concurrent.futures", "multiprocessing", "asyncio",
                 "shutil", "tempfile", "dataclasses", "inspect", "typing", "orjson"}  # fmt: skip
        if not cold:
            heavy |= {"subprocess", "selectors"}
        assert not heavy & loaded, heavy & loaded
        assert len(list(root.glob("*.native.o"))) == 4


@pytest.mark.parametrize(
    ("flags", "env", "progress"),
    [([], {"TERM": "xterm"}, True), (["--quiet"], {"TERM": "xterm"}, False),
     ([], {"TERM": "dumb"}, False), ([], {"TERM": "xterm", "NO_COLOR": "1"}, False)],
    ids=["terminal", "quiet", "dumb-terminal", "no-color"],
)  # fmt: skip
def test_the_progress_line_names_its_link_and_plain_terminals_get_no_escapes(
    tmp_path: Path, small_dtlto: DtltoLink, flags: list[str], env: dict[str, str], progress: bool
) -> None:
    """Concurrent links share a terminal: each progress line names its link. `--quiet`
    silences it; `TERM=dumb` and `NO_COLOR` get plain lines (the summary), no escapes."""
    root = small_dtlto.clone(tmp_path / "link")
    environ = {k: v for k, v in os.environ.items() if k not in ("TERM", "NO_COLOR")}
    argv = [sys.executable, "-m", "dist_lto", "distribute", "--no-cache", *flags]
    status, shown = run_on_terminal([*argv, small_dtlto.job_file], root, {**environ, **env})
    assert status == 0
    if progress:
        assert "\x1b[K" in shown
        assert "dist-lto distribute: prog: 4/4 done" in shown
    else:
        assert "\x1b" not in shown
        quiet = "--quiet" in flags
        assert ("dist-lto distribute: prog: 4 jobs, 0 cached, 0 failed" in shown) != quiet
