"""Drawings of the import graph: Graphviz input, a circle of the whole graph, a module's
neighbourhood in columns, and bar charts of distributions. SVG is written by hand so
that nothing but the standard library is needed to draw or to view."""

from __future__ import annotations

import math
from collections import Counter
from xml.sax.saxutils import escape

from dist_lto.report.model import Key, Link, Neighbourhood
from dist_lto.report.timeline import Timeline


def _node_id(key: Key) -> str:
    return f"o{key[1]}" if key[0] < 0 else f"a{key[0]}m{key[1]}"


def dot(link: Link, around: Neighbourhood | None = None) -> str:
    """The import graph in Graphviz syntax: an edge A -> B when A's backend imports B.
    With `around`, only that neighbourhood (the focus drawn bold)."""
    if around is None:
        edges = link.edges()
        nodes = sorted({*link.backends(), *(i for _, i in edges)})
    else:
        edges, nodes = around.edges, around.keys()
    lines = ["digraph imports {", "  rankdir=LR;", "  node [fontsize=10];"]
    for key in nodes:
        m = link.modules[key]
        shape = "box" if key[0] < 0 else "ellipse"
        label = m.name.replace("\\", "\\\\").replace('"', '\\"')
        bold = ", style=bold" if around is not None and key == around.focus else ""
        lines.append(f'  {_node_id(key)} [label="{label}", shape={shape}{bold}];')
    lines += [f"  {_node_id(a)} -> {_node_id(b)};" for a, b in edges]
    lines.append("}")
    return "\n".join(lines) + "\n"


SVG_NODE_LIMIT = 300
"""Beyond this many nodes the circle keeps the most connected ones: a circle stays legible."""
OBJECT_COLOUR = "#3b6fb6"
MEMBER_COLOUR = "#3c9a5f"


def _colour(key: Key) -> str:
    return OBJECT_COLOUR if key[0] < 0 else MEMBER_COLOUR


def svg(link: Link) -> str:
    """The import graph on a circle: objects blue, archive members green, edges importer to
    imported. Self-contained SVG, no Graphviz needed."""
    edges = link.edges()
    nodes = sorted({*link.backends(), *(i for _, i in edges)})
    degree: Counter[Key] = Counter()
    for a, b in edges:
        degree[a] += 1
        degree[b] += 1
    note = ""
    if len(nodes) > SVG_NODE_LIMIT:
        keep = set(sorted(nodes, key=lambda k: (-degree[k], k))[:SVG_NODE_LIMIT])
        note = f" (the {SVG_NODE_LIMIT} most connected of {len(nodes)} modules)"
        nodes = [k for k in nodes if k in keep]
        edges = [(a, b) for a, b in edges if a in keep and b in keep]
    n = max(len(nodes), 1)
    radius = max(120.0, n * 5.0)
    margin = 260.0
    size = 2 * (radius + margin)
    centre = size / 2
    where: dict[Key, tuple[float, float, float]] = {}
    for i, key in enumerate(nodes):
        angle = 2 * math.pi * i / n
        where[key] = (centre + radius * math.cos(angle), centre + radius * math.sin(angle), angle)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{size:.0f}" height="{size:.0f}"'
        f' viewBox="0 0 {size:.0f} {size:.0f}" font-family="sans-serif" font-size="10">',
        f"<title>{escape(f'import graph of {link.meta}{note}')}</title>",
        _ARROW,
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="10" y="20" font-size="14">{escape(f"imports: {link.meta}{note}")}</text>',
    ]
    for a, b in edges:
        x1, y1, _ = where[a]
        x2, y2, _ = where[b]
        out.append(
            f'<path d="M{x1:.1f},{y1:.1f} Q{centre:.1f},{centre:.1f} {x2:.1f},{y2:.1f}"'
            ' fill="none" stroke="#888" stroke-opacity="0.6" marker-end="url(#arrow)"/>'
        )
    for key in nodes:
        x, y, angle = where[key]
        m = link.modules[key]
        degrees = math.degrees(angle)
        flip = 90 < degrees < 270
        rotate = degrees + 180 if flip else degrees
        anchor = "end" if flip else "start"
        dx = -8 if flip else 8
        out.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{_colour(key)}">'
            f"<title>{escape(f'{m.name} ({m.label})')}</title></circle>"
        )
        out.append(  # rotated about the node, so the label points away from the centre
            f'<text x="{x + dx:.1f}" y="{y:.1f}" text-anchor="{anchor}" dominant-baseline="middle"'
            f' transform="rotate({rotate:.1f} {x:.1f} {y:.1f})">{escape(m.name)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


_ARROW = (
    '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6"'
    ' markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#888"/>'
    "</marker></defs>"
)
COLUMN_LIMIT = 40
"""Modules drawn per column of a neighbourhood; the rest are counted, so a module that
half the link imports still gives a page one can read."""
_COLUMN_WIDTH = 300
_ROW_HEIGHT = 18
_LABEL_CHARS = 38


def _short(name: str) -> str:
    """`name` cut in the middle to fit a column (the end, the file name, matters most)."""
    if len(name) <= _LABEL_CHARS:
        return name
    return name[: _LABEL_CHARS // 3] + "…" + name[-(_LABEL_CHARS * 2 // 3 - 1) :]


def neighbourhood_svg(link: Link, around: Neighbourhood) -> str:
    """`around` in columns, importers left of the focus and imported modules right of it,
    each column sorted by name and cut at COLUMN_LIMIT."""
    order = sorted(around.columns)
    shown: dict[Key, tuple[float, float]] = {}
    hidden: dict[int, int] = {}
    rows = 1
    for x_index, column in enumerate(order):
        keys = sorted(around.columns[column], key=lambda k: (link.modules[k].name, k))
        hidden[column] = max(0, len(keys) - COLUMN_LIMIT)
        for y_index, key in enumerate(keys[:COLUMN_LIMIT]):
            shown[key] = (20 + x_index * _COLUMN_WIDTH, 60 + y_index * _ROW_HEIGHT)
        rows = max(rows, min(len(keys), COLUMN_LIMIT) + (1 if hidden[column] else 0))
    width = 40 + len(order) * _COLUMN_WIDTH
    height = 80 + rows * _ROW_HEIGHT
    focus = link.modules[around.focus]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11"'
        ' class="neighbourhood">',
        f"<title>{escape(f'imports around {focus.name} (depth {around.depth})')}</title>",
        _ARROW,
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    for x_index, column in enumerate(order):
        heading = (
            "focus" if column == 0
            else f"imports it ({-column} step{'s' if column < -1 else ''})" if column < 0
            else f"imported ({column} step{'s' if column > 1 else ''})"
        )  # fmt: skip
        x = 20 + x_index * _COLUMN_WIDTH
        out.append(f'<text x="{x}" y="30" font-weight="bold">{escape(heading)}</text>')
        if hidden[column]:
            more_y = 60 + COLUMN_LIMIT * _ROW_HEIGHT
            out.append(
                f'<text x="{x + 10}" y="{more_y}" fill="#555">… {hidden[column]} more</text>'
            )
    for a, b in around.edges:
        if a in shown and b in shown:
            (left, y1), (x2, y2) = shown[a], shown[b]
            x1 = left + _COLUMN_WIDTH - 40
            mid = (x1 + x2) / 2
            out.append(
                f'<path d="M{x1:.0f},{y1 - 4:.0f} C{mid:.0f},{y1 - 4:.0f} {mid:.0f},{y2 - 4:.0f}'
                f' {x2 - 2:.0f},{y2 - 4:.0f}" fill="none" stroke="#999" stroke-opacity="0.7"'
                ' marker-end="url(#arrow)"/>'
            )
    for key, (box_x, y) in shown.items():
        m = link.modules[key]
        weight = ' font-weight="bold"' if key == around.focus else ""
        out.append(
            f'<circle cx="{box_x + 4}" cy="{y - 4}" r="4" fill="{_colour(key)}"/>'
            f'<text x="{box_x + 12}" y="{y}"{weight}><title>{escape(f"{m.name} ({m.label})")}'
            f"</title>{escape(_short(m.name))}</text>"
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def bars_svg(rows: list[tuple[str, int]], what: str) -> str:
    """A horizontal bar per (label, count): the shape of a distribution at a glance."""
    biggest = max((c for _, c in rows), default=0) or 1
    width, bar = 520, 360
    height = 10 + 20 * len(rows)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11"'
        ' class="bars">',
        f"<title>{escape(what)}</title>",
    ]
    for i, (label, count) in enumerate(rows):
        y = 5 + 20 * i
        length = bar * count / biggest
        out.append(
            f'<text x="70" y="{y + 12}" text-anchor="end">{escape(label)}</text>'
            f'<rect x="78" y="{y}" width="{length:.1f}" height="15" fill="{OBJECT_COLOUR}"/>'
            f'<text x="{82 + length:.1f}" y="{y + 12}">{count}</text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


SLICE_COLOUR = "#9db4d6"
CRITICAL_COLOUR = "#d1495b"
"""The critical path's slices, drawn over the others' colour so that the chain stands out."""


def timeline_svg(timeline: Timeline, names: dict[str, str]) -> str:
    """One row per thread (workers, and the final link's), a bar per job from its start
    to its end, the critical path in its own colour; `names` shows a module by the name
    a reader knows it by."""
    critical = {(s.thread, s.start, s.name) for s in timeline.critical_path()}
    slices = [*timeline.jobs, *([timeline.final_link] if timeline.final_link else [])]
    threads = sorted({s.thread for s in slices})
    row = {thread: i for i, thread in enumerate(threads)}
    width, left, lane = 1000, 90, 18
    scale = (width - left - 10) / max(timeline.wall, 1)
    height = 30 + lane * len(threads)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11"'
        ' class="timeline">',
        f"<title>{escape(f'jobs over time, {timeline.wall / 1e6:.2f} s wall')}</title>",
    ]
    for thread in threads:
        y = 5 + lane * row[thread]
        name = timeline.threads.get(thread, f"thread {thread}")
        out.append(f'<text x="{left - 6}" y="{y + 12}" text-anchor="end">{escape(name)}</text>')
    for s in sorted(slices, key=lambda s: (s.thread, s.start)):
        on_path = (s.thread, s.start, s.name) in critical
        x, w = left + s.start * scale, max(s.duration * scale, 1.0)
        colour = CRITICAL_COLOUR if on_path else SLICE_COLOUR
        label = f"{names.get(s.name, s.name)}: {s.duration / 1e6:.3f} s, {s.outcome}"
        y = 5 + lane * row[s.thread]
        out.append(
            f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{lane - 4}" fill="{colour}"'
            f' stroke="#fff" stroke-width="0.5"><title>{escape(label)}</title></rect>'
        )
    axis = 12 + lane * len(threads)
    out.append(f'<text x="{left}" y="{axis + 10}">0 s</text>')
    out.append(
        f'<text x="{width - 10}" y="{axis + 10}" text-anchor="end">'
        f"{timeline.wall / 1e6:.2f} s</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"
