"""`dist-lto link`: the captured example's plans run without Buck2, by real clang and LLD."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from support.tools import REPO, Llvm
from test_plan_captured import _expected

CAPTURED = REPO / "examples" / "captured"
WORDS = ["distributed", "thin", "lto"]
PLANNED_OUTPUTS = ["out/archive-opt/0/objects/util.o", "out/archive-opt/1/0/text.o", "out/opt/0.o"]
"""The backends the captured plans ask for: main.o and the two loaded members (not the
never-loaded unused.o, not the native fast.o)."""


@pytest.fixture
def captured(tmp_path: Path) -> Path:
    dest = tmp_path / "captured"
    shutil.copytree(CAPTURED, dest)
    return dest


def link(
    dist_lto: list[str],
    root: Path,
    *options: str,
    command: list[str],
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*dist_lto, "link", *options, "meta.json", "--", *command], cwd=root,
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip


def replan(dist_lto: list[str], root: Path, command: list[str], replay: bool = True) -> None:
    """Plan the captured link for `command` (replaying its index step by default)."""
    how = ["--replay"] if replay else []
    done = subprocess.run([*dist_lto, "plan", *how, "meta.json", "--", *command], cwd=root,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr


def clang_link(llvm: Llvm, out: str = "app") -> list[str]:
    return [llvm.clang, "-fuse-ld=lld", "-O2", "-o", out]


def outputs(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.glob("out/*opt*/**/*.o"))


def test_the_captured_plans_link_a_program_that_runs_then_relink_from_the_cache(
    captured: Path, llvm: Llvm, dist_lto_cmd: list[str], tmp_path: Path
) -> None:
    assert not (captured / "out/opt").exists()  # output directories are created
    cache = f"--cache-dir={tmp_path / 'cache'}"
    done = link(dist_lto_cmd, captured, cache, command=clang_link(llvm))
    assert done.returncode == 0, done.stderr
    (summary,) = done.stderr.splitlines()
    assert summary.startswith("dist-lto link: app: 3 jobs, 0 cached, 0 failed, ")
    assert outputs(captured) == PLANNED_OUTPUTS
    run = subprocess.run(["./app", *WORDS], cwd=captured, capture_output=True, text=True)
    assert (run.returncode, run.stdout) == (0, _expected(WORDS))
    first = (captured / "app").read_bytes()
    for path in PLANNED_OUTPUTS:
        (captured / path).unlink()
    (captured / "app").unlink()
    again = link(dist_lto_cmd, captured, cache, "--verbose", command=clang_link(llvm))
    assert again.returncode == 0, again.stderr
    assert sum("] cached " in line for line in again.stderr.splitlines()) == 3
    assert again.stderr.splitlines()[-1].startswith("dist-lto link: app: 3 jobs, 3 cached, ")
    assert (captured / "app").read_bytes() == first


def test_link_takes_its_jobs_and_cache_from_the_environment_and_the_configuration_file(
    captured: Path, llvm: Llvm, dist_lto_cmd: list[str], tmp_path: Path
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'jobs = 1\n[cache]\ndir = "{tmp_path / "file-cache"}"\n')
    env = {**os.environ, "DIST_LTO_CONFIG": str(config)}
    env.pop("DIST_LTO_CACHE_DIR", None)
    env.pop("DIST_LTO_NO_CACHE", None)
    done = link(dist_lto_cmd, captured, "--verbose", command=clang_link(llvm), env=env)
    assert done.returncode == 0, done.stderr
    assert len(list((tmp_path / "file-cache").glob("v*/entries/*/*"))) == 3
    assert done.stderr.startswith(
        f"dist-lto link: 3 jobs from meta.json, 1 at a time, cache {tmp_path / 'file-cache'},"
    )

    refused = link(dist_lto_cmd, captured, command=clang_link(llvm),
                   env={**env, "DIST_LTO_JOBS": "none"})  # fmt: skip
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "dist-lto link: error: DIST_LTO_JOBS: expected a positive integer, got 'none'"
    )


def test_link_runs_the_same_backends_as_dist_lto_opt(
    captured: Path, llvm: Llvm, dist_lto_cmd: list[str]
) -> None:
    """The flags come from COMMAND as `opt` translates `--args`: the objects are equal."""
    done = link(dist_lto_cmd, captured, "--no-cache", command=clang_link(llvm))
    assert done.returncode == 0, done.stderr
    (captured / "flags").write_text("-fuse-ld=lld\n-O2\n")
    plan = json.loads((captured / "out/plans/0.json").read_text())
    opt = subprocess.run([*dist_lto_cmd, "opt", "--input", plan["path"], "--index",
                          plan["index_file"], "--out", "main.opt.o", "--args", "flags", "--",
                          llvm.clang], cwd=captured, capture_output=True, text=True)  # fmt: skip
    assert opt.returncode == 0, opt.stderr
    assert (captured / "main.opt.o").read_bytes() == (captured / plan["opt_output"]).read_bytes()


def test_a_failing_backend_fails_the_link_before_the_final_link_runs(
    captured: Path, llvm: Llvm, dist_lto_cmd: list[str], tmp_path: Path
) -> None:
    compiler = tmp_path / "failing-clang"
    compiler.write_text(
        "#!/bin/sh\n"
        'case "$*" in *util.o*) echo "fake: error: no util today" >&2; exit 5;; esac\n'
        f'exec {llvm.clang} "$@"\n'
    )
    compiler.chmod(0o755)
    done = link(dist_lto_cmd, captured, "--no-cache", f"--compiler={compiler}",
                command=clang_link(llvm))  # fmt: skip
    assert done.returncode == 5
    lines = done.stderr.splitlines()
    assert lines[0].startswith("dist-lto link: error: job ")
    assert "(prep/util/objects/util.o -> out/archive-opt/0/objects/util.o)" in lines[0]
    assert lines[0].endswith("exited with status 5")
    assert "fake: error: no util today" in lines
    assert lines[-1].startswith("dist-lto link: app: 3 jobs, 0 cached, 1 failed")
    assert not (captured / "app").exists()
    assert "out/archive-opt/0/objects/util.o" not in outputs(captured)
    assert not [p for p in captured.rglob("*") if ".tmp-" in p.name]


def test_a_failing_final_link_passes_its_status_through(
    captured: Path, llvm: Llvm, dist_lto_cmd: list[str]
) -> None:
    command = [*clang_link(llvm), "-Wl,--no-such-flag"]
    replan(dist_lto_cmd, captured, command)
    done = link(dist_lto_cmd, captured, "--no-cache", "--quiet", command=command)
    assert done.returncode == 1
    assert "unknown argument '--no-such-flag'" in done.stderr
    assert done.stderr.splitlines()[-1].startswith("dist-lto link: error: the final link failed")
    assert done.stderr.splitlines()[-1].endswith(" -o app -Wl,--no-such-flag @out/final-link.args")
    assert not [p.name for p in captured.iterdir() if "app" in p.name]


def test_the_final_link_writes_a_hidden_temporary_renamed_over_the_output(
    captured: Path, llvm: Llvm, dist_lto_cmd: list[str], tmp_path: Path
) -> None:
    logging = tmp_path / "clang-logging"  # a driver: the backends run through it too
    logging.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/argv\nexec {llvm.clang} "$@"\n')
    logging.chmod(0o755)
    (captured / "app").write_text("the last link's program\n")
    command = [str(logging), "-fuse-ld=lld", "-O2", "-o", "app"]
    replan(dist_lto_cmd, captured, command)
    done = link(dist_lto_cmd, captured, "--no-cache", "--quiet", command=command)
    assert done.returncode == 0, done.stderr
    (final,) = [line.split() for line in (tmp_path / "argv").read_text().splitlines()
                if "@out/final-link.args" in line]  # fmt: skip
    written = final[final.index("-o") + 1]
    assert written.startswith(".app.tmp-") and "/" not in written
    assert not [p.name for p in captured.iterdir() if p.name.startswith(".")]
    run = subprocess.run(["./app", *WORDS], cwd=captured, capture_output=True, text=True)
    assert (run.returncode, run.stdout) == (0, _expected(WORDS))


def test_a_final_link_that_dies_mid_write_leaves_no_temporary_of_its_own(
    captured: Path, llvm: Llvm, dist_lto_cmd: list[str], tmp_path: Path
) -> None:
    """As a linker caught by a stop before it removes its own temporary of the output."""
    dying = tmp_path / "clang-dying"  # a driver: the backends run through it too
    dying.write_text(
        "#!/bin/sh\n"
        'case "$*" in *final-link.args*) ;; *) exec ' + llvm.clang + ' "$@";; esac\n'
        'while [ "$1" != -o ]; do shift; done\n'
        'echo partial > "$2.tmp1a2b3c4"; kill -KILL $$\n'
    )
    dying.chmod(0o755)
    command = [str(dying), "-fuse-ld=lld", "-O2", "-o", "app"]
    replan(dist_lto_cmd, captured, command)
    done = link(dist_lto_cmd, captured, "--no-cache", "--quiet", command=command)
    assert done.returncode == 128 + 9, done.stderr
    assert not [p.name for p in captured.iterdir() if "app" in p.name]


def test_plans_that_were_not_written_are_bad_input_and_nothing_runs(
    captured: Path, llvm: Llvm, dist_lto_cmd: list[str]
) -> None:
    (captured / "out/link-plan.json").unlink()
    done = link(dist_lto_cmd, captured, "--no-cache", command=clang_link(llvm))
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line == (
        "dist-lto link: error: out/link-plan.json: link plan missing: plan the link first,"
        f" with `dist-lto plan meta.json -- {shlex.join(clang_link(llvm))}`"
    )
    assert not (captured / "out/opt").exists()


def test_a_link_command_other_than_the_planned_one_is_refused_naming_the_difference(
    captured: Path, llvm: Llvm, dist_lto_cmd: list[str]
) -> None:
    planned = [llvm.clang, "-fuse-ld=lld", "-O2", "-o", "p2"]
    replan(dist_lto_cmd, captured, planned, replay=False)
    done = link(dist_lto_cmd, captured, "--no-cache",
                command=[llvm.clang, "-fuse-ld=lld", "-O3", "-o", "p3"])  # fmt: skip
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        "dist-lto link: error: out/link-plan.json: COMMAND is not the one the plans were made"
        " from: `-O3` where the plan has `-O2`; `p3` where the plan has `p2`; "
    )
    assert not (captured / "out/opt").exists()
    assert not (captured / "p3").exists()
    same = link(dist_lto_cmd, captured, "--no-cache", command=["clang-22", *planned[1:]])
    assert same.returncode == 0, same.stderr  # the same program, spelled as PATH finds it
    run = subprocess.run(["./p2", *WORDS], cwd=captured, capture_output=True, text=True)
    assert (run.returncode, run.stdout) == (0, _expected(WORDS))


def test_a_linker_as_command_needs_the_backends_compiler(
    captured: Path, llvm: Llvm, dist_lto_cmd: list[str]
) -> None:
    replan(dist_lto_cmd, captured, [llvm.lld, "-o", "app"])
    done = link(dist_lto_cmd, captured, "--no-cache", command=[llvm.lld, "-o", "app"])
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line == (f"dist-lto link: error: {llvm.lld}: not a clang driver; name the backends'"
                    " compiler with --compiler CLANG")  # fmt: skip


def test_link_writes_a_trace_with_the_backends_and_the_final_link(
    captured: Path, llvm: Llvm, dist_lto_cmd: list[str]
) -> None:
    done = link(dist_lto_cmd, captured, "--no-cache", "--trace=trace/link.json",
                command=clang_link(llvm))  # fmt: skip
    assert done.returncode == 0, done.stderr
    events = json.loads((captured / "trace/link.json").read_text())["traceEvents"]
    jobs = sorted(e["name"] for e in events if e.get("cat") == "job")
    assert jobs == ["obj/main.o", "prep/util/objects/util.o", "thin/text.o"]
    (final,) = [e for e in events if e.get("cat") == "link"]
    assert final["tid"] == 0 and final["args"] == {"output": "app"}
    assert final["ts"] >= max(e["ts"] + e["dur"] for e in events if e.get("cat") == "job") - 1


def test_help_shows_the_command_next_to_plan() -> None:
    from support.tools import run_cli

    result = run_cli(["link", "--help"])
    assert result.returncode == 0
    for text in ("dist-lto plan meta.json -- clang", "dist-lto link meta.json -- clang",
                 "--trace", "--quiet", "--compiler", "--cache-dir"):  # fmt: skip
        assert text in result.stdout


@pytest.mark.parametrize(
    ("plan", "key", "value"),
    [("out/archive-plans/0.json", "opt_object", "/tmp/escaped.o"),
     ("out/archive-plans/0.json", "opt_object", "../../../../escaped.o"),
     ("out/archive-plans/0.json", "index_file", "../../../../meta.json"),
     ("out/plans/0.json", "opt_output", "obj/fast.o")],
)  # fmt: skip
def test_a_plan_cannot_direct_an_output_outside_its_directory_or_onto_an_input(
    captured: Path, llvm: Llvm, dist_lto_cmd: list[str], plan: str, key: str, value: str
) -> None:
    document = json.loads((captured / plan).read_text())
    (document["members"][0] if "members" in document else document)[key] = value
    (captured / plan).write_text(json.dumps(document))
    before = sorted(str(p) for p in captured.rglob("*"))
    done = link(dist_lto_cmd, captured, "--no-cache", command=clang_link(llvm))
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"dist-lto link: error: {plan}: "), line
    assert sorted(str(p) for p in captured.rglob("*")) == before
    assert not Path("/tmp/escaped.o").exists()
