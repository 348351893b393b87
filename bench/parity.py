"""Parity with in-process ThinLTO: which functions our distributed backends generate
exactly as LLD's in-process backend does, and why the others differ.

For each workload, the same link twice: LLD 22's in-process ThinLTO with
`--save-temps=prelink` (the native object of every module: the reference), and the
distributed way, LLD's index step (`--thinlto-index-only`, with the declaration
imports `dist-lto plan` asks for) then `dist-lto opt` per module and a native link.
Every function is compared object against object (bytes and
relocations, symbolised: see tests/support/objcode.py) and classified:

- identical;
- relaxed: differs only by GOT loads that LLD relaxes into the reference's `lea`, so
  the linked programs hold the same code;
- got: loads from the GOT a symbol that the reference addresses directly. Each such
  symbol is checked against the explanation in docs/parity.md: it is defined in
  another module of the link, and the module's individual index has no summary for
  it; one that is not is listed as unexplained;
- other: any other difference.

Both programs are run. The last lines are `parity/<workload>: N/M`: N of the M
functions are identical in the linked program (identical or relaxed).

    .venv/bin/python bench/parity.py [--workloads lua,zstd,git] [--jobs N]
        [--link-flag=-no-pie ...] [--backend-flag=-fdirect-access-external-data ...]
        [--index-flag=FLAG ...] [--no-declaration-imports]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import git_build

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support import workloads
from support.parity import INDEX_STEP, Parity, measure


def report(p: Parity) -> None:
    got = sum(len(f) for f in p.got.values())
    other = sum(len(f) for f in p.other.values())
    relaxed = sum(len(f) for f in p.relaxed.values())
    print(
        f"{p.workload}: {p.total} functions: {p.identical} identical, {relaxed} identical"
        f" once linked (GOT loads relaxed to lea), {got} through the GOT, {other} other"
    )
    for module, names in sorted(p.relaxed.items()):
        print(f"  relaxed {module}: {' '.join(names)}")
    for module, functions in sorted(p.got.items()):
        for name, symbols in functions.items():
            print(f"  got {module}: {name} loads {' '.join(symbols)}")
    for module, names in sorted(p.other.items()):
        print(f"  other {module}: {' '.join(names)}")
    for entry in p.unexplained:
        print(f"  unexplained GOT load: {entry}")
    print(f"{p.workload}: both programs run")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="lua,zstd,git")
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument(
        "--link-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="an extra flag for both links, e.g. -no-pie (repeatable)",
    )
    parser.add_argument(
        "--backend-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="an extra clang flag for every distributed backend (repeatable)",
    )
    parser.add_argument(
        "--index-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="an extra flag for the distributed link's index step only (repeatable)",
    )
    parser.add_argument(
        "--no-declaration-imports",
        action="store_true",
        help="leave out the index step's " + " ".join(INDEX_STEP) + " (as dist-lto plan adds it)",
    )
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-parity-") as tmp:
        for name in args.workloads.split(","):
            objects, work = Path(tmp) / f"{name}-objects", Path(tmp) / name
            build = git_build.build(objects) if name == "git" else workloads.build(name, objects)
            results.append(
                measure(
                    build,
                    work,
                    args.jobs,
                    args.link_flag,
                    args.backend_flag,
                    args.index_flag,
                    (lambda exe, work=work: git_build.check_binary(exe, work))
                    if name == "git"
                    else None,
                    not args.no_declaration_imports,
                )
            )
            report(results[-1])
    for p in results:
        print(f"parity/{p.workload}: {p.linked_identical}/{p.total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
