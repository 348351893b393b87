"""The HTML report of a planned link: one self-contained page (inline CSS and SVG, no
script, nothing fetched) that stays readable at tens of thousands of modules, because
it shows rankings, distributions and one module's neighbourhood, never the whole graph."""

from __future__ import annotations

from collections import Counter
from html import escape

from dist_lto.report.drawing import bars_svg, neighbourhood_svg, timeline_svg
from dist_lto.report.model import Key, Link, Neighbourhood, buckets, percentile
from dist_lto.report.text import biggest_backends, human, most_imported, seconds, slice_names
from dist_lto.report.timeline import Slice, Timeline

LIST_LIMIT = 200
"""Never-loaded members listed by name; beyond this they are counted per archive."""

_STYLE = """
body { font-family: sans-serif; margin: 1.5em 2em; color: #222; max-width: 110em; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .4em 0; }
th, td { padding: .15em .7em; border-bottom: 1px solid #ddd; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
code { font-size: .95em; word-break: break-all; }
.facts td:first-child { color: #555; }
.charts { display: flex; flex-wrap: wrap; gap: 2em; }
.graph { overflow: auto; border: 1px solid #ddd; }
"""


def _stats(values: list[int]) -> str:
    if not values:
        return "none"
    v = sorted(values)
    median = v[(len(v) - 1) // 2]
    return f"min {v[0]}, median {median}, p95 {percentile(v, 0.95)}, max {v[-1]}"


def _module_cell(link: Link, key: Key) -> str:
    m = link.modules[key]
    where = m.label if m.path == m.name else f"{m.label}: {m.path}"
    return f"<td><code>{escape(m.name)}</code></td><td>{escape(where)}</td>"


def _table(head: list[str], rows: list[str]) -> str:
    if not rows:
        return "<p>(none)</p>"
    cells = "".join(f"<th>{escape(h)}</th>" for h in head)
    return f"<table><tr>{cells}</tr>{''.join(f'<tr>{r}</tr>' for r in rows)}</table>"


def _time_section(link: Link, timeline: Timeline, top: int) -> list[str]:
    """Where the time went: the jobs over time, the longest backends, the critical path."""
    names = slice_names(link, timeline)
    path = timeline.critical_path()

    def row(piece: Slice, *first: str) -> str:
        where = timeline.threads.get(piece.thread, f"thread {piece.thread}")
        cells = "".join(f'<td class="n">{escape(c)}</td>' for c in first)
        return (
            f'{cells}<td class="n">{escape(seconds(piece.duration))}</td>'
            f"<td><code>{escape(names.get(piece.name, piece.name))}</code></td>"
            f"<td>{escape(piece.outcome)}</td><td>{escape(where)}</td>"
        )

    return [
        f"<h2>Where the time went (<code>{escape(timeline.path)}</code>)</h2>",
        f"<p>{len(timeline.jobs)} backends, {escape(seconds(timeline.wall))} wall. The"
        " critical path (red) is the chain of jobs, each waiting for the one before it on"
        " its worker, that decided when the link ended.</p>",
        f'<div class="graph">{timeline_svg(timeline, names)}</div>',
        f"<h2>Longest backends (top {top})</h2>",
        _table(["time", "module", "outcome", "worker"],
               [row(piece) for piece in timeline.longest(top)]),
        f"<h2>Critical path ({len(path)} slices)</h2>",
        _table(["start", "time", "module", "outcome", "worker"],
               [row(piece, seconds(piece.start)) for piece in path]),
    ]  # fmt: skip


def report(
    link: Link, top: int, around: Neighbourhood | None, timeline: Timeline | None = None
) -> str:
    """The whole page; `around` is the neighbourhood to draw (None: a link without
    imports); `timeline`, a trace of the link, adds where its time went."""
    modules = link.modules
    backends = link.backends()
    fan_out = [len(modules[k].imports) for k in backends]
    importers = link.importers()
    fan_in = [len(importers.get(k, ())) for k in backends]
    members = sum(1 for a, _ in modules if a >= 0)
    never = [k for k, m in sorted(modules.items()) if m.never_loaded]
    native = sum(1 for m in modules.values() if not m.is_bitcode)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>dist-lto inspect: {escape(link.meta)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>{escape(link.kind.capitalize())} <code>{escape(link.meta)}</code></h1>",
        '<table class="facts">',
        f'<tr><td>modules</td><td class="n">{len(modules)}</td></tr>',
        f'<tr><td>objects</td><td class="n">{len(modules) - members}</td></tr>',
        f'<tr><td>archives / members</td><td class="n">{len(link.archives)} / {members}</td></tr>',
        f'<tr><td>native (passed through)</td><td class="n">{native}</td></tr>',
        f'<tr><td>bitcode never loaded</td><td class="n">{len(never)}</td></tr>',
        f'<tr><td>backends</td><td class="n">{len(backends)}</td></tr>',
        f'<tr><td>import edges</td><td class="n">{sum(fan_out)}</td></tr>',
        "</table>",
    ]

    if timeline is not None:
        parts += _time_section(link, timeline, top)

    parts.append(f"<h2>Most-imported modules (top {top})</h2>")
    parts.append(
        "<p>A change to one of these reruns every backend that imports it.</p>"
        + _table(
            ["imported by", "module", "where"],
            [
                f'<td class="n">{c}</td>{_module_cell(link, k)}'
                for k, c in most_imported(link)[:top]
            ],
        )
    )

    ranked = sorted(backends, key=lambda k: (-len(modules[k].imports), k))[:top]
    parts.append(f"<h2>Top importers (top {top})</h2>")
    parts.append(
        _table(
            ["imports", "module", "where"],
            [
                f'<td class="n">{len(modules[k].imports)}</td>{_module_cell(link, k)}'
                for k in ranked
            ],
        )
    )

    parts.append("<h2>Fan-out and fan-in</h2>")
    parts.append(
        '<div class="charts"><div>'
        f"<p>Imports per backend (fan-out): {_stats(fan_out)}</p>"
        + bars_svg(buckets(fan_out), "backends by number of imports")
        + "</div><div>"
        + f"<p>Importing backends per module (fan-in): {_stats(fan_in)}</p>"
        + bars_svg(buckets(fan_in), "modules by number of backends importing them")
        + "</div></div>"
    )

    parts.append(f"<h2>Biggest backends by input size (top {top})</h2>")
    parts.append(
        "<p>The module plus every module it imports: the likely critical path.</p>"
        + _table(
            ["input", "imports", "module", "where"],
            [
                f'<td class="n">{escape(human(size))}</td>'
                f'<td class="n">{len(modules[k].imports)}</td>{_module_cell(link, k)}'
                for size, k in biggest_backends(link)[:top]
            ],
        )
    )

    parts.append(f"<h2>Never-loaded members ({len(never)})</h2>")
    parts.append("<p>Bitcode archive members the link did not pull in: they get no backend.</p>")
    per_archive = Counter(k[0] for k in never)
    parts.append(
        _table(
            ["archive", "manifest", "never loaded"],
            [
                f'<td class="n">{a}</td><td><code>{escape(link.archives[a][0])}</code></td>'
                f'<td class="n">{c}</td>'
                for a, c in sorted(per_archive.items())
            ],
        )
    )
    if never:
        listed = "".join(
            f"<li><code>{escape(modules[k].name)}</code></li>" for k in never[:LIST_LIMIT]
        )
        more = f"<p>… and {len(never) - LIST_LIMIT} more</p>" if len(never) > LIST_LIMIT else ""
        parts.append(f"<details><summary>names</summary><ul>{listed}</ul>{more}</details>")

    if around is not None:
        focus = modules[around.focus]
        parts.append(f"<h2>Neighbourhood of <code>{escape(focus.name)}</code></h2>")
        parts.append(
            f"<p>Modules within {around.depth} import step(s): those whose backends import it"
            " on the left, those it imports on the right (another module:"
            " <code>--focus MODULE</code>).</p>"
            f'<div class="graph">{neighbourhood_svg(link, around)}</div>'
        )

    if link.final_link_args is not None:
        parts.append("<h2>Final link arguments</h2>")
        parts.append(f"<p><code>{escape(link.final_link_args)}</code></p>")
    if link.linker_output is not None:
        parts.append("<h2>Linker output</h2>")
        parts.append(f"<p><code>{escape(link.linker_output)}</code></p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
