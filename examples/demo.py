"""Build the examples through the Buck2 rules, run them, and print what happened.

    .venv/bin/python examples/demo.py [--harness] [TARGET_PATTERN ...]

With `buck2` on PATH the examples are built by Buck2 itself; otherwise (or with
`--harness`) by the test harness in tests/buck2, which runs the same rules in
starlark-rust and executes every action in a scratch directory with real
clang/lld/rustc. Each program is built from scratch on its own, so its wall time
includes its libraries; `NAME` links with distributed ThinLTO and
`NAME-inprocess` with LLD's in-process ThinLTO, and the two must print the same.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from buck2 import BuildError, Harness, Label  # noqa: E402
from buck2.local import harness_config  # noqa: E402


@dataclass
class Row:
    target: str
    opt_actions: int
    seconds: float
    ok: bool
    output: str


def binaries(patterns: list[str]) -> list[Label]:
    """The runnable targets the patterns name (analysis only, nothing is built)."""
    with tempfile.TemporaryDirectory() as tmp:
        harness = Harness(REPO, Path(tmp), harness_config())
        labels = harness.resolve(patterns)
        return [lbl for lbl in labels if harness.analyze(lbl).run is not None]


def run(label: Label, opt: int, seconds: float, command: list[str]) -> Row:
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    output = proc.stdout.strip().replace("\n", " | ")
    return Row(f"//{label.package}:{label.name}", opt, seconds, proc.returncode == 0, output)


def with_harness(label: Label, jobs: int | None) -> Row:
    with tempfile.TemporaryDirectory() as tmp:
        harness = Harness(REPO, Path(tmp), harness_config(), jobs=jobs)
        start = time.monotonic()
        result = harness.build([str(label)])
        seconds = time.monotonic() - start
        opt = sum(1 for a in result.actions if a.category == "thin_lto_opt")
        return run(label, opt, seconds, result.run_args(label))


def with_buck2(buck2: str, label: Label) -> Row:
    """Untested here (no Buck2 on our machines): build, then count opt actions in `what-ran`."""
    config = [f"-c{k}={v}" for k, v in harness_config().items()]
    start = time.monotonic()
    out = subprocess.run(
        [buck2, "build", *config, f"//{label.package}:{label.name}", "--show-full-output"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    seconds = time.monotonic() - start
    ran = subprocess.run([buck2, "log", "what-ran"], cwd=REPO, capture_output=True, text=True)
    return run(label, ran.stdout.count("(thin_lto_opt "), seconds, [out.split()[-1]])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="examples/demo.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("patterns", nargs="*", default=["//examples/..."], metavar="TARGET_PATTERN")
    parser.add_argument(
        "--harness", action="store_true", help="use the test harness even if buck2 is on PATH"
    )
    parser.add_argument(
        "--jobs", type=int, default=None, help="parallel actions (harness; default: cores)"
    )
    args = parser.parse_args(argv)
    buck2 = None if args.harness else shutil.which("buck2")
    print(f"building with {'buck2 (' + buck2 + ')' if buck2 else 'the starlark-rust test harness'}")
    rows: list[Row] = []
    labels = binaries(args.patterns)
    if "rust.rustc" not in harness_config():
        skipped = [lbl for lbl in labels if lbl.package.startswith("examples/rust")]
        labels = [lbl for lbl in labels if lbl not in skipped]
        if skipped:
            print(f"no rustc found: skipping {', '.join(str(s) for s in skipped)}")
    try:
        for label in labels:
            rows.append(with_buck2(buck2, label) if buck2 else with_harness(label, args.jobs))
    except (BuildError, subprocess.CalledProcessError) as err:
        print(f"demo: build failed: {getattr(err, 'stderr', None) or err}", file=sys.stderr)
        return 1
    by_target = {r.target: r for r in rows}
    width = max(len(r.target) for r in rows)
    print(f"\n{'target':<{width}}  {'opt actions':>11}  {'wall time':>9}  result")
    for r in rows:
        twin = by_target.get(r.target.removesuffix("-inprocess"))
        same = twin is not None and twin is not r and twin.output == r.output
        verdict = ("ok" if r.ok else "FAILED") + (" (same as distributed)" if same else "")
        print(
            f"{r.target:<{width}}  {r.opt_actions:>11}  {r.seconds:>7.2f} s  {verdict}: {r.output}"
        )
    failed = [r for r in rows if not r.ok]
    mismatched = [
        r
        for r in rows
        if r.target.endswith("-inprocess")
        and by_target[r.target.removesuffix("-inprocess")].output != r.output
    ]
    print(f"\n{len(rows)} programs, {len(failed)} failed,", end=" ")
    print(f"{len(mismatched)} in-process/distributed mismatches")
    return 1 if failed or mismatched else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
