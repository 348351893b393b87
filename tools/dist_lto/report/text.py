"""The text summary `dist-lto inspect` prints."""

from __future__ import annotations

from collections import Counter

from dist_lto.report.model import Key, Link, percentile


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
        imported = most_imported(link)
        lines.append(f"most-imported modules (imported by how many backends, top {top}):")
        for key, count in imported[:top]:
            lines.append(f"  {count:6}  {modules[key].name} ({modules[key].label})")
        if not imported:
            lines.append("  (no module imports another)")
        lines.append(f"longest backends by input size (module + imports, top {top}):")
        for size, key in biggest_backends(link)[:top]:
            m = modules[key]
            lines.append(f"  {human(size):>10}  {m.name} ({m.label}, {len(m.imports)} imports)")
    lines.append(f"final link arguments: {link.final_link_args}")
    return "\n".join(lines) + "\n"
