"""The opt worker under real Buck2: opt actions run locally go to one long-lived
`dist-lto opt-worker`, and behave as `dist-lto opt` does (objects, failures), while
Buck2 decides how many run at once and when the worker ends.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.real_buck2 import Buck2, Ran, scratch_project

pytestmark = pytest.mark.slow

MODULES = 8
"""Modules of the heavy program: each one's backend takes most of a second."""


def heavy_module(k: int, functions: int = 120) -> str:
    """A C module whose ThinLTO backend takes ~0.8 s at -O2 (loops to vectorise)."""
    body = []
    for i in range(functions):
        body.append(
            f"static double work_{i}(const double *a, const double *b, int n) {{\n"
            f"  double s = {i + k}.0;\n"
            f"  for (int j = 0; j < n; j++) {{\n"
            f"    double x = a[j] * b[(j * {i % 7 + 1}) % n] + s;\n"
            f"    for (int q = 0; q < {i % 5 + 2}; q++)\n"
            f"      x = x * 1.000{i % 9 + 1} - b[(j + q) % n] / (1.0 + a[q % n] * a[q % n]);\n"
            f"    s += x > {i}.5 ? x : -x;\n"
            f"  }}\n  return s;\n}}\n"
        )
    calls = "".join(f"  s += work_{i}(a, b, n);\n" for i in range(functions))
    return "".join(body) + (
        f"double all_{k}(const double *a, const double *b, int n) {{\n"
        f"  double s = 0;\n{calls}  return s;\n}}\n"
    )


def add_heavy(
    buck2: Buck2,
    package: str,
    *,
    linker_flags: tuple[str, ...] = (),
    functions: tuple[int, ...] = (120,) * MODULES,
) -> str:
    """A dist_lto binary of MODULES heavy modules in `package` (module k of
    `functions[k]` functions); its target."""
    pkg = buck2.project / package
    pkg.mkdir(parents=True, exist_ok=True)
    decls = "".join(
        f"double all_{k}(const double *, const double *, int);\n" for k in range(MODULES)
    )
    sums = "".join(f"  s += all_{k}(a, b, 4);\n" for k in range(MODULES))
    (pkg / "main.c").write_text(
        f"#include <stdio.h>\n{decls}int main(void) {{\n"
        f"  double a[4] = {{1, 2, 3, 4}}, b[4] = {{4, 3, 2, 1}}, s = 0;\n{sums}"
        '  printf("%.3f\\n", s);\n  return 0;\n}\n'
    )
    for k in range(MODULES):
        (pkg / f"m{k}.c").write_text(heavy_module(k, functions[k]))
    srcs = ", ".join(f'"m{k}.c"' for k in range(MODULES))
    flags = ", ".join(f'"{f}"' for f in linker_flags)
    (pkg / "BUCK").write_text(
        f'cxx_binary(name = "heavy", srcs = ["main.c", {srcs}], dist_lto = True,'
        f" linker_flags = [{flags}])\n"
    )
    return f"//{package}:heavy"


@pytest.fixture(scope="module")
def buck2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Buck2]:
    session = Buck2(scratch_project(tmp_path_factory.mktemp("worker"), examples=True))
    yield session
    session.kill()


def build_id(stderr: str) -> str:
    found = re.search(r"Build ID: (\S+)", stderr)
    assert found, stderr[-2000:]
    return found.group(1)


def worker_logs(build: str) -> list[str]:
    """The logs (stderr) of the workers Buck2 started for build `build`."""
    return [p.read_text() for p in sorted(Path("/tmp/buck2_worker").glob(f"{build}-*/stderr"))]


def opt_ran(buck2: Buck2) -> list[Ran]:
    return [r for r in buck2.what_ran(worker_starts=True) if r.category == "thin_lto_opt"]


def out_of(ran: Ran) -> str:
    return ran.argv[ran.argv.index("--out") + 1]


def processes_in(project: Path) -> dict[int, str]:
    """pid -> command line of every live process whose working directory is `project`."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if Path(os.readlink(entry / "cwd")) != project:
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if cmdline:
            found[int(entry.name)] = cmdline
    return found


def wait_until(condition, timeout: float = 120, what: str = "") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Background:
    """A `buck2 build` running while the test acts; its stderr gathered as it comes."""

    def __init__(self, buck2: Buck2, *args: str) -> None:
        self.proc = subprocess.Popen(
            buck2.command("build", "--console=simple", *args),
            cwd=buck2.project,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "BUCK2_NO_INTERACTIVE_CONSOLE": "1"},
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def build_id(self) -> str:
        wait_until(lambda: re.search(r"Build ID: \S+", "".join(self.lines)), what="a build id")
        return build_id("".join(self.lines))

    def finish(self) -> tuple[int, str]:
        status = self.proc.wait(timeout=600)
        self.reader.join(timeout=60)
        return status, "".join(self.lines)


def test_opt_actions_run_in_one_worker_and_equal_the_command_byte_for_byte(
    buck2: Buck2,
) -> None:
    targets = [
        "//examples/c:wordstats",
        "//examples/cpp:shapes_report",
        "//examples/mixed:checksums",
    ]
    proc = buck2.build(*targets)
    ran = opt_ran(buck2)
    kinds = [r.executor for r in ran]
    assert set(kinds) == {"Worker"}, kinds  # the largest module's too, unqueued
    # One worker for the build, started once, by a link's `--ready` request (listed
    # twice), before any backend: each link's plan action waits for one.
    ready = [r for r in buck2.what_ran(worker_starts=True) if r.category == "thin_lto_opt_ready"]
    assert sorted(r.executor for r in ready) == ["Worker"] * len(targets) + ["WorkerInit"]
    assert {r.target for r in ready} == {f"root{t}" for t in targets}
    through_worker = [r for r in ran if r.executor != "WorkerInit"]
    (log,) = worker_logs(build_id(proc.stderr))
    assert "serving opt requests" in log

    # Without the worker: the command every opt action ran before, in a new daemon.
    plain = Buck2(buck2.project, config={**buck2.config, "dist_lto.opt_worker": "false"})
    try:
        plain.build(*targets)
        by_command = opt_ran(plain)
        assert {r.executor for r in by_command} == {"Local"}
        assert "opt" in by_command[0].argv and "--input" in by_command[0].argv
        theirs = {
            out_of(r).replace(plain.isolation_dir, "ISO"): plain.project / out_of(r)
            for r in by_command
        }
        ours = {
            out_of(r).replace(buck2.isolation_dir, "ISO"): buck2.project / out_of(r)
            for r in through_worker
        }
        assert sorted(ours) == sorted(theirs)
        for name, path in ours.items():
            assert path.read_bytes() == theirs[name].read_bytes(), name
        # Each link's plan ran in the worker's planner; as the command, the same plans.
        planned = [r for r in buck2.what_ran() if r.category == "thin_lto_plan"]
        assert [r.executor for r in planned] == ["Worker"] * len(targets)
        assert [r.argv[0] for r in planned] == ["plan"] * len(targets)
        assert {r.executor for r in plain.what_ran() if r.category == "thin_lto_plan"} == {"Local"}
        for r in planned:
            meta = Path(r.argv[1])
            for name in ("link_plan.json", "final_link.args"):
                mine = (buck2.project / meta.parent / name).read_text()
                other = (plain.project / str(meta.parent).replace(
                    buck2.isolation_dir, plain.isolation_dir) / name).read_text()  # fmt: skip
                assert mine.replace(buck2.isolation_dir, "ISO") == other.replace(
                    plain.isolation_dir, "ISO"), (r.target, name)  # fmt: skip
        # Each final link ran in the worker, the linker itself on the line the driver
        # found while the compiles ran; as the command (the driver), the same programs.
        linked = [r for r in buck2.what_ran() if r.category == "thin_lto_link"]
        assert [r.executor for r in linked] == ["Worker"] * len(targets)
        assert {r.executor for r in plain.what_ran() if r.category == "thin_lto_link"} == {"Local"}
        assert re.search(r": links run \S+/ld\.lld directly", log), log
        linked_by_worker, linked_by_command = buck2.outputs(*targets), plain.outputs(*targets)
        for target in targets:
            label = f"root{target}"
            program = linked_by_worker[label].read_bytes()
            assert program == linked_by_command[label].read_bytes(), target
    finally:
        plain.kill()


def outs_of(ran: Ran) -> list[str]:
    return [ran.argv[i + 1] for i, arg in enumerate(ran.argv) if arg == "--out"]


@pytest.mark.parametrize(
    "batching",
    [
        {"dist_lto.opt_batch_bytes": "32768"},
        # A link's backends in one queued action, compiled side by side in the worker.
        {"dist_lto.opt_batch_bytes": "1000000000", "dist_lto.opt_queue": "true"},
    ],
    ids=["small-modules", "one-queued-batch-per-link"],
)
def test_small_modules_share_opt_actions_whose_objects_equal_one_action_per_module(
    buck2: Buck2, batching: dict[str, str]
) -> None:
    targets = ["//examples/c:wordstats", "//examples/cpp:shapes_report"]
    per_module = Buck2(buck2.project, config=buck2.config)  # a new isolation dir: all run
    batched = Buck2(buck2.project, config={**buck2.config, **batching})
    try:
        per_module.build(*targets)
        single = {out.replace(per_module.isolation_dir, "ISO"): per_module.project / out
                  for r in opt_ran(per_module) if r.executor != "WorkerInit"
                  for out in outs_of(r)}  # fmt: skip
        batched.build(*targets)
        ran = [r for r in opt_ran(batched) if r.executor != "WorkerInit"]
        assert {r.executor for r in ran} == {"Worker"}
        shared = [r for r in ran if len(outs_of(r)) > 1]
        assert shared, [r.identifier for r in ran]
        for r in shared:  # named after its first module and how many follow
            assert r.identifier.endswith(f" +{len(outs_of(r)) - 1}"), r.identifier
        ours = {out.replace(batched.isolation_dir, "ISO"): batched.project / out
                for r in ran for out in outs_of(r)}  # fmt: skip
        assert len(ran) < len(ours)
        assert sorted(ours) == sorted(single)
        for name, path in ours.items():
            assert path.read_bytes() == single[name].read_bytes(), name
        outputs = batched.outputs(*targets)
        for target in targets:
            done = subprocess.run([outputs[f"root{target}"]], capture_output=True, timeout=60,
                                  input=b"one two two\n")  # fmt: skip
            assert done.returncode == 0, (target, done.stderr)
    finally:
        per_module.kill()
        batched.kill()


def test_a_failing_backend_fails_its_action_with_the_commands_line_and_clangs_status(
    buck2: Buck2,
) -> None:
    # The index step takes any -march; the backends' clang rejects it (status 1).
    add_heavy(buck2, "bad_cpu", linker_flags=("-march=no-such-cpu",))
    failed = buck2.build("//bad_cpu:heavy", check=False)
    assert failed.returncode != 0
    line = re.compile(r"dist-lto opt: error: \S+\.o: /\S+/clang exited with status 1")
    assert line.search(failed.stderr), failed.stderr[-3000:]
    assert "unknown target CPU 'no-such-cpu'" in failed.stderr
    assert re.search(r"exit code 1\b", failed.stderr), failed.stderr[-3000:]
    assert any(r.executor in ("Worker", "WorkerInit") for r in opt_ran(buck2))

    plain = buck2("build", "--console=simple", "-c", "dist_lto.opt_worker=false",
                  "//bad_cpu:heavy", check=False)  # fmt: skip
    assert plain.returncode != 0
    assert line.search(plain.stderr) and re.search(r"exit code 1\b", plain.stderr)


def test_concurrency_follows_buck2s_local_slots(buck2: Buck2) -> None:
    for slots in (1, 2):
        target = add_heavy(buck2, f"slots{slots}")
        proc = buck2("build", "--console=simple", "-j", str(slots), target)
        (log,) = worker_logs(build_id(proc.stderr))
        peaks = [int(n) for n in re.findall(r"(\d+) requests? at once", log)]
        # The slots, and the link's largest module, which takes none (docs/buck2.md)...
        assert max(peaks) == slots + 1, log
        # ... and compiles in one of theirs.
        compiling = [int(n) for n in re.findall(r"(\d+) compiling at once", log)]
        assert max(compiling) == slots, log


def test_queued_opt_actions_reach_the_worker_at_once_and_compile_largest_first(
    buck2: Buck2,
) -> None:
    # Modules of different sizes, in no order of size; main.c's backend is made slow too,
    # so that whichever starts first, every request is in before it ends.
    target = add_heavy(buck2, "queued", functions=(60, 20, 100, 40, 90, 30, 80, 50))
    main = buck2.project / "queued" / "main.c"
    main.write_text(main.read_text() + heavy_module(MODULES, 45))
    proc = buck2("build", "--console=simple", "--show-full-json-output",
                 "-c", "dist_lto.opt_queue=true", "-c", "build.threads=1", target)  # fmt: skip
    (log,) = worker_logs(build_id(proc.stderr))
    ran = [r for r in opt_ran(buck2) if r.target == f"root{target}"]
    assert {r.executor for r in ran} <= {"Worker", "WorkerInit"}
    assert all("--unweighted" in r.argv for r in ran)
    # Every backend (the heavy modules' and main.c's) at once, though Buck2 runs one
    # action at a time...
    peaks = [int(n) for n in re.findall(r"(\d+) requests? at once", log)]
    assert max(peaks) == MODULES + 1, log
    # ... compiled one at a time (`[build] threads`), largest module first once queued:
    # the first to arrive starts before the others are there, and on a loaded machine
    # one more may start before the last request is in.
    compiling = [int(n) for n in re.findall(r"(\d+) compiling at once", log)]
    assert max(compiling) == 1, log
    done = sorted(ran, key=lambda r: (buck2.project / out_of(r)).stat().st_mtime_ns)
    sizes = [(buck2.project / r.argv[r.argv.index("--input") + 1]).stat().st_size for r in done]
    assert max(sizes) in sizes[:3], sizes
    assert sizes[2:] == sorted(sizes[2:], reverse=True), sizes
    exe = json.loads(proc.stdout)[f"root{target}"]
    assert subprocess.run([exe], capture_output=True, timeout=60).returncode == 0


def test_a_worker_killed_mid_build_fails_only_its_actions_and_the_next_build_succeeds(
    buck2: Buck2,
) -> None:
    target = add_heavy(buck2, "killed")
    outputs = buck2.project / "buck-out" / buck2.isolation_dir
    build = Background(buck2, "-j", "2", target)
    build_dir = build.build_id()

    def worker_pid() -> int | None:
        for log in worker_logs(build_dir):
            found = re.search(r"\(pid (\d+),", log)
            if found:
                return int(found.group(1))
        return None

    def done() -> list[Path]:
        while True:
            try:  # the running build removes directories (the index step's staging) as it goes
                return list(outputs.glob("**/killed/**/opt/m*.o"))
            except FileNotFoundError:
                continue

    wait_until(lambda: worker_pid() is not None and len(done()) >= 2, what="two opt objects")
    pid = worker_pid()
    assert pid is not None
    environ = dict(
        v.split("=", 1) for v in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in v
    )
    (private,) = Path(environ.get("TMPDIR") or "/tmp").glob(f"dist-lto-worker-{pid}-*")
    os.kill(pid, signal.SIGKILL)
    status, stderr = build.finish()
    assert status != 0
    # Buck2's own line for an action whose worker died: which of the two depends on
    # whether it sees the exit or the broken connection first.
    died = re.compile(r"Worker exited while running command|Error sending ExecuteCommand to worker")
    assert died.search(stderr), stderr[-3000:]
    failed = re.findall(r"Action failed: \S+ \S+ \(thin_lto_opt ([^)]*)\)", stderr)
    # Only what it was running: at most one opt action per local slot, and the link's
    # largest module, which takes none (docs/buck2.md).
    assert 1 <= len(set(failed)) <= 2 + 1, failed
    assert all(re.search(r":(m\d|main)\.o$", name) for name in failed), failed
    # An object can be on disk while its action's reply died with the worker.
    finished = {p.name for p in done()} - {name.rsplit(":", 1)[-1] for name in failed}
    # Its fork servers and compilers go with it.
    wait_until(lambda: not [c for c in processes_in(buck2.project).values() if "clang" in c],
               timeout=10, what="the killed worker's compilers to end")  # fmt: skip

    # The killed worker could not remove its directory (its compilers' TMPDIR, where its
    # backends write): the next worker does.
    assert private.is_dir()
    buck2.build(target)
    rerun = {r.identifier.rsplit(":", 1)[-1] for r in opt_ran(buck2)}
    # What finished before the kill is not run again.
    assert rerun and not rerun & finished, (rerun, finished)
    assert not private.exists()


def test_buck2_kill_mid_build_leaves_no_worker_and_no_compiler(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    buck2 = Buck2(scratch_project(tmp_path_factory.mktemp("worker-kill")))
    target = add_heavy(buck2, "heavy")
    build = Background(buck2, target)
    build_dir = build.build_id()
    wait_until(lambda: any("1 request at once" in log for log in worker_logs(build_dir)),
               what="the worker's first request")  # fmt: skip
    assert any("opt-worker" in c for c in processes_in(buck2.project).values())
    buck2.kill()
    build.finish()
    wait_until(lambda: not processes_in(buck2.project), timeout=15,
               what="every process of the build to end")  # fmt: skip


UNRELATED = "int unrelated(int x);\nint unrelated(int x) { return 3 * x; }\n"


def test_an_edit_that_changes_nothing_imported_reuses_objects_and_equals_the_command(
    buck2: Buck2,
) -> None:
    pkg = buck2.project / "reuse"
    pkg.mkdir()
    (pkg / "main.c").write_text(
        "#include <stdio.h>\nint twice(int);\nint add(int, int);\nint main(int c, char **v) {\n"
        + "".join(f'  printf("%d\\n", twice(c + {i}) + add(c, {i}));\n' for i in range(40))
        + "  return 0;\n}\n"
    )
    (pkg / "twice.c").write_text("int add(int, int);\nint twice(int x) { return add(x, x); }\n")
    lib = "int add(int a, int b) { return a + b; }\n"
    (pkg / "lib.c").write_text(lib)
    (pkg / "BUCK").write_text(
        'cxx_binary(name = "app", srcs = ["main.c", "twice.c", "lib.c"], dist_lto = True)\n'
    )
    buck2.build("//reuse:app")
    (pkg / "lib.c").write_text(lib + UNRELATED)
    proc = buck2.build("//reuse:app")
    (log,) = worker_logs(build_id(proc.stderr))
    reused = re.findall(r"(\S+): the object of its last run, reused", log)
    rerun = {Path(out_of(r)).name for r in opt_ran(buck2) if r.executor == "Worker"}
    assert rerun == {"main.o", "twice.o", "lib.o"}, rerun
    assert sorted(Path(out).name for out in reused) == ["main.o", "twice.o"], log
    app = buck2.outputs("//reuse:app")["root//reuse:app"]
    assert subprocess.run([app], capture_output=True, text=True).stdout.startswith("3\n")

    # The same two builds without the worker: every object the same.
    plain = Buck2(buck2.project, config={**buck2.config, "dist_lto.opt_worker": "false"})
    try:
        (pkg / "lib.c").write_text(lib)
        plain.build("//reuse:app")
        (pkg / "lib.c").write_text(lib + UNRELATED)
        plain.build("//reuse:app")
        for out in reused:
            theirs = plain.project / out.replace(buck2.isolation_dir, plain.isolation_dir)
            assert (buck2.project / out).read_bytes() == theirs.read_bytes(), out
    finally:
        plain.kill()


def test_backends_run_ahead_on_a_links_first_build_give_the_same_program_and_not_after(
    buck2: Buck2,
) -> None:
    # At -j 1 a compile's end leaves its turn spare until Buck2 sends the next request;
    # once the largest module (sent beside the others, without a slot) is done, no
    # request waits for it, and the worker compiles a backend not yet asked for.
    target = add_heavy(buck2, "ahead", functions=(60, 20, 100, 40, 90, 30, 80, 50))
    proc = buck2("build", "--console=simple", "--show-full-json-output", "-j", "1", target)
    (log,) = worker_logs(build_id(proc.stderr))
    ahead = re.findall(r"(\S+): compiled ahead of its request", log)
    assert ahead, log
    compiling = [int(n) for n in re.findall(r"(\d+) compiling at once", log)]
    assert max(compiling) == 1, log  # never more than Buck2's one slot
    exe = Path(json.loads(proc.stdout)[f"root{target}"])
    assert subprocess.run([exe], capture_output=True, timeout=60).returncode == 0

    # The same build, nothing run ahead, in a new daemon: the same objects and program.
    plain = Buck2(buck2.project, config={**buck2.config, "dist_lto.opt_run_ahead": "false"})
    try:
        done = plain("build", "--console=simple", "--show-full-json-output", "-j", "1", target)
        (plain_log,) = worker_logs(build_id(done.stderr))
        assert "compiled ahead" not in plain_log
        for out in ahead:
            theirs = plain.project / out.replace(buck2.isolation_dir, plain.isolation_dir)
            assert (buck2.project / out).read_bytes() == theirs.read_bytes(), out
        theirs_exe = Path(json.loads(done.stdout)[f"root{target}"])
        assert exe.read_bytes() == theirs_exe.read_bytes()
    finally:
        plain.kill()

    # The link's next build reruns some backends; none runs ahead of its request.
    m0 = buck2.project / "ahead" / "m0.c"
    m0.write_text(m0.read_text() + UNRELATED)
    again = buck2("build", "--console=simple", "-j", "1", target)
    (log,) = worker_logs(build_id(again.stderr))
    assert "compiled ahead" not in log, log
