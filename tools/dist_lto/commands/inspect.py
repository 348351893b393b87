"""`dist-lto inspect`: what a planned link looks like, from its meta file and plans.

Answers the questions one asks before distributing a link: how many backends,
how much each imports, which modules everyone imports (they are the ones whose
change reruns most backends), and which backend reads the most bitcode (the
likely critical path). Draws the import graph as Graphviz input or as a
self-contained SVG without Graphviz.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

from dist_lto.formats.manifest import read_manifest
from dist_lto.formats.meta import read_meta
from dist_lto.formats.plans import read_archive_plan, read_link_plan, read_object_plan
from dist_lto.fsutil import write_atomic

Key = tuple[int, int]
"""A module: (-1, object index) or (archive index, member position)."""


@dataclass
class _Module:
    name: str
    label: str
    size: int | None
    is_bitcode: bool
    backend: bool
    imports: list[Key] = field(default_factory=list)


@dataclass
class Link:
    """A planned link as `inspect` sees it: every module, keyed by object or member."""

    meta: str
    modules: dict[Key, _Module]
    archives: dict[int, tuple[str, Counter[str]]]
    final_link_args: str

    def backends(self) -> list[Key]:
        return sorted(k for k, m in self.modules.items() if m.backend)

    def input_size(self, key: Key) -> int | None:
        """Bytes of bitcode a backend reads: its module plus every module it imports."""
        sizes = [self.modules[k].size for k in [key, *self.modules[key].imports]]
        return None if any(s is None for s in sizes) else sum(s or 0 for s in sizes)


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def _pairs_to_keys(objects: list[int], members: list[list[int]]) -> list[Key]:
    return [(-1, i) for i in objects] + [(a, p) for a, p in members]


def load(meta_path: str) -> Link:
    """Read the meta file and every plan it declares (each validated)."""
    meta = read_meta(meta_path)
    modules: dict[Key, _Module] = {}
    for o in meta.objects():
        plan = read_object_plan(o.plan_output)
        modules[(-1, o.index)] = _Module(
            name=plan["path"],
            label=f"object {o.index}",
            size=_size(plan["path"]),
            is_bitcode=plan["is_bitcode"],
            backend=plan["is_bitcode"],
            imports=_pairs_to_keys(plan["imports"], plan["member_imports"]),
        )
    archives: dict[int, tuple[str, Counter[str]]] = {}
    for a in meta.archives():
        plan = read_archive_plan(a.plan_output)
        sizes = {m.position: m.size for m in read_manifest(a.manifest).members}
        counts: Counter[str] = Counter()
        for m in plan["members"]:
            state = "opt" if m["opt"] else "unused" if m["is_bitcode"] else "native"
            counts[state] += 1
            modules[(a.index, m["position"])] = _Module(
                name=m["input"],
                label=f"archive {a.index} member {m['position']}",
                size=sizes.get(m["position"]),
                is_bitcode=m["is_bitcode"],
                backend=m["opt"],
                imports=_pairs_to_keys(m["imports"], m["member_imports"]),
            )
        archives[a.index] = (a.manifest, counts)
    link_plan = read_link_plan(meta.link_plan_output)
    return Link(meta_path, modules, archives, link_plan["final_link_args"])


def percentile(sorted_values: list[int], fraction: float) -> int:
    """Nearest-rank percentile of an ascending list (not empty)."""
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def _human(size: int | None) -> str:
    if size is None:
        return "?"
    value = float(size)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024 or unit == "MiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def summary(link: Link, top: int) -> str:
    modules = link.modules
    objects = [m for (a, _), m in modules.items() if a < 0]
    members = [m for (a, _), m in modules.items() if a >= 0]
    backends = link.backends()
    lines = [f"planned link: {link.meta}"]
    bitcode = sum(m.is_bitcode for m in objects)
    lines.append(f"objects: {len(objects)} ({bitcode} bitcode, {len(objects) - bitcode} native)")
    total: Counter[str] = Counter()
    for _, counts in link.archives.values():
        total.update(counts)
    lines.append(
        f"archives: {len(link.archives)}, members: {len(members)}"
        f" ({total['opt']} used bitcode, {total['native']} native,"
        f" {total['unused']} bitcode never loaded)"
    )
    for index in sorted(link.archives)[:top]:
        manifest, counts = link.archives[index]
        lines.append(
            f"  archive {index} {manifest}: {counts['opt']} used, {counts['native']} native,"
            f" {counts['unused']} never loaded"
        )
    if len(link.archives) > top:
        lines.append(f"  ... {len(link.archives) - top} more archives")
    lines.append(f"backends: {len(backends)}")
    if backends:
        counts_ = sorted(len(modules[k].imports) for k in backends)
        median = counts_[(len(counts_) - 1) // 2]
        lines.append(
            f"imports per backend: min {counts_[0]}, median {median},"
            f" p95 {percentile(counts_, 0.95)}, max {counts_[-1]}"
        )
        imported = Counter(k for key in backends for k in modules[key].imports)
        lines.append(f"most-imported modules (imported by how many backends, top {top}):")
        for key, count in sorted(imported.items(), key=lambda kv: (-kv[1], kv[0]))[:top]:
            lines.append(f"  {count:6}  {modules[key].name} ({modules[key].label})")
        if not imported:
            lines.append("  (no module imports another)")
        sized = [(link.input_size(k), k) for k in backends]
        ranked = sorted(sized, key=lambda sk: (-(sk[0] or -1), sk[1]))
        lines.append(f"longest backends by input size (module + imports, top {top}):")
        for size, key in ranked[:top]:
            m = modules[key]
            lines.append(f"  {_human(size):>10}  {m.name} ({m.label}, {len(m.imports)} imports)")
    lines.append(f"final link arguments: {link.final_link_args}")
    return "\n".join(lines) + "\n"


def _graph(link: Link) -> tuple[list[Key], list[tuple[Key, Key]]]:
    """Nodes (backends and what they import) and import edges, in a stable order."""
    edges = sorted({(k, i) for k in link.backends() for i in link.modules[k].imports})
    nodes = sorted({k for k in link.backends()} | {i for _, i in edges})
    return nodes, edges


def dot(link: Link) -> str:
    """The import graph in Graphviz syntax: an edge A -> B when A's backend imports B."""
    nodes, edges = _graph(link)

    def node_id(key: Key) -> str:
        return f"o{key[1]}" if key[0] < 0 else f"a{key[0]}m{key[1]}"

    lines = ["digraph imports {", "  rankdir=LR;", "  node [fontsize=10];"]
    for key in nodes:
        m = link.modules[key]
        shape = "box" if key[0] < 0 else "ellipse"
        label = m.name.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'  {node_id(key)} [label="{label}", shape={shape}];')
    lines += [f"  {node_id(a)} -> {node_id(b)};" for a, b in edges]
    lines.append("}")
    return "\n".join(lines) + "\n"


SVG_NODE_LIMIT = 300
"""Beyond this many nodes the SVG keeps the most connected ones: a circle stays legible."""


def svg(link: Link) -> str:
    """The import graph on a circle: objects blue, archive members green, edges importer to
    imported. Self-contained SVG, no Graphviz needed."""
    nodes, edges = _graph(link)
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
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6"'
        ' markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#888"/>'
        "</marker></defs>",
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
        colour = "#3b6fb6" if key[0] < 0 else "#3c9a5f"
        degrees = math.degrees(angle)
        flip = 90 < degrees < 270
        rotate = degrees + 180 if flip else degrees
        anchor = "end" if flip else "start"
        dx = -8 if flip else 8
        out.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{colour}">'
            f"<title>{escape(f'{m.name} ({m.label})')}</title></circle>"
        )
        out.append(  # rotated about the node, so the label points away from the centre
            f'<text x="{x + dx:.1f}" y="{y:.1f}" text-anchor="{anchor}" dominant-baseline="middle"'
            f' transform="rotate({rotate:.1f} {x:.1f} {y:.1f})">{escape(m.name)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="dist-lto inspect",
        description=(
            "Summarise a planned link: objects (bitcode vs native), archives and members"
            " (used, native, never loaded), imports per backend (min/median/p95/max), the"
            " most-imported modules and the longest backends by input size. Reads META and"
            " the plans it declares (written by `dist-lto plan`)."
        ),
        epilog="exit status: 0 success, 2 bad input (missing or malformed meta or plan)",
    )
    parser.add_argument("meta", metavar="META", help="the meta file of a planned link")
    parser.add_argument(
        "--top",
        type=int,
        default=10,
        metavar="N",
        help="how many modules and archives to list (default 10)",
    )
    parser.add_argument("--dot", metavar="FILE", help="write the import graph for Graphviz")
    parser.add_argument(
        "--svg", metavar="FILE", help="draw the import graph as a self-contained SVG (no Graphviz)"
    )
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error("--top must be at least 1")
    link = load(args.meta)
    sys.stdout.write(summary(link, args.top))
    if args.dot:
        write_atomic(args.dot, dot(link).encode())
    if args.svg:
        write_atomic(args.svg, svg(link).encode())
    return 0
