"""The planner: run (or replay) stock LLD's index step and turn its outputs into plans.

Reads the meta file (docs/plan.md), runs the index step on a line derived from it,
and turns LLD's list and `.imports` files into one plan per object, one per
archive, a link plan and the final link's argument file. Everything is read and
checked before the first output is written. File-system work dominates at scale,
so index files stay where LLD wrote them whenever that is their declared path.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import os
import posixpath
from collections.abc import Callable, Iterable, Iterator

from dist_lto.errors import BadInput, DistLtoError
from dist_lto.formats.jsonio import dumps
from dist_lto.formats.manifest import Member, archive_manifest
from dist_lto.formats.meta import ArchiveInput, Meta, ObjectInput, read_meta
from dist_lto.formats.plans import (
    LINK_PLAN_VERSION,
    PLAN_VERSION,
    ArchivePlan,
    ArchiveSummary,
    LinkPlan,
    MemberPlan,
    ObjectPlan,
)
from dist_lto.formats.response_file import response_file
from dist_lto.fsutil import move, write_atomic, write_failure
from dist_lto.llvm import driver_line, index_step, linkline
from dist_lto.llvm.index_step import DirListing, Layout
from dist_lto.path_spelling import all_plain, is_plain, norm
from dist_lto.planning.modules import (
    POSITION_MASK,
    Archive,
    Module,
    member_rels,
    module_code,
    module_size,
    non_ascii_module,
    relative_inside,
)
from dist_lto.process import parts
from dist_lto.whole_files import WholeWriter, write_direct

_NO_IMPORTS: tuple[list[int], list[int], list[tuple[int, int]]] = ([], [], [])


class Planner:
    def __init__(
        self, meta: Meta, command: list[str] | None = None, declaration_imports: bool = True
    ) -> None:
        self.meta = meta
        self.command = command
        """The COMMAND the plans are made from (None: replayed without one)."""
        self.declaration_imports = declaration_imports
        """Whether the index step imports declarations (`index_step.DECLARATION_IMPORTS`)."""
        self.objects = meta.objects()
        self.modules: dict[str, Module] = {}
        self.object_modules: dict[int, Module] = {}
        self.archives: dict[int, Archive] = {}
        whole = linkline.whole_archives(meta)
        modules = self.modules
        for o in self.objects:
            module = Module(o.path, -1, o.index, o)
            self._add(module)
            self.object_modules[o.index] = module
        declared: dict[str, ArchiveInput] = {}
        for a in meta.archives():
            if a.manifest is not None:
                first = declared.setdefault(posixpath.normpath(a.manifest), a)
                if first is not a:
                    raise BadInput(
                        f"{meta.file}: {a.pointer}: archive {a.index} repeats archive"
                        f" {first.index} ({first.pointer}), manifest {a.manifest!r}: declare"
                        " each archive once (LLD loads an archive's members once however often"
                        " the link line names it, so dropping the repeat changes nothing)"
                    )
            manifest = archive_manifest(a, meta.file)
            # Objects given as such are spelled as the backends spell them already.
            base = None if a.manifest is None else posixpath.dirname(a.manifest)
            members: list[tuple[Member, Module]] = []
            for m in manifest.members:
                spelled = m.path
                if base is not None:
                    spelled = posixpath.normpath(posixpath.join(base, m.path))
                module = Module(spelled, a.index, m.position, (manifest, m))
                self._add(module)
                members.append((m, module))
            rels = member_rels(manifest.members, by_position=a.objects is not None)
            self.archives[a.index] = Archive(a, manifest, whole[a.index], members, rels)
        for module in modules.values():
            if not module.name.isascii():
                raise non_ascii_module(module.name, module.describe(meta.file))
        self.plain = all_plain(list(modules))
        if not self.plain:
            self._normalised()  # reports two spellings of one file
        self.layout = Layout.for_inputs(meta.index_dir, [] if self.plain else modules)
        self.largest: Module | None = None
        """The largest loaded bitcode module, once the index step is checked."""
        self.placed: list[str] = []
        """Index files the index step put straight at declared paths outside its layout."""

    def _add(self, module: Module) -> None:
        other = self.modules.setdefault(module.name, module)
        if other is not module:
            raise self._same_file(module, other)

    def _same_file(self, module: Module, other: Module) -> BadInput:
        file = self.meta.file
        return BadInput(
            f"module path mismatch: {module.describe(file)} is spelled {module.name!r},"
            f" {other.describe(file)} names the same file as {other.name!r}"
        )

    def _normalised(self) -> dict[str, Module]:
        """Normalised spelling -> module; raises when two modules name the same file."""
        result: dict[str, Module] = {}
        for module in self.modules.values():
            other = result.setdefault(posixpath.normpath(module.name), module)
            if other is not module:
                raise self._same_file(module, other)
        return result

    def _unknown(self, name: str, source: str) -> BadInput:
        """Why the index step named a module the meta does not declare."""
        known = self._normalised().get(posixpath.normpath(name))
        if known is not None:
            return BadInput(
                f"{source}: module path mismatch: the index step named {name!r},"
                f" but {known.describe(self.meta.file)} spells it {known.name!r}"
            )
        if name.endswith(")") and " at " in name and "(" in name:
            return BadInput(
                f"{source}: bitcode member {name!r} comes from an archive given as plain args;"
                " prepare it with `dist-lto prepare` and declare it as an archive in the meta"
            )
        return BadInput(
            f"{source}: bitcode module {name!r} is on the link line but not declared"
            " in the meta (declare it as an object)"
        )

    # -- layout -------------------------------------------------------------------------

    def place_index_files(self) -> None:
        """Decide where each possible index file is written and where it belongs."""
        layout = self.layout
        for o in self.objects:
            module = self.object_modules[o.index]
            module.index_src = src = layout.index_file(o.path)
            dst = o.index_output
            module.index_dst = src if dst == src or norm(dst) == norm(src) else dst
        for archive in self.archives.values():
            index_dir = norm(archive.input.index_dir)
            for (member, module), rel in zip(archive.members, archive.rels, strict=True):
                if not member.bitcode:
                    continue
                module.index_src = src = layout.index_file(module.name)
                inside = relative_inside(norm(src), index_dir)
                module.index_dst = (
                    src
                    if inside is not None
                    else posixpath.join(archive.input.index_dir, rel + index_step.INDEX_SUFFIX)
                )

    def outputs_are_not_members(self) -> None:
        """Refuse a declared output at an archive member's path: members are listed in
        their manifests, not in the meta, so the meta's own check cannot see them, and a
        replay would move an index file over the member. Spellings are compared
        normalised (one set lookup per output: a link of 100,000 objects pays no
        `realpath`)."""
        members = {
            norm(module.name): module
            for archive in self.archives.values()
            for _, module in archive.members
        }
        if not members:
            return
        file = self.meta.file
        outputs = [(o.pointer, key, getattr(o, key)) for o in self.objects
                   for key in ("index_output", "plan_output", "opt_output")]  # fmt: skip
        outputs += [(a.input.pointer, "plan_output", a.input.plan_output)
                    for a in self.archives.values()]  # fmt: skip
        outputs += [("", "link_plan_output", self.meta.link_plan_output),
                    ("", "final_link_args_output", self.meta.final_link_args_output)]  # fmt: skip
        for pointer, key, path in outputs:
            member = members.get(norm(path))
            if member is not None:
                where = member.describe(file)
                raise BadInput(
                    f"{file}: {pointer}/{key}: output {path!r} is an input: {where};"
                    " nothing was written"
                )

    def own_outputs_are_not_inputs(self) -> None:
        """Refuse an input (object, member, manifest, the meta file) at a path the index
        step itself writes under the index directory (`index.args`, `index.list`, an
        index or imports file): the meta cannot declare those, so its own check misses
        them, and the index step would overwrite the input before anything failed."""
        layout, file = self.layout, self.meta.file
        own = {norm(layout.args_file): "its argument file", norm(layout.list_file): "its list"}
        prefix = norm(layout.prefix.rstrip("/")) + "/"
        inputs = [(module.name, module.describe(file)) for module in self.modules.values()]
        inputs += [(a.input.manifest, f"{file}: {a.input.pointer} (its manifest)")
                   for a in self.archives.values() if a.input.manifest is not None]  # fmt: skip
        inputs.append((file, "the meta file"))
        for path, where in inputs:
            spelled = norm(path)
            what = own.get(spelled)
            if what is None and spelled.startswith(prefix):
                for suffix, kind in ((index_step.INDEX_SUFFIX, "index"),
                                     (index_step.IMPORTS_SUFFIX, "imports list")):  # fmt: skip
                    module = spelled[len(prefix) : -len(suffix)]
                    if spelled.endswith(suffix) and module in self.modules:
                        what = f"the {kind} of {module!r}"
            if what is not None:
                raise BadInput(
                    f"{where}: {path!r} is where the index step writes {what} (under the"
                    f" index_dir {self.meta.index_dir!r}); it would be overwritten"
                )

    def archive_index_name(self, archive: Archive, module: Module, rel: str) -> str:
        if module.index_dst == module.index_src:
            inside = relative_inside(norm(module.index_src), norm(archive.input.index_dir))
            if inside is not None:
                return inside
        return rel + index_step.INDEX_SUFFIX

    # -- the index step -----------------------------------------------------------------

    def index_line(
        self, raw_linker: bool, flags: Callable[[list[str]], list[str]] = list
    ) -> list[str]:
        def archive_args(a: ArchiveInput) -> list[str]:
            archive = self.archives[a.index]
            paths = [module.name for _, module in archive.members]
            return paths if archive.whole else linkline.lib(paths, raw_linker)

        return linkline.render(self.meta, lambda o: o.path, archive_args, flags)

    def direct_index(self, command: list[str]) -> index_step.Direct | None:
        """The index step as the linker's own command, when this process knows the line
        behind the driver `command` (`driver_line.known`) and the meta's flags are all
        ones the driver copies in place; None: `command` runs it."""
        linker = driver_line.known(command)
        if linker is None:
            return None
        try:
            inputs = self.index_line(True, _linker_inputs)
        except _NotInPlace:
            return None
        return index_step.Direct(list(linker.before), inputs, list(linker.after))

    def run_index(self, command: list[str], hold: index_step.Hold) -> None:
        line = self.index_line(index_step.is_raw_linker(command))
        # Held first: a plan that finds the directory busy fails before the clean-up
        # below, which would remove the index files of the plan that holds it.
        hold.take(create=True)
        places = {m.index_src: m.index_dst for m in self.modules.values()
                  if m.index_src != m.index_dst}  # fmt: skip
        self.placed = list(places.values())
        try:
            index_step.run(command, line, self.layout, self.declaration_imports, hold, places,
                           self.direct_index(command))  # fmt: skip
        except DistLtoError:
            for module in self.modules.values():
                if module.index_src and module.index_src == module.index_dst:
                    with contextlib.suppress(OSError):
                        os.unlink(module.index_src)
            raise

    def check_index(self, replay: bool) -> None:
        """Mark loaded modules and check that every index file exists (no imports yet):
        where LLD wrote it when replaying, else where `run_index` placed it."""
        layout = self.layout
        prefix = layout.prefix
        for entry in index_step.read_list(layout):
            name = entry[len(prefix) :] if entry.startswith(prefix) else entry
            module = self.modules.get(name)
            if module is None:
                raise self._unknown(name, layout.list_file)
            module.loaded = True
        for o in self.objects:
            module = self.object_modules[o.index]
            if module.loaded:
                continue
            if index_step.is_bitcode_file(o.path):
                raise BadInput(
                    f"{module.describe(self.meta.file)}: {o.path!r} is bitcode but the index"
                    f" step did not index it (not in {layout.list_file})"
                )
            module.index_src = module.index_dst = ""  # native: no index file
        for archive in self.archives.values():
            for member, module in archive.members:
                if module.loaded and not member.bitcode:
                    raise BadInput(
                        f"{module.describe(self.meta.file)}: marked native in the manifest"
                        " but the index step loaded it as bitcode"
                    )
        listing = DirListing()
        plain = self.plain and is_plain(layout.prefix.rstrip("/"))
        for module in self.modules.values():
            if not module.index_src:
                continue
            in_place = module.index_dst == module.index_src
            if (in_place or replay) and listing.exists(module.index_src, plain):
                continue
            if not in_place and listing.exists(module.index_dst):
                module.index_src = module.index_dst  # placed already
                continue
            raise BadInput(
                f"{module.describe(self.meta.file)}: index file missing for bitcode module"
                f" {module.name!r}"
                f" (expected {module.index_src if replay else module.index_dst})"
            )
        self.codes = {name: module_code(m) for name, m in self.modules.items()}

    def read_imports(self, modules: Iterable[Module]) -> None:
        """Read the `.imports` of each loaded module among `modules`."""
        codes = self.codes
        imports_file = self.layout.imports_file
        read_imports = index_step.read_imports
        for module in modules:
            if module.loaded:
                path = imports_file(module.name)
                names = read_imports(path)
                try:
                    module.imports = [codes[name] for name in names]
                except KeyError:
                    unknown = next(n for n in names if n not in codes)
                    raise self._unknown(unknown, path) from None

    def find_largest(self) -> None:
        """The largest module the index step loaded, by size (the first of equals): in-process
        LLD starts its backends largest first, since the largest tends to end last; the
        plans say which it is, so that a build system can start it without queueing."""
        largest, most = None, -1
        for module in self.modules.values():
            if module.loaded:
                module.size = size = module_size(module)
                if size > most:
                    largest, most = module, size
        self.largest = largest

    def member_modules(self) -> list[Module]:
        return [m for archive in self.archives.values() for _, m in archive.members]

    # -- outputs ------------------------------------------------------------------------

    @staticmethod
    def imports_of(module: Module) -> tuple[list[int], list[int], list[tuple[int, int]]]:
        """Sorted object indices, archive indices and (archive, position) pairs imported.

        LLD names each imported module once, so no duplicates need removing; one sort
        of the codes puts members (negative) before objects."""
        codes = module.imports
        if not codes:
            return _NO_IMPORTS
        codes = sorted(codes)
        if codes[0] >= 0:
            return codes, [], []
        split = bisect.bisect_left(codes, 0)
        members = [((-c - 1) >> 32, (-c - 1) & POSITION_MASK) for c in reversed(codes[:split])]
        return codes[split:], sorted({a for a, _ in members}), members

    def object_plan(self, o: ObjectInput) -> ObjectPlan:
        module = self.object_modules[o.index]
        objects, archives, members = self.imports_of(module)
        return {
            "version": PLAN_VERSION,
            "index": o.index,
            "path": o.path,
            "is_bitcode": module.loaded,
            "index_file": o.index_output if module.loaded else None,
            "imports": objects,
            "archive_imports": archives,
            "member_imports": members,  # type: ignore[typeddict-item]
            "opt_output": o.opt_output,
            "largest": module is self.largest,
            "size": module.size,
        }

    def archive_plan(self, archive: Archive) -> ArchivePlan:
        plans: list[MemberPlan] = []
        for (member, module), rel in zip(archive.members, archive.rels, strict=True):
            opt = module.loaded
            objects, archives, members = self.imports_of(module)
            plans.append(
                {
                    "position": member.position,
                    "name": member.name,
                    "path": member.path,
                    "input": module.name,
                    "is_bitcode": member.bitcode,
                    "opt": opt,
                    "index_file": (
                        self.archive_index_name(archive, module, rel) if member.bitcode else None
                    ),
                    "opt_object": rel if opt else None,
                    "imports": objects,
                    "archive_imports": archives,
                    "member_imports": members,  # type: ignore[typeddict-item]
                    "largest": module is self.largest,
                    "size": module.size,
                }
            )
        a = archive.input
        return {
            "version": PLAN_VERSION,
            "index": a.index,
            "manifest": a.manifest,
            "index_dir": a.index_dir,
            "opt_objects_dir": a.opt_objects_dir,
            "whole": archive.whole,
            "members": plans,
        }

    def final_line(self, raw_linker: bool) -> list[str]:
        def object_arg(o: ObjectInput) -> str:
            return o.opt_output if self.object_modules[o.index].loaded else o.path

        def archive_args(a: ArchiveInput) -> list[str]:
            archive = self.archives[a.index]
            members = []
            for (member, module), rel in zip(archive.members, archive.rels, strict=True):
                if not member.bitcode:
                    members.append(linkline.FinalMember(module.name, lazy=True))
                elif module.loaded:
                    path = posixpath.join(a.opt_objects_dir, rel)
                    members.append(linkline.FinalMember(path, lazy=False))
            return linkline.final_archive_args(members, archive.whole, raw_linker)

        return linkline.render(self.meta, object_arg, archive_args)

    def link_plan(self) -> LinkPlan:
        summaries: list[ArchiveSummary] = []
        for index in sorted(self.archives):
            members = self.archives[index].members
            summaries.append(
                {
                    "index": index,
                    "opt_members": sum(1 for _, m in members if m.loaded),
                    "native_members": sum(1 for b, _ in members if not b.bitcode),
                    "unused_members": sum(1 for b, m in members if b.bitcode and not m.loaded),
                }
            )
        modules = self.object_modules
        return {
            "version": LINK_PLAN_VERSION,
            "bitcode_objects": sorted(i for i, m in modules.items() if m.loaded),
            "native_objects": sorted(i for i, m in modules.items() if not m.loaded),
            "archives": summaries,
            "final_link_args": self.meta.final_link_args_output,
            "command": self.command,
            "declaration_imports": self.declaration_imports,
        }

    def move_index_files(self) -> None:
        """Rename index files that LLD could not write at their declared paths (replaying:
        a plan that runs the index step places them as it publishes)."""
        dirs = Dirs()
        for module in self.modules.values():
            if module.index_src != module.index_dst:
                dirs.ensure_parent(module.index_dst)
                move(module.index_src, module.index_dst)

    def remove_placed_index_files(self) -> None:
        """Remove the index files `run_index` put at declared paths outside its layout: a
        plan that fails or is stopped after its index step leaves index files only where
        LLD writes them."""
        for path in self.placed:
            with contextlib.suppress(OSError):
                os.unlink(path)

    def object_outputs(self, objects: list[ObjectInput]) -> list[str]:
        """What `write_objects(objects)` writes (to remove it again after a failure)."""
        paths = [o.plan_output for o in objects]
        paths += [o.index_output for o in objects if not self.object_modules[o.index].loaded]
        return paths

    def write_objects(self, objects: list[ObjectInput]) -> None:
        """Write the plans of `objects` (and empty index files for native ones). A plan
        appears complete or not at all (`whole_files.WholeWriter`), so a planner killed at any point
        leaves no empty or partial plan (an empty index file is complete as created). On
        failure what was written is removed."""
        dirs = Dirs()
        writer = WholeWriter()
        try:
            for o in objects:
                if not self.object_modules[o.index].loaded:
                    dirs.ensure_parent(o.index_output)
                    write_direct(o.index_output, b"")
                writer.write(o.plan_output, dumps(self.object_plan(o)))
        except BaseException:
            parts.remove_files(self.object_outputs(objects))
            raise
        finally:
            writer.close()

    def write_link(self, raw_linker: bool) -> None:
        """Write the archive plans, the argument file and, last, the link plan (atomically)."""
        dirs = Dirs()
        written: list[str] = []
        try:
            for archive in self.archives.values():
                os.makedirs(archive.input.index_dir, exist_ok=True)
                dirs.ensure_parent(archive.input.plan_output)
                write_atomic(archive.input.plan_output, dumps(self.archive_plan(archive)))
                written.append(archive.input.plan_output)
            args_output = self.meta.final_link_args_output
            dirs.ensure_parent(args_output)
            write_atomic(args_output, response_file(self.final_line(raw_linker)))
            written.append(args_output)
            dirs.ensure_parent(self.meta.link_plan_output)
            write_atomic(self.meta.link_plan_output, dumps(self.link_plan()))
        except BaseException:
            parts.remove_files(written)
            raise


class _NotInPlace(Exception):
    """The meta holds a driver flag that the driver does not copy into the linker's line
    in place (`driver_line.linker_inputs`)."""


def _linker_inputs(words: list[str]) -> list[str]:
    found = driver_line.linker_inputs(words)
    if found is None:
        raise _NotInPlace
    return found


class Dirs:
    """Creates each output directory once."""

    def __init__(self) -> None:
        self.done: set[str] = set()

    def ensure_parent(self, path: str) -> None:
        parent = path.rpartition("/")[0]
        if parent and parent not in self.done:
            os.makedirs(parent, exist_ok=True)
            self.done.add(parent)


PARALLEL_MIN_OBJECTS = 8192
"""Below this many objects the planner works in one process."""


def default_jobs() -> int:
    return min(len(os.sched_getaffinity(0)), 8)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a planner run, which allocates ~10 objects
    per module and frees nothing early, and back as the caller had it afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def plan(
    meta_path: str,
    command: list[str],
    *,
    replay: bool,
    jobs: int = 0,
    declaration_imports: bool = True,
) -> None:
    """Plan the link described by `meta_path`; run `command` as the index step unless replaying
    (with `DECLARATION_IMPORTS` unless `declaration_imports` is False).

    Everything is read and checked before the first output is written. With `jobs` > 1
    (0: one per CPU for a large link), worker processes each read the imports of a share
    of the objects and write their plans, in step with this process (`process/parts.py`).
    """
    try:
        with _collector_paused():
            _plan(meta_path, command, replay=replay, jobs=jobs, declarations=declaration_imports)
    except OSError as err:  # what could not be written was removed again by then
        raise write_failure(err) from None


def indexed(
    meta: Meta,
    command: list[str],
    write_objects: Callable[[Planner, list[ObjectInput]], None],
    object_outputs: Callable[[Planner, list[ObjectInput]], list[str]],
    *,
    jobs: int = 0,
) -> Planner:
    """Everything `plan` does up to its object plans, which `write_objects` writes (and
    `object_outputs` names) in formats of the caller's own (the upstream Buck2 route):
    the meta read and checked, the index step run and checked, every `.imports` read,
    index files in place, split over `jobs` processes as `plan` splits them. The rest
    (archive plans, final line, link plan) the caller writes from `Planner.archive_plan`,
    `final_line` and `link_plan`."""
    try:
        with (
            _collector_paused(),
            index_step.holding(meta.index_dir, replay=False) as hold,
            _checked(meta, command, hold, replay=False, large=jobs != 1) as planner,
        ):
            _object_plans(
                planner,
                lambda share: write_objects(planner, share),
                lambda share: object_outputs(planner, share),
                jobs,
            )
    except OSError as err:
        raise write_failure(err) from None
    return planner


def _plan(
    meta_path: str, command: list[str], *, replay: bool, jobs: int, declarations: bool
) -> None:
    meta = read_meta(meta_path)
    with (
        index_step.holding(meta.index_dir, replay) as hold,
        _checked(
            meta, command, hold, replay=replay, large=jobs != 1, declarations=declarations
        ) as planner,
    ):
        _write_plans(planner, command, jobs)


@contextlib.contextmanager
def _checked(
    meta: Meta,
    command: list[str],
    hold: index_step.Hold,
    *,
    replay: bool,
    large: bool,
    declarations: bool = True,
) -> Iterator[Planner]:
    """A planner whose index step has run (or, replaying, had run) and been checked, for
    the caller to write its plans with. `large`: for a large link, prefetch the `.imports`
    while checking. A failure or stop after the index step, here or in the caller, removes
    the index files it placed outside its layout."""
    prefetch: index_step.ImportsPrefetch | None = None
    large = large and len(meta.objects()) >= PARALLEL_MIN_OBJECTS
    list_file = posixpath.join(meta.index_dir, index_step.LIST_NAME)
    planner = Planner(meta, command or None, declarations)
    try:
        try:
            if replay and large:
                prefetch = index_step.ImportsPrefetch(list_file)
            planner.place_index_files()
            planner.outputs_are_not_members()
            if not replay:
                planner.own_outputs_are_not_inputs()
                hold.take(create=True)  # busy: fail before touching the holder's files
                planner.run_index(command, hold)
                if large:
                    prefetch = index_step.ImportsPrefetch(list_file)
            planner.check_index(replay)
            planner.find_largest()
        finally:
            if prefetch is not None:
                prefetch.stop()
        yield planner
    except BaseException:
        planner.remove_placed_index_files()
        raise


def _share_part(
    planner: Planner,
    modules: dict[int, Module],
    share: list[ObjectInput],
    write: Callable[[list[ObjectInput]], None],
    outputs: Callable[[list[ObjectInput]], list[str]],
) -> parts.Part:
    """One worker's share of the objects: their imports read, their plans written."""
    return parts.Part(
        read=lambda: planner.read_imports(modules[o.index] for o in share),
        write=lambda: write(share),
        outputs=lambda: outputs(share),
    )


def jobs_for(objects: int, jobs: int) -> int:
    """The processes that plan a link of `objects` objects when asked for `jobs` (0: one
    per CPU, at most 8, from PARALLEL_MIN_OBJECTS objects on)."""
    if not jobs:
        jobs = default_jobs() if objects >= PARALLEL_MIN_OBJECTS else 1
    return max(1, min(jobs, objects))


def _object_plans(
    planner: Planner,
    write: Callable[[list[ObjectInput]], None],
    outputs: Callable[[list[ObjectInput]], list[str]],
    jobs: int,
) -> None:
    """Read every loaded module's imports, place the index files and write the plans of
    the objects (`write`, naming its files with `outputs`): in `jobs_for` processes, each
    reading and writing a share of the objects, this one the archive members' imports."""
    objects = planner.objects
    jobs = jobs_for(len(objects), jobs)
    if jobs > 1:
        shares = [
            objects[k * len(objects) // jobs : (k + 1) * len(objects) // jobs] for k in range(jobs)
        ]
        modules = planner.object_modules
        parts.run(
            [_share_part(planner, modules, share, write, outputs) for share in shares],
            read_shared=lambda: planner.read_imports(planner.member_modules()),
            write_shared=planner.move_index_files,
        )
    else:
        planner.read_imports(planner.modules.values())
        planner.move_index_files()
        write(objects)


def _write_plans(planner: Planner, command: list[str], jobs: int) -> None:
    raw_linker = bool(command) and index_step.is_raw_linker(command)
    _object_plans(planner, planner.write_objects, planner.object_outputs, jobs)
    try:
        planner.write_link(raw_linker)
    except BaseException:
        parts.remove_files(planner.object_outputs(planner.objects))  # a failed run leaves no plans
        raise
