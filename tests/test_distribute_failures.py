"""`dist-lto distribute` when things go wrong, and what the user sees.

Failures real clang cannot be made to produce on demand come from a fake compiler (a
real executable, given to LLD as `--thinlto-remote-compiler=` or written into a job
file) that misbehaves for one module and is the real clang for the others. Jobs run
on a real job file LLD 22 wrote (`small_dtlto`, kept with `--save-temps`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dist_lto.backend import object_problem
from dist_lto.formats.jobfile import read_job_file
from support.links import DtltoLink
from support.terminal import run_on_terminal
from support.tools import Llvm

FAKE_COMPILER = """\
import os
import sys
import time

REAL = {real!r}
args = sys.argv[1:]
if "--version" in args:
    if os.environ.get("FAKE_NO_VERSION"):
        sys.exit(1)
    os.execv(REAL, [REAL, *args])
at = next(i for i, arg in enumerate(args) if arg.startswith("-fthinlto-index="))
module, out = args[at - 1], args[args.index("-o") + 1]
env = os.environ.get


def note(event):
    if env("FAKE_LOG"):
        with open(env("FAKE_LOG"), "a") as log:
            log.write(f"{{event}} {{os.getpid()}} {{module}}\\n")


note("start")
if env("FAKE_MODULE") and env("FAKE_MODULE") in module:
    while env("FAKE_WAIT_STARTS") and open(env("FAKE_LOG")).read().count("start") < int(
        env("FAKE_WAIT_STARTS")
    ):
        time.sleep(0.01)
    mode = env("FAKE_MODE")
    if mode == "fail":
        print(f"fake: error: cannot compile {{module}}", file=sys.stderr)
        sys.exit(3)
    if mode == "empty":
        open(out, "wb").close()
        sys.exit(0)
    if mode == "missing":
        sys.exit(0)
    if mode == "garbage":
        with open(out, "wb") as f:
            f.write(b"not an object")
        sys.exit(0)
    if mode == "crash":
        os.kill(os.getpid(), 9)
    if mode == "exit137":
        sys.exit(137)
    if mode == "crash-reproducer":  # the real clang crashes and writes a reproducer
        source = out + ".crash.c"
        with open(source, "w") as f:
            f.write("#pragma clang __debug crash\\nint x;\\n")
        os.execv(REAL, [REAL, "-c", source, "-o", out])
    if mode == "warn":
        print("fake: warning: something to look at", file=sys.stderr)
else:
    time.sleep(float(env("FAKE_SLEEP", "0")))
note("end")
os.execv(REAL, [REAL, *args])
"""


@pytest.fixture(scope="module")
def fake_compiler(tmp_path_factory: pytest.TempPathFactory, llvm: Llvm) -> Path:
    path = tmp_path_factory.mktemp("fake") / "fake-clang"
    path.write_text(f"#!{sys.executable}\n" + FAKE_COMPILER.format(real=llvm.clang))
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def dist_lto(dist_lto_cmd: list[str]) -> str:
    (exe,) = dist_lto_cmd
    return exe


def fake_env(tmp_path: Path, **settings: str) -> dict[str, str]:
    env = {**os.environ, "FAKE_LOG": str(tmp_path / "fake.log")}
    env.update({f"FAKE_{name.upper()}": value for name, value in settings.items()})
    return env


def fake_log(tmp_path: Path) -> list[tuple[str, int, str]]:
    log = tmp_path / "fake.log"
    if not log.exists():
        return []
    return [
        (e, int(pid), m) for e, pid, m in (ln.split(" ", 2) for ln in log.read_text().splitlines())
    ]


def captured(tmp_path: Path, link: DtltoLink, compiler: Path | None = None) -> tuple[Path, Path]:
    """A private copy of LLD's job file and inputs without the outputs: (directory, job file).
    With `compiler`, the job file names it as `common.args[0]`."""
    root = link.clone(tmp_path / "link")
    job_file = root / link.job_file
    if compiler is not None:
        doc = json.loads(job_file.read_text())
        doc["common"]["args"][0] = str(compiler)
        job_file.write_text(json.dumps(doc))
    return root, job_file


def distribute(
    dist_lto: str, root: Path, job_file: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([dist_lto, "distribute", *args, job_file.name], cwd=root,
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if ".tmp-" in p.name)


def job_for(job_file: Path, part: str) -> tuple[int, str, str]:
    """(1-based number, module, output) of the job whose module contains `part`."""
    (job,) = (j for j in read_job_file(str(job_file)).jobs if part in j.module)
    return job.number + 1, job.module, job.output


# ---------------------------------------------------------------------------------
# Through a real LLD link


@pytest.mark.parametrize(
    ("mode", "module", "problem"),
    [("fail", "twice", "exited with status 3"),
     ("empty", "add", "exited 0 but its output is empty (0 bytes)")],
)  # fmt: skip
def test_a_failing_job_fails_the_link_naming_the_job_and_leaving_nothing(
    mode: str, module: str, problem: str, tmp_path: Path, small_dtlto: DtltoLink,
    fake_compiler: Path, dist_lto: str,
) -> None:  # fmt: skip
    root = tmp_path / "link"
    root.mkdir()
    for name in ("main.o", "shout.o", "libm.a"):
        shutil.copy(small_dtlto.root / name, root / name)
    done = subprocess.run(
        [*small_dtlto.link, f"-fthinlto-distributor={dist_lto}", "-Xthinlto-distributor=distribute",
         "-Xthinlto-distributor=--no-cache", f"-Wl,--thinlto-remote-compiler={fake_compiler}"],
        cwd=root, capture_output=True, text=True, env=fake_env(tmp_path, mode=mode, module=module),
    )  # fmt: skip
    assert done.returncode != 0
    lines = done.stderr.splitlines()
    assert lines[0].startswith("dist-lto distribute: error: job ")
    assert f" (libm.a({module}.o at " in lines[0]
    assert lines[0].endswith(f"{fake_compiler} {problem}")
    assert lines[1].startswith(f"command: {fake_compiler} -c ")
    if mode == "fail":
        assert "fake: error: cannot compile libm.a(twice.o at " in done.stderr
    assert "distributor execution failed" in lines[-2]
    assert sorted(p.name for p in root.iterdir()) == ["libm.a", "main.o", "shout.o"]


def test_compiler_warnings_are_shown_and_the_link_succeeds(
    tmp_path: Path, small_dtlto: DtltoLink, fake_compiler: Path, dist_lto: str
) -> None:
    root, job_file = captured(tmp_path, small_dtlto, fake_compiler)
    done = distribute(dist_lto, root, job_file, "--no-cache", "--quiet",
                      env=fake_env(tmp_path, mode="warn", module="shout"))  # fmt: skip
    assert done.returncode == 0
    assert done.stderr == "fake: warning: something to look at\n"


# ---------------------------------------------------------------------------------
# On a captured job file: exactly what is left behind


@pytest.mark.parametrize(
    ("mode", "status", "problem"),
    [("fail", 3, "exited with status 3"),
     ("empty", 1, "exited 0 but its output is empty (0 bytes)"),
     ("missing", 1, "exited 0 but its output is missing"),
     ("garbage", 1, "exited 0 but its output is not an ELF object (13 bytes)"),
     ("crash", 137, "was killed by signal 9 (Killed)"),
     ("exit137", 137, "exited with status 137")],
)  # fmt: skip
def test_a_failed_job_leaves_no_output_and_no_temporary(
    mode: str, status: int, problem: str, tmp_path: Path, small_dtlto: DtltoLink,
    fake_compiler: Path, dist_lto: str,
) -> None:  # fmt: skip
    root, job_file = captured(tmp_path, small_dtlto, fake_compiler)
    number, module, output = job_for(job_file, "add.o")
    (root / output).write_bytes(b"stale output of an earlier run")
    done = distribute(dist_lto, root, job_file, "--no-cache", "--jobs=1",
                      env=fake_env(tmp_path, mode=mode, module="add"))  # fmt: skip
    assert done.returncode == status
    first = done.stderr.splitlines()[0]
    assert first == (f"dist-lto distribute: error: job {number} of 4 ({module} -> {output}):"
                     f" {fake_compiler} {problem}")  # fmt: skip
    assert not (root / output).exists()
    assert leftovers(root) == []
    for job in read_job_file(str(job_file)).jobs:
        path = root / job.output
        assert not path.exists() or object_problem(str(path)) is None


def test_the_first_failure_stops_running_jobs_and_starts_no_more(
    tmp_path: Path, small_dtlto: DtltoLink, fake_compiler: Path, dist_lto: str
) -> None:
    root, job_file = captured(tmp_path, small_dtlto, fake_compiler)
    jobs = read_job_file(str(job_file)).jobs
    biggest = max(jobs, key=lambda job: (root / job.module).stat().st_size)  # runs first
    env = fake_env(tmp_path, mode="fail", module=biggest.module, wait_starts="2", sleep="60")
    done = distribute(dist_lto, root, job_file, "--no-cache", "--jobs=2", env=env)
    assert done.returncode == 3
    assert f"({biggest.module} -> {biggest.output})" in done.stderr.splitlines()[0]
    log = fake_log(tmp_path)
    assert [event for event, _, _ in log] == ["start", "start"]  # and no "end"
    for _, pid, _ in log:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert leftovers(root) == []
    assert not any((root / job.output).exists() for job in jobs)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_stops_every_compiler_and_leaves_nothing(
    signum: int, tmp_path: Path, small_dtlto: DtltoLink, fake_compiler: Path, dist_lto: str
) -> None:
    root, job_file = captured(tmp_path, small_dtlto, fake_compiler)
    env = fake_env(tmp_path, sleep="60")
    proc = subprocess.Popen([dist_lto, "distribute", "--no-cache", "--jobs=2", "--quiet",
                             job_file.name],
                            cwd=root, env=env, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while len(fake_log(tmp_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum
    assert stderr == f"dist-lto distribute: error: stopped by signal {signum}\n"
    log = fake_log(tmp_path)
    assert [event for event, _, _ in log] == ["start", "start"]
    for _, pid, _ in log:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert leftovers(root) == []
    assert not list(root.glob("*.native.o"))


def test_a_module_spelled_unlike_its_index_fails_before_its_compiler_runs(
    tmp_path: Path, small_dtlto: DtltoLink, fake_compiler: Path, dist_lto: str
) -> None:
    root, job_file = captured(tmp_path, small_dtlto, fake_compiler)
    doc = json.loads(job_file.read_text())
    (job,) = (j for j in doc["jobs"] if j["inputs"][0] == "main.o")
    job["args"] = ["./main.o" if a == "main.o" else a for a in job["args"]]
    job["inputs"][0] = "./main.o"
    job_file.write_text(json.dumps(doc))
    done = distribute(dist_lto, root, job_file, "--no-cache", env=fake_env(tmp_path))
    assert done.returncode == 2
    assert "./main.o" in done.stderr.splitlines()[0]
    assert "module './main.o' is not in this index (it has 'main.o'" in done.stderr
    assert "./main.o" not in {module for _, _, module in fake_log(tmp_path)}


# ---------------------------------------------------------------------------------
# What the user sees


def test_a_terminal_gets_one_updating_progress_line(
    tmp_path: Path, small_dtlto: DtltoLink, dist_lto: str
) -> None:
    root, job_file = captured(tmp_path, small_dtlto)
    status, shown = run_on_terminal([dist_lto, "distribute", "--no-cache", job_file.name], root)
    assert status == 0
    assert shown.endswith("\r\x1b[Kdist-lto distribute: prog: 4/4 done, 0 cached, 0 running, "
                          + shown.rsplit(", ", 1)[1])  # fmt: skip
    assert shown.endswith(" s\r\n")
    assert shown.count("\n") == 1  # one line, updated in place


def test_a_pipe_gets_one_summary_line_quiet_none_and_verbose_every_job(
    tmp_path: Path, small_dtlto: DtltoLink, dist_lto: str
) -> None:
    root, job_file = captured(tmp_path, small_dtlto)
    cache = tmp_path / "cache"
    piped = distribute(dist_lto, root, job_file, f"--cache-dir={cache}")
    assert piped.returncode == 0
    (summary,) = piped.stderr.splitlines()
    assert re.fullmatch(r"dist-lto distribute: prog: 4 jobs, 0 cached, 0 failed, \d+\.\d\d s,"
                        r" slowest \S+ \d+\.\d\d s", summary), summary  # fmt: skip
    slowest = summary.split(", slowest ")[1].rsplit(" ", 2)[0]
    assert slowest in {job.module for job in read_job_file(str(job_file)).jobs}
    for output in root.glob("*.native.o"):
        output.unlink()
    quiet = distribute(dist_lto, root, job_file, f"--cache-dir={cache}", "--quiet")
    assert (quiet.returncode, quiet.stderr) == (0, "")
    for output in root.glob("*.native.o"):
        output.unlink()
    verbose = distribute(dist_lto, root, job_file, f"--cache-dir={cache}", "--verbose")
    lines = verbose.stderr.splitlines()
    assert lines[0].startswith(f"dist-lto distribute: 4 jobs from {job_file.name}, 2 at a time,"
                               f" cache {cache}, fork server /")  # fmt: skip
    assert re.search(r"\.so, compile server /\S+/cc1server/cc1server-[0-9a-f]+$", lines[0])
    jobs = read_job_file(str(job_file)).jobs
    listed = sorted(line.split("] ")[1].rsplit(" (", 1)[0] for line in lines[1:5])
    assert listed == sorted(f"cached {job.module} -> {job.output}" for job in jobs)
    assert lines[5].startswith("dist-lto distribute: prog: 4 jobs, 4 cached, 0 failed, ")
    assert len(lines) == 6


def test_the_documented_command_line_works_with_the_default_cache(
    tmp_path: Path, small_dtlto: DtltoLink, dist_lto: str
) -> None:
    """`-fthinlto-distributor=$(command -v dist-lto) -Xthinlto-distributor=distribute`."""
    root = tmp_path / "link"
    root.mkdir()
    for name in ("main.o", "shout.o", "libm.a"):
        shutil.copy(small_dtlto.root / name, root / name)
    shell = (" ".join(small_dtlto.link) + ' -fthinlto-distributor="$(command -v dist-lto)"'
             " -Xthinlto-distributor=distribute")  # fmt: skip
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg"),
           "PATH": f"{os.path.dirname(dist_lto)}{os.pathsep}{os.environ['PATH']}"}  # fmt: skip
    done = subprocess.run(["sh", "-c", shell], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert subprocess.run([root / "prog", "x"], capture_output=True, text=True).stdout == "4\n"
    entries = list((tmp_path / "xdg" / "dist-lto" / "v2" / "entries").glob("*/*"))
    assert len(entries) == 4


def test_an_unusable_cache_costs_a_warning_not_the_link(
    tmp_path: Path, small_dtlto: DtltoLink, dist_lto: str
) -> None:
    root, job_file = captured(tmp_path, small_dtlto)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    done = distribute(dist_lto, root, job_file, f"--cache-dir={blocker}", "--quiet")
    assert done.returncode == 0
    assert done.stderr == (f"dist-lto distribute: warning: result cache not used: {blocker}:"
                           " Not a directory\n")  # fmt: skip
    assert len(list(root.glob("*.native.o"))) == 4


def test_a_compiler_that_cannot_tell_its_version_runs_without_the_cache(
    tmp_path: Path, small_dtlto: DtltoLink, fake_compiler: Path, dist_lto: str
) -> None:
    root, job_file = captured(tmp_path, small_dtlto, fake_compiler)
    done = distribute(dist_lto, root, job_file, f"--cache-dir={tmp_path / 'cache'}", "--quiet",
                      env=fake_env(tmp_path, no_version="1"))  # fmt: skip
    assert done.returncode == 0
    assert done.stderr == (f"dist-lto distribute: warning: result cache not used: {fake_compiler}:"
                           " `--version` exited with status 1\n")  # fmt: skip
    assert len(list(root.glob("*.native.o"))) == 4
    assert not list((tmp_path / "cache").glob("v2/entries/*/*"))


def test_a_missing_compiler_fails_every_job_it_would_run(
    tmp_path: Path, small_dtlto: DtltoLink, dist_lto: str
) -> None:
    missing = tmp_path / "no" / "clang"
    root, job_file = captured(tmp_path, small_dtlto, missing)
    done = distribute(dist_lto, root, job_file, f"--cache-dir={tmp_path / 'cache'}")
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert lines[0] == (f"dist-lto distribute: warning: result cache not used: {missing}:"
                        " compiler not found (common.args[0] of the job file)")  # fmt: skip
    assert lines[1].startswith("dist-lto distribute: error: job ")
    assert lines[1].endswith(f": {missing}: cannot run: No such file or directory")
    assert leftovers(root) == [] and not list(root.glob("*.native.o"))


def test_jobs_start_biggest_module_first(
    tmp_path: Path, small_dtlto: DtltoLink, dist_lto: str
) -> None:
    root, job_file = captured(tmp_path, small_dtlto)
    done = distribute(dist_lto, root, job_file, "--no-cache", "--jobs=1", "--verbose")
    assert done.returncode == 0, done.stderr
    modules = [line.split(" compiled ")[1].split(" -> ")[0]
               for line in done.stderr.splitlines() if " compiled " in line]  # fmt: skip
    sizes = [(root / module).stat().st_size for module in modules]
    assert len(modules) == 4 and sizes == sorted(sizes, reverse=True)
    assert len(set(sizes)) > 1  # the order means something


def test_the_cache_is_pruned_to_its_limit_after_a_link_that_filled_it(
    tmp_path: Path, small_dtlto: DtltoLink, dist_lto: str
) -> None:
    root, job_file = captured(tmp_path, small_dtlto)
    cache = tmp_path / "cache"
    sizes = sorted(p.stat().st_size for p in small_dtlto.root.glob("*.native.o"))
    limit = sizes[0]  # room for the smallest object only
    # One job at a time, biggest first: the smallest object is stored last, the newest.
    done = distribute(dist_lto, root, job_file, f"--cache-dir={cache}", "--jobs=1",
                      f"--cache-max-size={limit}", "--verbose")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"pruned 3 cache entries (limit {limit})" in done.stderr
    entries = list((cache / "v2" / "entries").glob("*/*/0"))
    assert len(entries) == 1 and entries[0].stat().st_size == limit
    assert len(list(root.glob("*.native.o"))) == 4  # the link's outputs are untouched


def test_a_cached_object_with_one_byte_changed_is_never_linked(
    tmp_path: Path, small_dtlto: DtltoLink, dist_lto: str, llvm: Llvm
) -> None:
    """A byte changed at the start of main's code (a disk fault, a bad copy): the object
    still looks like one, and linked it would print a wrong answer or crash."""
    root = tmp_path / "link"
    root.mkdir()
    for name in ("main.o", "shout.o", "libm.a"):
        shutil.copy(small_dtlto.root / name, root / name)
    cache = tmp_path / "cache"
    link = [*small_dtlto.link, f"-fthinlto-distributor={dist_lto}",
            "-Xthinlto-distributor=distribute", "-Xthinlto-distributor=--quiet",
            f"-Xthinlto-distributor=--cache-dir={cache}"]  # fmt: skip
    first = subprocess.run(link, cwd=root, capture_output=True, text=True)
    assert (first.returncode, first.stderr) == (0, "")
    answer = subprocess.run([root / "prog", "x"], capture_output=True, text=True)
    assert (answer.returncode, answer.stdout) == (0, "4\n")
    objects = list((cache / "v2" / "entries").glob("*/*/0"))
    (main,) = [p for p in objects if "main" in subprocess.run(
        [llvm.nm, "--defined-only", p], capture_output=True, text=True).stdout]  # fmt: skip
    data = main.read_bytes()
    text = 0x40  # the first section's bytes follow the ELF header
    main.write_bytes(data[:text] + bytes([data[text] ^ 0xFF]) + data[text + 1 :])
    assert object_problem(str(main)) is None
    (root / "prog").unlink()
    second = subprocess.run(link, cwd=root, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr
    (warning,) = second.stderr.splitlines()
    assert warning == (
        "dist-lto distribute: warning: 1 damaged cached result not used, the jobs ran again:"
        f" {main.parent}: output 0 differs from its recorded size and SHA-256"
    )
    answer = subprocess.run([root / "prog", "x"], capture_output=True, text=True)
    assert (answer.returncode, answer.stdout) == (0, "4\n")
    assert main.read_bytes() == data  # compiled again and stored again
    third = subprocess.run(link, cwd=root, capture_output=True, text=True)
    assert (third.returncode, third.stderr) == (0, "")


def test_a_compilers_identity_is_remembered_per_user_not_per_cache_directory(
    tmp_path: Path, small_dtlto: DtltoLink, dist_lto: str
) -> None:
    """A new --cache-dir (a cold cache) must not cost a `--version` run per compiler."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    for cache in ("first", "second"):
        root, job_file = captured(tmp_path / cache, small_dtlto)
        done = distribute(dist_lto, root, job_file, f"--cache-dir={tmp_path / cache / 'cache'}",
                          "--quiet", env=env)  # fmt: skip
        assert (done.returncode, done.stderr) == (0, "")
        if cache == "first":
            (memo,) = (tmp_path / "xdg" / "dist-lto" / "v2" / "compilers").iterdir()
            remembered = memo.stat().st_mtime_ns
    assert memo.stat().st_mtime_ns == remembered  # read, not computed and written again
    assert not list(tmp_path.glob("*/cache/v2/compilers"))
    assert len(list((tmp_path / "second" / "cache" / "v2" / "entries").glob("*/*"))) == 4


def test_a_non_ascii_module_path_is_refused_before_any_backend_runs(
    tmp_path: Path, small_dtlto: DtltoLink, dist_lto: str
) -> None:
    """LLD 22 writes `shoüt.o` into the indexes as garbage (llvm-project issue 194318)."""
    root = tmp_path / "link"
    root.mkdir()
    for name in ("main.o", "libm.a"):
        shutil.copy(small_dtlto.root / name, root / name)
    shutil.copy(small_dtlto.root / "shout.o", root / "shoüt.o")
    link = [a if a != "shout.o" else "shoüt.o" for a in small_dtlto.link]
    in_process = subprocess.run(link, cwd=root, capture_output=True, text=True)
    assert in_process.returncode == 0, in_process.stderr
    (root / "prog").unlink()
    done = subprocess.run([*link, f"-fthinlto-distributor={dist_lto}",
                           "-Xthinlto-distributor=distribute", "-Xthinlto-distributor=--no-cache"],
                          cwd=root, capture_output=True, text=True)  # fmt: skip
    assert done.returncode != 0
    first = done.stderr.splitlines()[0]
    assert first.startswith("dist-lto distribute: error: prog.")
    assert first.endswith(": module path 'shoüt.o' is not ASCII; LLVM 22 corrupts such paths in"
                          " ThinLTO index files (llvm-project issue 194318): give the object"
                          " an ASCII path, or link with in-process ThinLTO")  # fmt: skip
    assert "command:" not in done.stderr  # no job ran
    assert sorted(p.name for p in root.iterdir()) == ["libm.a", "main.o", "shoüt.o"]


def test_a_crashing_compiler_leaves_no_reproducer_in_the_temporary_directory(
    tmp_path: Path, small_dtlto: DtltoLink, fake_compiler: Path, dist_lto: str
) -> None:
    root, job_file = captured(tmp_path, small_dtlto, fake_compiler)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**fake_env(tmp_path, mode="crash-reproducer", module="add"), "TMPDIR": str(temporary)}
    done = distribute(dist_lto, root, job_file, "--no-cache", env=env)
    assert done.returncode != 0
    assert "diagnostic msg: " in done.stderr  # clang wrote its reproducer files...
    assert list(temporary.iterdir()) == []  # ...where they went with the distribution
