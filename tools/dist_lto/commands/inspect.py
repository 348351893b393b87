"""`dist-lto inspect`: what a planned link looks like, from its meta file and plans.

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
            "Summarise a planned link: objects (bitcode vs native), archives and members"
            " (used, native, never loaded), imports per backend (min/median/p95/max), the"
            " most-imported modules and the longest backends by input size. Reads META and"
            " the plans it declares (written by `dist-lto plan`)."
        ),
        epilog="exit status: 0 success, 2 bad input (missing or malformed meta or plan,"
        " unknown --focus module)",
    )
    parser.add_argument("meta", metavar="META", help="the meta file of a planned link")
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
        [("the meta file", args.meta)],
    )
    link = model.load(args.meta)
    focus = link.find(args.focus) if args.focus else None
    around = model.neighbourhood(link, focus, args.depth) if focus is not None else None
    sys.stdout.write(text.summary(link, args.top))
    if args.dot:
        write_atomic(args.dot, drawing.dot(link, around).encode())
    if args.svg:
        picture = drawing.svg(link) if around is None else drawing.neighbourhood_svg(link, around)
        write_atomic(args.svg, picture.encode())
    if args.html:
        if around is None and (start := _default_focus(link)) is not None:
            around = model.neighbourhood(link, start, args.depth)
        write_atomic(args.html, html.report(link, args.top, around).encode())
    return 0
