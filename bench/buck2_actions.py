#!/usr/bin/env python3
"""What one opt action costs under real Buck2, beside Buck2's own per-action cost.

A scratch copy of this project gets a package holding Lua's ThinLTO objects and the
index files of one LLD index step (run with the package's paths, as the rules would).
One rule there declares N actions of one kind, every one of them a separate Buck2
action with its own output:

    floor   `touch OUT`: what Buck2 itself spends on an action (spawn, output hashing,
            bookkeeping) plus a trivial process
    clang   the bare clang backend of one Lua module (exactly what `opt --print-command`
            prints), by way of `env`
    opt     `dist-lto opt` of the same module, started as our rules start it (the
            package with its bytecode, an input of the action; `-S -E`)

Every module of Lua is used in turn, so each kind does the same work. Each round gives
every action a new salt in its environment (Buck2 runs it again) and builds the three
kinds one after the other, alternating the order. For each kind: the client's wall
clock over the whole build (times the local slots, per action: what one action costs
the build), and each command's own run time from Buck2's event log. Local execution,
the same daemon for all rounds (its start and the first analysis are not measured).

Last lines: `buck2-action-floor-ms` (a `touch` action's share of the build) and
`buck2-opt-over-clang-ms` (per module, its opt commands' median less its clang
commands' median; the median over the modules).

Usage: .venv/bin/python bench/buck2_actions.py [--rounds 3] [--copies 3]
"""

from __future__ import annotations

import argparse
import collections
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support import workloads
from support.real_buck2 import Buck2, scratch_project

PACKAGE = "bench_actions"
KINDS = ("floor", "clang", "opt")
LINK_FLAGS = ["-flto=thin", "-fuse-ld=lld", "-O2", "-lm"]

RULE = """
load("@prelude//toolchain.bzl", "LlvmToolchainInfo", "TOOLCHAIN", "dist_lto_command")

def _actions_impl(ctx: AnalysisContext) -> list[Provider]:
    toolchain = ctx.attrs._toolchain[LlvmToolchainInfo]
    objects = {f.short_path.removeprefix(ctx.label.package + "/"): f for f in ctx.attrs.objects}
    flags = ctx.actions.write("link.args", ctx.attrs.link_flags)
    outs = []
    for copy in range(ctx.attrs.copies):
        for module in ctx.attrs.modules:
            src = objects[module]
            index = objects[module + ".thinlto.bc"]
            out = ctx.actions.declare_output("{}/{}/{}.o".format(ctx.attrs.kind, copy, module))
            if ctx.attrs.kind == "floor":
                cmd = cmd_args("touch", out.as_output())
            elif ctx.attrs.kind == "clang":
                argv = [a.replace("@OUT@", "{}") for a in ctx.attrs.clang[module]]
                cmd = cmd_args([
                    cmd_args(out.as_output(), format = a) if "{}" in a else a
                    for a in argv
                ])
            else:
                cmd = cmd_args(
                    dist_lto_command(
                        toolchain.opt_python, toolchain.dist_lto_pkg, "opt", fast = True
                    ),
                    "--input", src, "--index", index, "--out", out.as_output(),
                    "--args", flags, "--", toolchain.clang,
                )
            ctx.actions.run(
                cmd_args(cmd, hidden = ctx.attrs.objects),
                env = {"BENCH_SALT": ctx.attrs.salt},
                category = "bench_" + ctx.attrs.kind,
                identifier = "{}/{}".format(copy, module),
            )
            outs.append(out)
    return [DefaultInfo(default_outputs = outs)]

bench_actions = rule(
    impl = _actions_impl,
    attrs = {
        "kind": attrs.string(),
        "copies": attrs.int(),
        "modules": attrs.list(attrs.string()),
        "objects": attrs.list(attrs.source()),
        "clang": attrs.dict(attrs.string(), attrs.list(attrs.string())),
        "link_flags": attrs.list(attrs.string()),
        "salt": attrs.string(),
        "_toolchain": attrs.toolchain_dep(default = TOOLCHAIN, providers = [LlvmToolchainInfo]),
    },
)
"""


def make_package(project: Path, copies: int) -> list[str]:
    """Lua's objects and index files in the package; its BUCK file; the modules."""
    pkg = project / PACKAGE
    build = workloads.build("lua", pkg / "lua")
    objects = [f"lua/{o}" for o in build.objects]
    subprocess.run(
        [
            workloads.CLANG,
            *LINK_FLAGS,
            *(f"{PACKAGE}/{o}" for o in objects),
            "-o",
            f"{PACKAGE}/lua.out",
            "-Wl,--thinlto-index-only",
        ],
        cwd=project,
        check=True,
        capture_output=True,
    )
    python = Buck2(project).config["dist_lto.python"]
    (pkg / "link.args").write_text("".join(f"{f}\n" for f in LINK_FLAGS))
    clang = {}
    for module in objects:
        printed = subprocess.run(
            [
                python,
                str(project / "tools" / "dist_lto" / "__main__.py"),
                "opt",
                "--input",
                f"{PACKAGE}/{module}",
                "--index",
                f"{PACKAGE}/{module}.thinlto.bc",
                "--out",
                "@OUT@",
                "--args",
                f"{PACKAGE}/link.args",
                "--print-command",
                "--",
                workloads.CLANG,
            ],
            cwd=project,
            check=True,
            capture_output=True,
            text=True,
        )
        clang[module] = shlex.split(printed.stdout.strip().splitlines()[-1])
    files = sorted(p.relative_to(pkg).as_posix() for p in (pkg / "lua").rglob("*.o*"))
    (pkg / "defs.bzl").write_text(RULE)
    lines = ['load(":defs.bzl", "bench_actions")', ""]
    for kind in KINDS:
        lines.append(
            f"bench_actions(name = {kind!r}, kind = {kind!r}, copies = {copies}, "
            f"modules = {objects!r}, objects = {files!r}, clang = {clang!r}, "
            f"link_flags = {LINK_FLAGS!r}, "
            f'salt = read_config("bench", "salt", "0"))'
        )
    (pkg / "BUCK").write_text("\n".join(lines) + "\n")
    return objects


def command_times(buck: Buck2, category: str) -> dict[str, list[float]]:
    """Seconds the command of each action of `category` ran in the last build, by module,
    as Buck2 measured it (its event log's `wall_time_us`: the process, not the queue)."""
    proc = buck("log", "show", config=False)
    took: dict[str, list[float]] = collections.defaultdict(list)
    for line in proc.stdout.splitlines():
        if '"SpanEnd"' not in line or '"ActionExecution"' not in line:
            continue
        end = orjson.loads(line)["Event"]["data"]["SpanEnd"]
        action = end["data"]["ActionExecution"]
        if action["name"]["category"] == category:
            module = action["name"]["identifier"].split("/", 1)[1]
            took[module].append(action["wall_time_us"] / 1e6)
    return took


def buck_slots() -> int:
    """Buck2's local slots: one per core unless `[build] threads` says otherwise."""
    return os.cpu_count() or 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--copies", type=int, default=3, help="actions per module and kind")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="buck2-actions-") as tmp:
        project = scratch_project(Path(tmp) / "project")
        modules = make_package(project, args.copies)
        buck = Buck2(project, isolation_dir=f"bench-{uuid.uuid4().hex[:10]}")
        try:
            # The daemon's start, the toolchain's package compile and the analysis.
            buck.build(*(f"//{PACKAGE}:{k}" for k in KINDS), "-c", "bench.salt=warm")
            walls: dict[str, list[float]] = {k: [] for k in KINDS}
            each: dict[str, dict[str, list[float]]] = {
                k: collections.defaultdict(list) for k in KINDS
            }
            for r in range(args.rounds):
                order = KINDS if r % 2 == 0 else KINDS[::-1]
                for kind in order:
                    start = time.perf_counter()
                    buck.build(f"//{PACKAGE}:{kind}", "-c", f"bench.salt={r}")
                    walls[kind].append(time.perf_counter() - start)
                    for module, took in command_times(buck, "bench_" + kind).items():
                        each[kind][module] += took
        finally:
            buck.kill()
    actions = len(modules) * args.copies
    slots = buck_slots()
    print(f"{actions} actions per kind and round, {args.rounds} rounds, local, {slots} slots")
    for kind in KINDS:
        wall = statistics.median(walls[kind])
        runs = [t for took in each[kind].values() for t in took]
        print(
            f"  {kind:6} build {wall:6.2f} s ({1000 * wall * slots / actions:6.1f} ms"
            f" per action and slot)   command: median {1000 * statistics.median(runs):6.1f}"
            f" ms, fastest {1000 * min(runs):6.1f} ms"
        )
    floor = statistics.median(walls["floor"]) * slots / actions
    # Per module: its opt runs against its clang runs, medians and fastest runs.
    medians = [
        statistics.median(each["opt"][m]) - statistics.median(each["clang"][m]) for m in modules
    ]
    fastest = [min(each["opt"][m]) - min(each["clang"][m]) for m in modules]
    build = (statistics.median(walls["opt"]) - statistics.median(walls["clang"])) * slots / actions
    print(f"opt over clang per action, from the builds' wall clocks: {1000 * build:.1f} ms")
    print(f"opt over clang per command, fastest runs: {1000 * statistics.median(fastest):.1f} ms")
    print(f"buck2-action-floor-ms: {1000 * floor:.1f}")
    print(f"buck2-opt-over-clang-ms: {1000 * statistics.median(medians):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
