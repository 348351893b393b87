"""`dist-lto inspect`: what a link looks like, from a meta file and its plans or from
the job file LLD gave its distributor, and, with a trace, where its time went.

Answers the questions one asks before distributing a link: how many backends, how much
each imports, which modules everyone imports (a change to them reruns most backends),
and which backend reads the most bitcode (the likely critical path). Prints a summary;
writes an HTML report, and the import graph as Graphviz input or SVG, whole or around
one module (`--focus`), since a whole graph of thousands of modules is unreadable.
"""

from __future__ import annotations

import argparse
import sys

from dist_lto.fsutil import write_atomic
from dist_lto.output_paths import refuse_overlaps
from dist_lto.report import drawing, html, model, text
from dist_lto.report.timeline import read_trace


def _default_focus(link: model.Link) -> model.Key | None:
    """The most-imported module, else the first backend: where a reader starts."""
    ranked = text.most_imported(link)
    if ranked:
        return ranked[0][0]
    backends = link.backends()
    return backends[0] if backends else None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="dist-lto inspect",
        description=(
            "Summarise a link: objects (bitcode vs native), archives and members"
            " (used, native, never loaded), imports per backend (min/median/p95/max), the"
            " most-imported modules and the longest backends by input size. Reads a meta"
            " file and the plans it declares (written by `dist-lto plan`, or by Buck2), or"
            " the DTLTO job file LLD wrote for its distributor (kept with -Wl,--save-temps:"
            " <output>.<pid>.dist-file.json). With --trace, also the longest backends as"
            " they ran and the critical path."
        ),
        epilog="Archive members are named libfoo.a(bar.o); --focus takes that name or the"
        " path. exit status: 0 success, 2 bad input (missing or malformed meta, plan, job"
        " file or trace, unknown --focus module: the closest names are suggested)",
    )
    parser.add_argument(
        "meta", metavar="META|JOB_FILE",
        help="the meta file of a planned link, or a DTLTO job file",
    )  # fmt: skip
    parser.add_argument(
        "--trace", metavar="FILE",
        help="a trace of this link from `dist-lto distribute --trace` or `dist-lto link"
        " --trace`: add the longest backends and the critical path",
    )  # fmt: skip
    parser.add_argument(
        "--top", type=int, default=10, metavar="N",
        help="how many modules and archives to list (default 10)",
    )  # fmt: skip
    parser.add_argument(
        "--html", metavar="FILE",
        help="write a self-contained HTML report: rankings, fan-in/fan-out distributions,"
        " never-loaded members, biggest backends and the neighbourhood of one module",
    )  # fmt: skip
    parser.add_argument(
        "--dot", metavar="FILE",
        help="write the import graph for Graphviz (with --focus: that module's neighbourhood)",
    )  # fmt: skip
    parser.add_argument(
        "--svg", metavar="FILE",
        help="draw the import graph as a self-contained SVG (with --focus: that module's"
        " neighbourhood in columns)",
    )  # fmt: skip
    parser.add_argument(
        "--focus", metavar="MODULE",
        help="the module (its path as the plans spell it) whose neighbourhood --dot and --svg"
        " draw and the HTML report shows (default for the report: the most-imported module)",
    )  # fmt: skip
    parser.add_argument(
        "--depth", type=int, default=1, metavar="N",
        help="import steps from the focus, both ways, that the neighbourhood reaches"
        " (default 1)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error("--top must be at least 1")
    if args.depth < 1:
        parser.error("--depth must be at least 1")
    refuse_overlaps(
        [(f"--{name}", getattr(args, name)) for name in ("dot", "svg", "html")],
        [("the meta file", args.meta), ("the trace", args.trace)],
    )
    link = model.load(args.meta)
    timeline = read_trace(args.trace) if args.trace else None
    focus = link.find(args.focus) if args.focus else None
    around = model.neighbourhood(link, focus, args.depth) if focus is not None else None
    sys.stdout.write(text.summary(link, args.top))
    if timeline is not None:
        sys.stdout.write(text.time_summary(link, timeline, args.top))
    if args.dot:
        write_atomic(args.dot, drawing.dot(link, around).encode())
    if args.svg:
        picture = drawing.svg(link) if around is None else drawing.neighbourhood_svg(link, around)
        write_atomic(args.svg, picture.encode())
    if args.html:
        if around is None and (start := _default_focus(link)) is not None:
            around = model.neighbourhood(link, start, args.depth)
        write_atomic(args.html, html.report(link, args.top, around, timeline).encode())
    return 0
