"""The text summary `dist-lto inspect` prints."""

from __future__ import annotations

from collections import Counter

from dist_lto.report.model import Key, Link, percentile
from dist_lto.report.timeline import Slice, Timeline


def human(size: int | None) -> str:
    if size is None:
        return "?"
    value = float(size)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024 or unit == "MiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def most_imported(link: Link) -> list[tuple[Key, int]]:
    """Modules by how many backends import them, most first (ties by key)."""
    imported = Counter(k for key in link.backends() for k in link.modules[key].imports)
    return sorted(imported.items(), key=lambda kv: (-kv[1], kv[0]))


def biggest_backends(link: Link) -> list[tuple[int | None, Key]]:
    """Backends by input size (module + imports), biggest first; unknown sizes last."""
    sized = [(link.input_size(k), k) for k in link.backends()]
    return sorted(sized, key=lambda sk: (-(sk[0] or -1), sk[1]))


def summary(link: Link, top: int) -> str:
    modules = link.modules
    objects = [m for (a, _), m in modules.items() if a < 0]
    members = [m for (a, _), m in modules.items() if a >= 0]
    backends = link.backends()
    lines = [f"{link.kind}: {link.meta}"]
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
        imported = most_imported(link)
        lines.append(f"most-imported modules (imported by how many backends, top {top}):")
        for key, count in imported[:top]:
            lines.append(f"  {count:6}  {modules[key].name}")
        if not imported:
            lines.append("  (no module imports another)")
        lines.append(f"longest backends by input size (module + imports, top {top}):")
        for size, key in biggest_backends(link)[:top]:
            m = modules[key]
            lines.append(f"  {human(size):>10}  {m.name} ({len(m.imports)} imports)")
    if link.final_link_args is not None:
        lines.append(f"final link arguments: {link.final_link_args}")
    if link.linker_output is not None:
        lines.append(f"linker output: {link.linker_output}")
    return "\n".join(lines) + "\n"


def seconds(microseconds: int) -> str:
    return f"{microseconds / 1e6:.3f} s"


def slice_names(link: Link, timeline: Timeline) -> dict[str, str]:
    """Each traced job's module by the name `inspect` shows it by (`libfoo.a(bar.o)`);
    BadInput when the trace is of another link (none of its jobs is a module here)."""
    from dist_lto.errors import BadInput

    by_path = {m.path: m.name for m in link.modules.values()}
    names = {s.name: by_path[s.name] for s in timeline.jobs if s.name in by_path}
    if timeline.jobs and not names:
        raise BadInput(
            f"{timeline.path}: none of its {len(timeline.jobs)} jobs is a module of {link.meta}"
        )
    return names


def _step(piece: Slice, names: dict[str, str], threads: dict[int, str]) -> str:
    where = threads.get(piece.thread, f"thread {piece.thread}")
    return f"{names.get(piece.name, piece.name)} ({piece.outcome}, {where})"


def time_summary(link: Link, timeline: Timeline, top: int) -> str:
    """The longest backends and the critical path, from a trace of this link."""
    names = slice_names(link, timeline)
    busy = sum(s.duration for s in timeline.jobs)
    workers = len({s.thread for s in timeline.jobs})
    lines = [
        f"where the time went ({timeline.path}): {seconds(timeline.wall)} wall,"
        f" {len(timeline.jobs)} backends on {workers} workers, {seconds(busy)} of backends",
        f"longest backends (top {top}):",
    ]
    for piece in timeline.longest(top):
        lines.append(f"  {seconds(piece.duration):>10}  {_step(piece, names, timeline.threads)}")
    path = timeline.critical_path()
    on_path = sum(s.duration for s in path)
    lines.append(
        f"critical path ({len(path)} in a row, {seconds(on_path)} of the"
        f" {seconds(timeline.wall)} wall; the rest is before and between them):"
    )
    for piece in path:
        lines.append(
            f"  at {seconds(piece.start):>10}  {seconds(piece.duration):>10}"
            f"  {_step(piece, names, timeline.threads)}"
        )
    return "\n".join(lines) + "\n"
