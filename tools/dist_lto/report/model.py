"""A link as an import graph: every module, what each backend imports, and the
questions asked of it (who imports a module, how far a module's neighbourhood reaches).

Read from a planned link (a meta file and its plans, `dist-lto plan`'s or Buck2's) or
from the DTLTO job file LLD handed its distributor (kept by `-Wl,--save-temps`), which
needs no build system. Archive members are named as linkers name them,
`libfoo.a(bar.o)`, whatever file holds their bytes."""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field

from dist_lto.errors import BadInput
from dist_lto.formats.jobfile import JobFile, parse_job_file
from dist_lto.formats.jsonio import read_json
from dist_lto.formats.manifest import archive_manifest
from dist_lto.formats.meta import read_meta
from dist_lto.formats.planned_link import Key, read_planned_link


@dataclass
class Module:
    name: str
    """As a reader knows it: an object's path, an archive member as `libfoo.a(bar.o)`."""
    label: str
    """Where it sits in the link (`object 1`, `archive 0 member 2`, `job 4`)."""
    size: int | None
    is_bitcode: bool
    backend: bool
    imports: list[Key] = field(default_factory=list)
    path: str = ""
    """The file as the plans or the job file spell it (default: `name`)."""
    never_loaded: bool = False
    """A bitcode archive member the link never pulled in (it gets no backend)."""

    def __post_init__(self) -> None:
        self.path = self.path or self.name


@dataclass
class Link:
    """A link as `inspect` sees it: every module, keyed by object or member."""

    meta: str
    """The file it was read from (a meta file or a job file)."""
    modules: dict[Key, Module]
    archives: dict[int, tuple[str, Counter[str]]]
    """By index: the archive (its manifest, or its path in a job file) and how many of
    its members are `opt` (a backend), `native` or `unused` (never loaded)."""
    final_link_args: str | None
    kind: str = "planned link"
    linker_output: str | None = None

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
        """The module called `name` (`libfoo.a(bar.o)`, or its path as the plans or the
        job file give it); BadInput naming the closest names when there is none."""
        found = [k for k, m in self.modules.items() if name in (m.name, m.path)]
        if not found:
            import difflib

            spellings = sorted({s for m in self.modules.values() for s in (m.name, m.path)})
            close = difflib.get_close_matches(name, spellings, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise BadInput(f"{self.meta}: no module {name!r} in this link{hint}")
        if len(found) > 1:
            raise BadInput(f"{self.meta}: {len(found)} modules are named {name!r}")
        return found[0]


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def load(path: str) -> Link:
    """The link a meta file (with its plans) or a DTLTO job file describes."""
    doc = read_json(path, "meta or DTLTO job file")
    if isinstance(doc, dict) and "jobs" in doc and "common" in doc:
        return _from_job_file(parse_job_file(doc, path))
    return _from_meta(path)


def member_name(archive: str, member: str) -> str:
    """`libfoo.a(bar.o)`: how linkers and `nm` name an archive member."""
    return f"{archive}({os.path.basename(member)})"


def _from_meta(meta_path: str) -> Link:
    """Read the meta file and every plan it declares (checked against each other)."""
    planned = read_planned_link(read_meta(meta_path))
    sizes: dict[Key, int | None] = {}
    names: dict[Key, str] = {}
    archives: dict[int, tuple[str, Counter[str]]] = {}
    given = {a.index: a for a in planned.meta.archives()}
    for archive in planned.archives:
        manifest = archive_manifest(given[archive.index], meta_path)
        members = {m.position: m for m in manifest.members}
        counts: Counter[str] = Counter()
        for key in archive.members:
            if key[1] in members:
                sizes[key] = members[key[1]].size
                names[key] = member_name(manifest.archive, members[key[1]].name)
            member = planned.modules[key]
            counts["opt" if member.backend else "unused" if member.is_bitcode else "native"] += 1
        archives[archive.index] = (archive.manifest or manifest.file, counts)
    modules = {
        key: Module(
            name=names.get(key, m.path),
            label=f"object {key[1]}" if key[0] == -1 else f"archive {key[0]} member {key[1]}",
            size=sizes[key] if key in sizes else _size(m.path),
            is_bitcode=m.is_bitcode,
            backend=m.backend,
            imports=list(m.imports),
            path=m.path,
            never_loaded=key[0] >= 0 and m.is_bitcode and not m.backend,
        )
        for key, m in planned.modules.items()
    }
    return Link(meta_path, modules, archives, planned.final_link_args)


LLD_MEMBER = re.compile(
    r"^(?P<archive>.+)\((?P<member>[^()]+) at \d+\)(?:\.\d+\.[0-9A-Fa-f]+\.o)?$"
)
"""How LLD names an archive member it writes out for a DTLTO job:
`DIR/libfoo.a(bar.o at OFFSET).TASK.PID.o` (its index step: without the suffix)."""


def _from_job_file(files: JobFile) -> Link:
    """A link from the job file LLD wrote for its distributor: each job's module is a
    backend, `inputs[2:]` what it imports. Modules are keyed in the order they first
    appear; members of one archive share its index. Sizes are read where the paths
    lead from here, else from the job file's directory (LLD's, when it wrote it next to
    the output), else unknown."""
    keys: dict[str, Key] = {}
    modules: dict[Key, Module] = {}
    archives: dict[str, int] = {}
    counts: dict[int, Counter[str]] = {}
    taken: Counter[int] = Counter()
    """Keys given so far per archive index (-1: objects)."""
    base = os.path.dirname(files.path)

    def key_of(path: str, label: str) -> Key:
        if path in keys:
            return keys[path]
        found = LLD_MEMBER.match(path)
        if found:
            index = archives.setdefault(found["archive"], len(archives))
            counts.setdefault(index, Counter())
            name = member_name(found["archive"], found["member"])
        else:
            index, name = -1, path
        key = (index, taken[index])
        taken[index] += 1
        size = _size(path)
        if size is None and base and not os.path.isabs(path):
            size = _size(os.path.join(base, path))
        keys[path] = key
        modules[key] = Module(name, label, size, True, False, path=path)
        return key

    for job in files.jobs:
        modules[key_of(job.module, f"job {job.number}")].backend = True
    for job in files.jobs:
        imports = [key_of(path, "no job (LLD's cache)") for path in job.inputs[2:]]
        modules[keys[job.module]].imports = imports
    for key, module in modules.items():
        if key[0] >= 0 and module.backend:
            counts[key[0]]["opt"] += 1
    archive_rows = {i: (name, counts[i]) for name, i in archives.items()}
    return Link(files.path, modules, archive_rows, None, "DTLTO job file", files.linker_output)


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
