"""A planned link as an import graph: every module, what each backend imports, and the
questions asked of it (who imports a module, how far a module's neighbourhood reaches)."""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass, field

from dist_lto.errors import BadInput
from dist_lto.formats.manifest import read_manifest
from dist_lto.formats.meta import read_meta
from dist_lto.formats.planned_link import Key, read_planned_link


@dataclass
class Module:
    name: str
    label: str
    size: int | None
    is_bitcode: bool
    backend: bool
    imports: list[Key] = field(default_factory=list)

    @property
    def never_loaded(self) -> bool:
        """A bitcode archive member the link never pulled in (it gets no backend)."""
        return self.is_bitcode and not self.backend and self.label.startswith("archive")


@dataclass
class Link:
    """A planned link as `inspect` sees it: every module, keyed by object or member."""

    meta: str
    modules: dict[Key, Module]
    archives: dict[int, tuple[str, Counter[str]]]
    final_link_args: str

    def backends(self) -> list[Key]:
        return sorted(k for k, m in self.modules.items() if m.backend)

    def input_size(self, key: Key) -> int | None:
        """Bytes of bitcode a backend reads: its module plus every module it imports."""
        sizes = [self.modules[k].size for k in [key, *self.modules[key].imports]]
        return None if any(s is None for s in sizes) else sum(s or 0 for s in sizes)

    def edges(self) -> list[tuple[Key, Key]]:
        """Import edges (importer, imported) of every backend, in a stable order."""
        return sorted({(k, i) for k in self.backends() for i in self.modules[k].imports})

    def importers(self) -> dict[Key, list[Key]]:
        """For each imported module, the backends that import it (ascending)."""
        by_module: dict[Key, list[Key]] = {}
        for k in self.backends():
            for i in self.modules[k].imports:
                by_module.setdefault(i, []).append(k)
        return by_module

    def find(self, name: str) -> Key:
        """The module spelled `name` (its path as the plans give it)."""
        found = [k for k, m in self.modules.items() if m.name == name]
        if not found:
            raise BadInput(f"{self.meta}: no module {name!r} in this link")
        if len(found) > 1:
            raise BadInput(f"{self.meta}: {len(found)} modules are named {name!r}")
        return found[0]


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def load(meta_path: str) -> Link:
    """Read the meta file and every plan it declares (checked against each other)."""
    planned = read_planned_link(read_meta(meta_path))
    sizes: dict[Key, int | None] = {}
    archives: dict[int, tuple[str, Counter[str]]] = {}
    for archive in planned.archives:
        members = {m.position: m.size for m in read_manifest(archive.manifest).members}
        counts: Counter[str] = Counter()
        for key in archive.members:
            sizes[key] = members.get(key[1])
            member = planned.modules[key]
            counts["opt" if member.backend else "unused" if member.is_bitcode else "native"] += 1
        archives[archive.index] = (archive.manifest, counts)
    modules = {
        key: Module(
            name=m.path,
            label=f"object {key[1]}" if key[0] == -1 else f"archive {key[0]} member {key[1]}",
            size=sizes[key] if key in sizes else _size(m.path),
            is_bitcode=m.is_bitcode,
            backend=m.backend,
            imports=list(m.imports),
        )
        for key, m in planned.modules.items()
    }
    return Link(meta_path, modules, archives, planned.final_link_args)


def percentile(sorted_values: list[int], fraction: float) -> int:
    """Nearest-rank percentile of an ascending list (not empty)."""
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def buckets(values: list[int]) -> list[tuple[str, int]]:
    """How many values fall in 0, 1, 2, 3-4, 5-8, 9-16, ... (doubling ranges, so a
    distribution with a long tail stays readable), up to the largest value."""
    counts: Counter[int] = Counter()
    for v in values:
        counts[0 if v == 0 else (v - 1).bit_length() + 1] += 1
    top = max(counts, default=0)
    rows = []
    for b in range(top + 1):
        low, high = (0, 0) if b == 0 else ((1 << (b - 2)) + 1 if b > 1 else 1, 1 << (b - 1))
        rows.append((str(low) if low == high else f"{low}-{high}", counts[b]))
    return rows


@dataclass
class Neighbourhood:
    """The modules within `depth` import steps of `focus`, by column: negative columns
    import (transitively) the focus, positive ones are imported by it. A module reached
    both ways stands on the imported side. `edges` join neighbouring columns."""

    focus: Key
    depth: int
    columns: dict[int, list[Key]]
    edges: list[tuple[Key, Key]]

    def keys(self) -> list[Key]:
        return sorted(k for column in self.columns.values() for k in column)


def neighbourhood(link: Link, focus: Key, depth: int) -> Neighbourhood:
    importers = link.importers()
    column: dict[Key, int] = {focus: 0}

    def walk(step: int, successors: dict[Key, list[Key]]) -> None:
        frontier = [focus]
        for distance in range(1, depth + 1):
            reached = []
            for k in frontier:
                for n in successors.get(k, ()):
                    if n not in column or (step > 0 and column[n] < 0):
                        column[n] = step * distance
                        reached.append(n)
            frontier = reached

    walk(-1, importers)
    walk(1, {k: m.imports for k, m in link.modules.items() if m.backend})
    columns: dict[int, list[Key]] = {}
    for k, c in sorted(column.items()):
        columns.setdefault(c, []).append(k)
    edges = [
        (k, i)
        for k in sorted(column)
        if link.modules[k].backend
        for i in link.modules[k].imports
        if i in column and column[i] == column[k] + 1
    ]
    return Neighbourhood(focus, depth, columns, edges)
