#!/usr/bin/env python3
"""The fuzz campaign: hostile inputs for prepare, plan, opt and distribute, counted.

Feeds mutated and generated archives to `prepare`, meta files (and manifests and
index-step outputs) to `plan`, link flag files (and indexes and command lines) to
`opt`, and job files (and their inputs) to `distribute`; see `fuzz_cases.py`. Each
input runs in a fresh directory (`fuzz_sandbox.py`), in-process in a forked child
(most inputs: no interpreter start-up) or, for a random share, as a real
`python -m dist_lto` process, with a per-input timeout. It counts, per tool:

- tracebacks: output holding "Traceback (most recent call last)" or the CLI's
  "internal error:" (bad input must be exit 2, never an unexpected exception);
- hangs: inputs still running at the timeout (the whole process group is killed);
- escapes: a file created, changed or removed outside the outputs the input declares
  (and `out/`, `tmp/`), or a write outside the sandbox (blocked by a read-only
  mount namespace and seen as "Read-only file system");
- clobbered inputs: a declared output that names an input file and overwrote it;
- leftovers: a temporary file left after the tool exited; half-written outputs: a
  failed run left a declared output behind;
- unexpected statuses: exit 1 (or another status) that is neither success, bad
  input (2) nor a compiler's status passed through;
- wrong results: a run that succeeded but whose outputs are inconsistent, or an
  unchanged seed that failed.

The first failures of each kind are kept under WORKDIR/findings with the input, the
command and the output; `--case TOOL:N` reruns one input and shows everything.

Usage: .venv/bin/python fuzz/fuzz.py --count 100000 [--workers 2] [--timeout 30]
"""

from __future__ import annotations

import argparse
import os
import re
import select
import shutil
import stat
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import orjson

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fuzz_corpus
import fuzz_sandbox
from dist_lto import cli
from dist_lto.backend import object_problem
from fuzz_cases import TOOLS, Case, make_case
from fuzz_sandbox import INTERNAL, READ_ONLY, TRACEBACK, Outcome

SHARES = {"prepare": 0.40, "plan": 0.30, "opt": 0.15, "distribute": 0.15}
"""How `--count` splits over the tools (the compiler-running tools cost most per input)."""

MUST_BE_ZERO = ("traceback", "hang", "escape")
KINDS = (*MUST_BE_ZERO, "clobbered input", "leftover temporary", "half-written output",
         "unexpected status", "wrong result")  # fmt: skip
_TEMPORARY = re.compile(r"^\..+\.tmp-\d+-[0-9a-f]{8}$")
"""`fsutil.temp_path_for`'s names."""
_PASSED_THROUGH = ("exited with status", "was killed by", "stopped by signal", "exited 0 but")
"""How our messages say that a compiler's or linker's own status is passed on, or that
it exited 0 without a complete object (exit 1 by design: docs/opt.md, Strictness)."""


@dataclass
class Settings:
    workdir: Path
    timeout: float
    subprocess_share: float
    keep: int
    seed: int


def _normal(path: str, cwd: str, root: str) -> str | None:
    """`path` (as an input spells it) relative to `cwd` and normalised; None when it
    leaves the sandbox `root`."""
    absolute = os.path.normpath(os.path.join(cwd, path))
    if absolute != root and not absolute.startswith(root + "/"):
        return None
    return os.path.relpath(absolute, cwd)


def check(
    case: Case, outcome: Outcome, changes: fuzz_sandbox.Changes, cwd: str, root: str
) -> list[tuple[str, str]]:
    """Every problem with one run, as (kind, detail)."""
    problems: list[tuple[str, str]] = []
    if outcome.hung:
        problems.append(("hang", "still running at the timeout"))
    if TRACEBACK in outcome.output or INTERNAL in outcome.output:
        problems.append(("traceback", outcome.output.strip().splitlines()[-1][:300]))
    outputs = [
        o
        for o in (_normal(p, cwd, root) for p in case.outputs if p and "\0" not in p)
        if o is not None
    ]
    outside = [p for p in case.outputs if p and "\0" not in p and _normal(p, cwd, root) is None]
    writable = outputs + case.scratch
    if READ_ONLY in outcome.output and not outside:
        problems.append(
            (
                "escape",
                "a write outside the sandbox was blocked: " + _line_with(outcome.output, READ_ONLY),
            )
        )

    def rel(p: str) -> str:
        return os.path.relpath(os.path.join(root, p), cwd)

    for p in map(rel, changes.created):
        if not (fuzz_sandbox.under(p, writable) or fuzz_sandbox.ancestor_of(p, writable)):
            problems.append(("escape", f"created {p}"))
        if not outcome.hung and _TEMPORARY.match(os.path.basename(p)):
            problems.append(("leftover temporary", p))
    for what, paths in (("changed", changes.modified), ("removed", changes.removed)):
        for p in map(rel, paths):
            if fuzz_sandbox.under(p, case.scratch):
                continue
            kind = "clobbered input" if fuzz_sandbox.under(p, outputs) else "escape"
            problems.append((kind, f"{what} {p}"))
    blocked = READ_ONLY in outcome.output and outside  # a declared output outside: refused
    passed_on = any(s in outcome.output for s in _PASSED_THROUGH)
    if outcome.status not in (0, 2) and not outcome.hung and not blocked and not passed_on:
        problems.append(("unexpected status", f"{outcome.status}: {outcome.output.strip()[-300:]}"))
    if outcome.status != 0 and not outcome.hung:
        fresh = set(map(rel, changes.created + changes.modified))
        for declared in case.clean_on_failure:
            p = _normal(declared, cwd, root) if declared and "\0" not in declared else None
            if p is None:
                continue
            left = sorted(
                f
                for f in fresh
                if fuzz_sandbox.under(f, [p]) and os.path.isfile(os.path.join(cwd, f))
            )
            if left:
                problems.append(("half-written output", f"failed, but left {left[:3]}"))
    if case.oracle and outcome.status != 0 and not outcome.hung:
        problems.append(("wrong result", f"an unchanged seed failed: {outcome.output[-300:]}"))
    if outcome.status == 0:
        wrong = _result_problem(case, cwd)
        if wrong:
            problems.append(("wrong result", wrong))
    return problems


def _line_with(text: str, needle: str) -> str:
    return next((line for line in text.splitlines() if needle in line), "")[:300]


def _result_problem(case: Case, cwd: str) -> str | None:
    """Whether a successful run's outputs hold together (None: they do)."""
    argv = case.argv
    try:
        if case.tool == "prepare":
            manifest = argv[argv.index("--manifest-out") + 1]
            doc = orjson.loads(Path(cwd, manifest).read_bytes())
            base = os.path.dirname(os.path.join(cwd, manifest))
            for m in doc["members"]:
                size = os.stat(os.path.join(base, m["path"])).st_size
                if size != m["size"]:
                    return f"member {m['name']!r}: {size} bytes, manifest says {m['size']}"
        elif case.tool == "plan":
            meta = orjson.loads(Path(cwd, "meta.json").read_bytes())
            plans = [meta["link_plan_output"]] + [
                item["plan_output"]
                for group in meta["groups"]
                for item in group["linkables"]
                if item["kind"] in ("object", "archive")
            ]
            for plan in plans:
                if Path(cwd, plan).is_file():  # not a device written through
                    orjson.loads(Path(cwd, plan).read_bytes())
        elif case.tool == "opt" and "--print-command" not in argv:
            out = argv[argv.index("--out") + 1]
            if not os.path.isfile(os.path.join(cwd, out)):  # a device written through
                return None
            problem = object_problem(os.path.join(cwd, out))
            if problem:
                return f"{out} {problem}"
        elif case.tool == "distribute":
            job = orjson.loads(Path(cwd, argv[-1]).read_bytes())
            for entry in job["jobs"]:
                problem = object_problem(os.path.join(cwd, entry["outputs"][0]))
                if problem:
                    return f"{entry['outputs'][0]} {problem}"
        for path, data in case.expected.items():
            if Path(cwd, path).read_bytes() != data:
                return f"{path} differs from what a clean run writes"
    except (OSError, ValueError, KeyError, TypeError, IndexError) as err:
        return f"outputs do not hold together: {type(err).__name__}: {err}"
    return None


# ---------------------------------------------------------------------------------
# One input


def _materialise(case: Case, cwd: str) -> None:
    for path, data in case.files.items():
        full = os.path.join(cwd, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(data)
    for path in case.dirs:
        os.makedirs(os.path.join(cwd, path), exist_ok=True)
    for path, kind in case.nodes.items():
        full = os.path.join(cwd, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        try:
            if kind != "null":
                raise PermissionError
            os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError:  # not root: a FIFO stands in for the device
            os.mkfifo(full)
    for path, target in case.links.items():
        full = os.path.join(cwd, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        os.symlink(target, full)


def _env(cwd: str) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "TMPDIR": os.path.join(cwd, "tmp"),
        "HOME": os.path.join(cwd, "tmp"),
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    for name in ("DIST_LTO_LLVM_BIN", "PYTHONPATH"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def run_one(
    tool: str,
    n: int,
    corpus: fuzz_corpus.Corpus,
    settings: Settings,
    base: Path,
    subprocess_mode: bool,
) -> dict[str, object]:
    """Run input `n` of `tool`; return its result, keeping the input if it failed."""
    root = str(base / f"{tool}-{n}")
    cwd = os.path.join(root, "s", "a", "b", "w")  # `..` three times stays inside
    os.makedirs(os.path.join(cwd, "tmp"))
    case = make_case(tool, settings.seed * 10_000_000 + n, corpus, cwd)
    _materialise(case, cwd)
    before = fuzz_sandbox.snapshot(root)
    env = _env(cwd)
    if subprocess_mode:
        outcome = fuzz_sandbox.run_subprocess(
            [sys.executable, "-m", "dist_lto", *case.argv], cwd, env, settings.timeout
        )
    else:
        log = os.path.join(root, "output.log")
        outcome = fuzz_sandbox.run_in_process(cli.main, case.argv, cwd, env, log, settings.timeout)
        os.unlink(log)
    changes = fuzz_sandbox.changes(before, fuzz_sandbox.snapshot(root))
    problems = check(case, outcome, changes, cwd, root)
    result: dict[str, object] = {
        "tool": tool,
        "n": n,
        "subprocess": subprocess_mode,
        "status": outcome.status,
        "problems": problems,
    }
    if problems:
        result["how"] = case.how
        result["argv"] = case.argv
        result["output"] = outcome.output[-2000:]
    shutil.rmtree(root, ignore_errors=True)
    return result


# ---------------------------------------------------------------------------------
# The campaign


def _schedule(counts: dict[str, int]) -> list[tuple[str, int]]:
    """Every (tool, input number), the tools interleaved so progress is even."""
    total = sum(counts.values())
    items = [(n / max(counts[t], 1), t, n) for t in TOOLS for n in range(counts[t])]
    items.sort()
    assert len(items) == total
    return [(t, n) for _, t, n in items]


def _worker(
    rank: int,
    items: list[tuple[str, int]],
    corpus: fuzz_corpus.Corpus,
    settings: Settings,
    out_fd: int,
) -> None:
    """A worker process: jail itself, run its share of inputs, report one line each."""
    jail = fuzz_sandbox.jail(str(settings.workdir))
    _preload()
    os.write(out_fd, orjson.dumps({"jail": jail}) + b"\n")
    base = settings.workdir / "run" / f"w{rank}"
    base.mkdir(parents=True)
    for tool, n in items:
        sub = _subprocess_share(tool, n, settings)
        try:
            result = run_one(tool, n, corpus, settings, base, sub)
        except Exception as err:  # the harness's own failure: report it, keep going
            where = traceback.extract_tb(err.__traceback__)[-1]
            result = {
                "tool": tool,
                "n": n,
                "subprocess": sub,
                "status": -2,
                "problems": [
                    (
                        "harness",
                        f"{type(err).__name__}: {str(err)[:300]}"
                        f" at {where.filename}:{where.lineno}",
                    )
                ],
            }
        os.write(out_fd, orjson.dumps(result) + b"\n")


def _preload() -> None:
    """Import every module a tool may load, once, so forked inputs do not pay for it."""
    import argparse  # noqa: F401

    for module, _ in cli.SUBCOMMANDS.values():
        __import__("dist_lto." + module)
    for module in ("dist_lto.archive.reader", "dist_lto.distribute.cache_key"):
        __import__(module)


def _subprocess_share(tool: str, n: int, settings: Settings) -> bool:
    """Whether input `n` runs as a real process (a fixed pseudo-random share)."""
    import random

    return random.Random(f"sub:{tool}:{n}:{settings.seed}").random() < settings.subprocess_share


class Tally:
    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts
        self.done: Counter[str] = Counter()
        self.sub: Counter[str] = Counter()
        self.status: dict[str, Counter[str]] = {t: Counter() for t in TOOLS}
        self.kinds: dict[str, Counter[str]] = {t: Counter() for t in TOOLS}
        self.kept: Counter[tuple[str, str]] = Counter()
        self.jails: list[str | None] = []

    def add(self, result: dict[str, object], settings: Settings) -> None:
        tool = str(result["tool"])
        self.done[tool] += 1
        self.sub[tool] += bool(result["subprocess"])
        status = int(result["status"])  # type: ignore[call-overload]
        label = {0: "0", 2: "2", -1: "timeout"}.get(status, "other")
        self.status[tool][label] += 1
        seen = set()
        for kind, _detail in result["problems"]:  # type: ignore[attr-defined]
            if kind in seen:
                continue
            seen.add(kind)
            self.kinds[tool][kind] += 1
            if self.kept[(tool, kind)] < settings.keep:
                self.kept[(tool, kind)] += 1
                self._keep(result, kind, settings)

    def _keep(self, result: dict[str, object], kind: str, settings: Settings) -> None:
        findings = settings.workdir / "findings"
        findings.mkdir(exist_ok=True)
        name = f"{result['tool']}-{result['n']}-{kind.replace(' ', '-')}.json"
        (findings / name).write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
        print(
            f"fuzz: {kind}: {result['tool']} input {result['n']} ({name}): "
            f"{result['problems'][0][1][:200]}",
            file=sys.stderr,
            flush=True,
        )  # type: ignore[index]

    def table(self) -> str:
        head = (
            f"{'tool':<11}{'inputs':>8}{'(subproc)':>10}{'exit 0':>8}{'exit 2':>8}"
            f"{'other':>7}  " + "  ".join(f"{k}s" for k in MUST_BE_ZERO)
        )
        lines = [head]
        for t in TOOLS:
            s = self.status[t]
            lines.append(
                f"{t:<11}{self.done[t]:>8}{self.sub[t]:>10}{s['0']:>8}{s['2']:>8}"
                f"{s['other'] + s['timeout']:>7}  "
                + "  ".join(f"{self.kinds[t][k]:>{len(k) + 1}}" for k in MUST_BE_ZERO)
            )
        total = sum(self.done.values())
        lines.append(f"{'total':<11}{total:>8}{sum(self.sub.values()):>10}")
        others = [
            f"{t} {k}: {self.kinds[t][k]}" for t in TOOLS for k in KINDS[3:] if self.kinds[t][k]
        ]
        others += [
            f"{t} harness: {self.kinds[t]['harness']}" for t in TOOLS if self.kinds[t]["harness"]
        ]
        lines.append("other findings: " + (", ".join(others) if others else "none"))
        return "\n".join(lines)

    def failures(self) -> int:
        return sum(self.kinds[t][k] for t in TOOLS for k in (*KINDS, "harness"))


def campaign(counts: dict[str, int], settings: Settings, workers: int) -> Tally:
    corpus = fuzz_corpus.build(settings.workdir / "corpus")
    items = _schedule(counts)
    tally = Tally(counts)
    pipes: dict[int, tuple[int, bytes]] = {}
    pids = []
    for rank in range(workers):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            code = 0
            try:
                _worker(rank, items[rank::workers], corpus, settings, write_end)
            except BaseException:
                traceback.print_exc()
                code = 70
            finally:
                os._exit(code)
        os.close(write_end)
        pipes[read_end] = (pid, b"")
        pids.append(pid)
    started = last = time.monotonic()
    total = len(items)
    while pipes:
        ready, _, _ = select.select(list(pipes), [], [], 5.0)
        for fd in ready:
            pid, pending = pipes[fd]
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                os.close(fd)
                del pipes[fd]
                continue
            *lines, pending = (pending + chunk).split(b"\n")
            pipes[fd] = (pid, pending)
            for line in lines:
                message = orjson.loads(line)
                if "jail" in message:
                    tally.jails.append(message["jail"])
                else:
                    tally.add(message, settings)
        now = time.monotonic()
        if now - last >= 30:
            last = now
            done = sum(tally.done.values())
            print(
                f"fuzz: {done}/{total} inputs in {now - started:.0f} s, "
                f"{tally.failures()} problems",
                file=sys.stderr,
                flush=True,
            )
    for pid in pids:
        os.waitpid(pid, 0)
    tally.seconds = time.monotonic() - started  # type: ignore[attr-defined]
    return tally


def _counts(args: argparse.Namespace) -> dict[str, int]:
    counts = {t: round(args.count * SHARES[t]) for t in TOOLS}
    counts["prepare"] += args.count - sum(counts.values())
    for t in TOOLS:
        if getattr(args, t) is not None:
            counts[t] = getattr(args, t)
    return counts


def _one_case(spec: str, settings: Settings) -> int:
    """`--case TOOL:N`: run one input in the foreground and show everything about it."""
    tool, _, number = spec.partition(":")
    corpus = fuzz_corpus.build(settings.workdir / "corpus")
    jail = fuzz_sandbox.jail(str(settings.workdir))
    _preload()
    base = settings.workdir / "case"
    base.mkdir()
    n = int(number)
    result = run_one(tool, n, corpus, settings, base, _subprocess_share(tool, n, settings))
    case = make_case(tool, settings.seed * 10_000_000 + n, corpus, "<cwd>")
    print(f"jail: {jail or 'on'}\nhow: {case.how}\nargv: {case.argv}")
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    return 1 if result["problems"] else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--count",
        type=int,
        default=1000,
        help="inputs in total, split 40/30/15/15%% over prepare/plan/opt/distribute (default 1000)",
    )
    for t in TOOLS:
        parser.add_argument(f"--{t}", type=int, metavar="N", help=f"inputs for {t} instead")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per input")
    parser.add_argument(
        "--subprocess-share",
        type=float,
        default=0.02,
        help="share of inputs run as real processes (default 0.02)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--keep", type=int, default=5, help="failures kept per tool and kind under WORKDIR/findings"
    )
    parser.add_argument("--workdir", help="where to work (default: a temporary directory)")
    parser.add_argument("--case", metavar="TOOL:N", help="run one input and show it")
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="dist-lto-fuzz-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if any(workdir.iterdir()):
        parser.error(f"{workdir}: not empty")
    settings = Settings(workdir, args.timeout, args.subprocess_share, args.keep, args.seed)
    if args.case:
        return _one_case(args.case, settings)
    counts = _counts(args)
    tally = campaign(counts, settings, args.workers)
    jail = (
        "read-only mount namespace"
        if tally.jails and not any(tally.jails)
        else f"off ({next(j for j in tally.jails if j)})"
        if tally.jails
        else "?"
    )
    print(
        f"fuzz: seed {args.seed}, {args.workers} workers, timeout {args.timeout:g} s,"
        f" jail {jail}, {tally.seconds:.0f} s"
    )  # type: ignore[attr-defined]
    print(tally.table())
    zero = {k: sum(tally.kinds[t][k] for t in TOOLS) for k in MUST_BE_ZERO}
    print(
        f"fuzz-total: {sum(tally.done.values())} inputs, "
        + ", ".join(f"{v} {k}s" for k, v in zero.items())
    )
    if tally.failures():
        print(f"findings kept in {workdir / 'findings'}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if tally.failures() else 0


if __name__ == "__main__":
    sys.exit(main())
