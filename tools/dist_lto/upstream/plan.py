"""`dist-lto upstream plan`: upstream's planner command line on `dist-lto plan`.

Upstream's Starlark runs, once per link,

    PLANNER --meta META --index DIR --link-plan LP --final-link-index FLI
            --pre-flags F --linkables F --post-flags F -- LINKER FLAGS... @ARGSFILE
            -o OUTPUT -Wl,--thinlto-index-only=DIR/index -Wl,--thinlto-emit-imports-files
            -Wl,--thinlto-full-index -Wl,--thinlto-prefix-replace=;DIR/ POST_FLAGS...

and expects: each bitcode object's index and plan, each archive's plan and index
directory, a link plan, the final link's argument file and `DIR/index`. Its own planner
needs Meta's patched LLD (`--thinlto-full-index`, `index.full`). We translate instead:
upstream's meta (7 lines per input) and ARGSFILE become our meta (docs/plan.md), and
`dist-lto plan` runs the index step with stock LLD in a scratch directory and derives
the final link line from the original line and the plans (so the driver's crt objects
are never listed twice). Our plans are then written in upstream's formats.

Fixed on the way: the index step never names the real output (`-o OUTPUT` becomes a
scratch path, so a failing index step cannot remove a binary built earlier); nothing
undeclared is left in DIR (LLD's `.imports` files stay in the scratch directory,
removed afterwards); archive members the link never loads get no opt action (their
plan says `is_bc: false`, upstream then copies them into the optimised objects, and the
final link leaves them out). Objects upstream links as a library without an archive
(`--start-lib OBJECTS --end-lib`, from a `cxx_library` with `use_archive = False` or a
toolchain that `requires_objects`) are planned as one: see `LazyGroup`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import posixpath
import tempfile
from dataclasses import dataclass, field

from dist_lto import TYPE_CHECKING
from dist_lto.errors import BadInput
from dist_lto.formats.meta import ArchiveInput, Group, Linkable, Meta, ObjectInput, parse_meta
from dist_lto.fsutil import move, remove_tree, write_atomic
from dist_lto.llvm.index_step import is_raw_linker
from dist_lto.output_paths import refuse_overlaps
from dist_lto.planning import planner as ours
from dist_lto.process import parts
from dist_lto.tmpdirs import private_tmpdir, remove_private_tmpdir
from dist_lto.upstream import formats
from dist_lto.upstream.formats import (
    IndexCommand,
    UpstreamArchive,
    UpstreamMeta,
    UpstreamObject,
    read_argsfile,
    read_upstream_meta,
    split_index_command,
)
from dist_lto.upstream.layout import manifest_for, objects_dir_for, opt_objects_dir_for
from dist_lto.whole_files import WholeWriter

if TYPE_CHECKING:
    from dist_lto.formats.plans import ArchivePlan, MemberPlan, ObjectPlan


@dataclass
class LazyGroup:
    """Meta objects that the link line lists between `--start-lib` and `--end-lib`.

    LLD loads such an object only when the link needs it, like an archive member, so
    our planner gets the group as an archive given by its objects (docs/plan.md), each
    spelled as upstream spells it, which every backend and the index step share: a
    member the link never loads gets no opt action and stays out of the final link (its
    plan says `is_bc: false`, and the link plan names it neither optimised nor native),
    a loaded bitcode member is linked plainly (so its static constructors stay), native
    members stay lazy.
    """

    index: int
    """The group's archive index in our meta: above every index upstream uses."""
    objects: list[UpstreamObject]
    index_dir: str
    opt_dir: str


def lazy_objects_at(up: UpstreamMeta, line: list[str], i: int) -> int:
    """How many meta objects `line[i]` opens as a `--start-lib` group (0: none)."""
    if line[i] not in formats.START_LIB:
        return 0
    end = i + 1
    while end < len(line) and line[end] in up.objects:
        end += 1
    if end == i + 1 or end == len(line) or line[end] not in formats.END_LIB:
        return 0
    return end - i - 1


def our_meta(
    up: UpstreamMeta, line: list[str], tail: list[str], scratch: str
) -> tuple[dict, list[LazyGroup]]:
    """Our meta (docs/plan.md) for upstream's inputs, in the order of `line`, and the
    groups of lazy objects in it.

    Archive members appear on `line` as upstream wrote them: between `--start-lib` and
    `--end-lib`, or plainly when the archive is linked whole. Meta objects alone between
    `--start-lib` and `--end-lib` are a `LazyGroup`. Everything else is an object of the
    meta or passes through as args.
    """
    linkables: list[dict] = []
    args: list[str] = []
    groups: list[LazyGroup] = []
    next_index = max([*up.archives, *(o.index for o in up.objects.values()), -1]) + 1

    def flush() -> None:
        if args:
            linkables.append({"kind": "args", "args": list(args)})
            args.clear()

    seen_archives: set[int] = set()
    i = 0
    while i < len(line):
        arg = line[i]
        lazy = arg in formats.START_LIB and i + 1 < len(line) and line[i + 1] in up.member_archive
        first = line[i + 1] if lazy else arg
        if first in up.member_archive:
            archive = up.archives[up.member_archive[first]]
            if archive.index in seen_archives:
                raise BadInput(f"archive member {first!r} appears twice on the index line")
            seen_archives.add(archive.index)
            start = i + 1 if lazy else i
            count = len(archive.members)
            if line[start : start + count] != archive.members:
                raise BadInput(
                    f"the members of archive {archive.index} are not together on the index line"
                )
            i = start + count
            if lazy:
                if i >= len(line) or line[i] not in formats.END_LIB:
                    raise BadInput(f"archive {archive.index}: --start-lib without --end-lib")
                i += 1
            flush()
            linkables.append(
                {
                    "kind": "archive",
                    "index": archive.index,
                    "manifest": manifest_for(objects_dir_for(archive.plan_output)),
                    "plan_output": posixpath.join(
                        scratch, "archive-plans", f"{archive.index}.json"
                    ),
                    "index_dir": archive.index_dir,
                    "opt_objects_dir": opt_objects_dir_for(archive.plan_output),
                    "whole": not lazy,
                }
            )
            continue
        lazy_count = lazy_objects_at(up, line, i)
        if lazy_count:
            k = len(groups)
            members = [up.objects[p] for p in line[i + 1 : i + 1 + lazy_count]]
            group = LazyGroup(
                index=next_index + k,
                objects=members,
                index_dir=posixpath.join(scratch, "lazy-index", str(k)),
                opt_dir=posixpath.join(scratch, "lazy-opt", str(k)),
            )
            groups.append(group)
            flush()
            linkables.append(
                {
                    "kind": "archive",
                    "index": group.index,
                    "objects": [o.path for o in members],
                    "plan_output": posixpath.join(scratch, "archive-plans", f"{group.index}.json"),
                    "index_dir": group.index_dir,
                    "opt_objects_dir": group.opt_dir,
                    "whole": False,
                }
            )
            i += lazy_count + 2
            continue
        i += 1
        obj = up.objects.get(arg)
        if obj is None:
            args.append(arg)
            continue
        flush()
        linkables.append(
            {
                "kind": "object",
                "index": obj.index,
                "path": obj.path,
                "index_output": obj.index_output,
                "plan_output": posixpath.join(scratch, "object-plans", f"{obj.index}.json"),
                "opt_output": obj.opt_output,
            }
        )
    flush()
    missing = sorted(set(up.archives) - seen_archives)
    if missing:
        raise BadInput(f"archives {missing} of the meta are not on the index line")
    # The plan outputs named here are never written: `write_plans` writes upstream's
    # formats from the planner itself.
    meta_groups = [{"linkables": linkables}]
    if tail:
        meta_groups.append({"linkables": [{"kind": "args", "args": tail}]})
    meta = {
        "version": 1,
        "index_dir": posixpath.join(scratch, "index"),
        "link_plan_output": posixpath.join(scratch, "link-plan.json"),
        "final_link_args_output": posixpath.join(scratch, "final-link.args"),
        "groups": meta_groups,
    }
    return meta, groups


@dataclass
class ImportMap:
    """Our imports in upstream's terms: a member of a `LazyGroup` is an object to
    upstream, and the group is no archive of its."""

    objects: dict[tuple[int, int], int] = field(default_factory=dict)
    """(group index, member position) -> upstream object index."""
    groups: set[int] = field(default_factory=set)

    @staticmethod
    def of(groups: list[LazyGroup]) -> ImportMap:
        imports = ImportMap(groups={g.index for g in groups})
        for g in groups:
            for position, obj in enumerate(g.objects):
                imports.objects[(g.index, position)] = obj.index
        return imports

    def translate(self, plan: ObjectPlan | MemberPlan) -> dict:
        """`imports` and `archive_imports` of upstream's plan for one of ours."""
        objects, archives = plan["imports"], plan["archive_imports"]
        if self.groups:
            lazy = [self.objects[(a, p)] for a, p in plan["member_imports"] if a in self.groups]
            objects = sorted({*objects, *lazy})
            archives = [a for a in archives if a not in self.groups]
        return {"archive_imports": archives, "imports": objects}


def upstream_object_plan(plan: ObjectPlan, imports: ImportMap) -> bytes:
    """Upstream's plan of an object, from our object plan."""
    if not plan["is_bitcode"] or plan["index_file"] is None:
        return formats.NOT_OPTIMISED
    translated = imports.translate(plan)
    return formats.object_plan_bytes(
        plan["index"], plan["path"], plan["index_file"], translated["imports"],
        translated["archive_imports"],
    )  # fmt: skip


def lazy_member_plan(member: MemberPlan, obj: UpstreamObject, imports: ImportMap) -> bytes:
    """Upstream's plan of an object of a `LazyGroup`, from our plan of the member: a
    backend runs only when the link loaded it, and reads the index at upstream's path."""
    if not member["opt"]:
        return formats.NOT_OPTIMISED
    translated = imports.translate(member)
    return formats.object_plan_bytes(
        obj.index, member["input"], obj.index_output, translated["imports"],
        translated["archive_imports"],
    )  # fmt: skip


def upstream_archive_plan(plan: ArchivePlan, objects_dir: str, imports: ImportMap) -> bytes:
    """Upstream's archive plan: members it must optimise (`is_bc`) and the rest, which it
    copies. `base_dir` is the objects directory, so each member's name below it is its
    name below the optimised-objects directory too (whether upstream copies that whole
    directory or binds members one by one)."""
    entries: list[dict[str, object]] = []
    for member in plan["members"]:
        if member["opt"] and member["index_file"] is not None:
            entries.append(
                {
                    **imports.translate(member),
                    "bitcode_file": posixpath.join(plan["index_dir"], member["index_file"]),
                    "is_bc": True,
                    "path": member["input"],
                }
            )
        else:
            entries.append({"is_bc": False, "path": member["input"]})
    return formats.archive_plan_bytes(objects_dir, entries)


@dataclass
class Options:
    meta: str
    index: str
    link_plan: str
    final_link_index: str
    command: list[str]
    jobs: int = 0


def parse_args(argv: list[str]) -> Options:
    parser = argparse.ArgumentParser(prog="dist-lto upstream plan")
    for name in ("--meta", "--index", "--link-plan", "--final-link-index"):
        parser.add_argument(name, required=True)
    for name in ("--pre-flags", "--linkables", "--post-flags"):
        parser.add_argument(name, help="ignored: the index argument file has it all")
    parser.add_argument(
        "--jobs",
        type=int,
        default=0,
        metavar="N",
        help="processes that read imports and write object plans, as for `dist-lto plan`"
        " (default: one per CPU, at most 8, for large links; else 1)",
    )
    own, command = (argv, []) if "--" not in argv else (
        argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    )  # fmt: skip
    args = parser.parse_args(own)
    if not command:
        parser.error("the index command is required after `--`")
    if args.jobs < 0:
        parser.error("--jobs must be 0 (one per CPU) or more")
    return Options(args.meta, args.index, args.link_plan, args.final_link_index, command, args.jobs)


def _scratch_dir() -> tuple[str, bool]:
    """A private directory for the index step, removed afterwards: in the one Buck2 gives
    each action (BUCK_SCRATCH_PATH), else in TMPDIR, where one a killed run left is
    removed by the next (`tmpdirs.py`); and whether it is the latter."""
    base = os.environ.get("BUCK_SCRATCH_PATH")
    if base:
        os.makedirs(base, exist_ok=True)
        return tempfile.mkdtemp(prefix="dist-lto-plan-", dir=base), False
    private = private_tmpdir("dist-lto-plan")
    if private is None:
        return tempfile.mkdtemp(prefix="dist-lto-plan-"), False
    return private, True


def main(argv: list[str]) -> int:
    opts = parse_args(argv)
    up = read_upstream_meta(opts.meta)
    cmd = split_index_command(opts.command)
    line = read_argsfile(cmd.argsfile)
    check_outputs(opts, up, cmd)
    scratch, private = _scratch_dir()
    try:
        run(opts, up, cmd, line, scratch)
    finally:
        if private:
            remove_private_tmpdir(scratch)
        else:
            remove_tree(scratch)
    return 0


def check_outputs(opts: Options, up: UpstreamMeta, cmd: IndexCommand) -> None:
    """Refuse, before any work, an output that names an input or another output."""
    inputs = [("--meta", opts.meta), ("the index argument file", cmd.argsfile)]
    inputs += [(f"object {o.index} (line {o.line})", o.path) for o in up.objects.values()]
    inputs += [(f"a member of archive {a.index} (line {a.line})", member)
               for a in up.archives.values() for member in a.members]  # fmt: skip
    outputs = [("--link-plan", opts.link_plan), ("--final-link-index", opts.final_link_index),
               ("the index list", posixpath.join(opts.index, "index"))]  # fmt: skip
    for o in up.objects.values():
        outputs.append((f"the plan of object {o.index} (line {o.line})", o.plan_output))
        outputs.append((f"the index of object {o.index} (line {o.line})", o.index_output))
    outputs += [(f"the plan of archive {a.index} (line {a.line})", a.plan_output)
                for a in up.archives.values()]  # fmt: skip
    refuse_overlaps(outputs, inputs)


def run(opts: Options, up: UpstreamMeta, cmd: IndexCommand, line: list[str], scratch: str) -> None:
    document, groups = our_meta(up, line, cmd.tail, scratch)
    meta = pointing_at_upstream(parse_meta(document, opts.meta), up, groups)
    command = [*cmd.head, "-o", posixpath.join(scratch, "index-step.out")]
    objects = ObjectPlans({o.index: o for o in up.objects.values()}, ImportMap.of(groups))
    planner = ours.indexed(meta, command, objects.write, objects.outputs, jobs=opts.jobs)
    write_plans(opts, up, cmd, planner, groups, is_raw_linker(command))


def pointing_at_upstream(meta: Meta, up: UpstreamMeta, groups: list[LazyGroup]) -> Meta:
    """`meta` (translated from upstream's, named after upstream's file) with each input
    pointing at its line in upstream's meta file, so that the planner's messages send
    the user to a file that exists."""
    objects = {o.path: o.line for o in up.objects.values()}
    archives = {a.index: a.line for a in up.archives.values()}
    archives.update((g.index, g.objects[0].line) for g in groups)

    def where(line: int) -> str:
        return f"line {line}" if line else "the index argument file"

    def moved(item: Linkable) -> Linkable:
        if type(item) is ObjectInput:
            return dataclasses.replace(item, pointer=where(objects.get(item.path, 0)))
        if type(item) is ArchiveInput:
            return dataclasses.replace(item, pointer=where(archives.get(item.index, 0)))
        return dataclasses.replace(item, pointer="the index argument file")

    groups_moved = tuple(
        Group(g.pre_flags, g.post_flags, tuple(moved(item) for item in g.linkables))
        for g in meta.groups
    )
    return dataclasses.replace(meta, groups=groups_moved)


@dataclass(frozen=True)
class ObjectPlans:
    """Upstream's plans of the link's objects, written a share of the objects at a time,
    in whichever of the planner's processes holds that share (`planner.indexed`)."""

    by_index: dict[int, UpstreamObject]
    imports: ImportMap

    def write(self, planner: ours.Planner, share: list[ObjectInput]) -> None:
        writer = WholeWriter()
        try:
            for o in share:
                obj = self.by_index[o.index]
                plan = planner.object_plan(o)
                if not plan["is_bitcode"]:
                    _write_unread_index(obj)
                writer.write(obj.plan_output, upstream_object_plan(plan, self.imports))
        except BaseException:
            parts.remove_files(self.outputs(planner, share))
            raise
        finally:
            writer.close()

    def outputs(self, planner: ours.Planner, share: list[ObjectInput]) -> list[str]:
        """What `write(planner, share)` writes (to remove it again after a failure)."""
        paths = [self.by_index[o.index].plan_output for o in share]
        paths += [self.by_index[o.index].index_output for o in share
                  if not planner.object_modules[o.index].loaded]  # fmt: skip
        return paths


def write_plans(
    opts: Options, up: UpstreamMeta, cmd: IndexCommand, planner: ours.Planner,
    groups: list[LazyGroup], raw_linker: bool,
) -> None:  # fmt: skip
    """Upstream's outputs beside the object plans, straight from our planner (our own
    plan files are never written): archive plans, the final link's argument file, the
    index list and the link plan."""
    imports = ImportMap.of(groups)
    by_index = {o.index: o for o in up.objects.values()}
    lazy_groups = {g.index: g for g in groups}
    link_plan = planner.link_plan()
    loaded = list(link_plan["bitcode_objects"])
    native = list(link_plan["native_objects"])
    substitutes: dict[str, str] = {}  # final-line paths -> the files upstream binds there
    writer = WholeWriter()
    try:
        for index, archive in planner.archives.items():
            archive_plan = planner.archive_plan(archive)
            group = lazy_groups.get(index)
            if group is None:
                substitutes.update(_write_archive_plan(up.archives[index], archive_plan, imports))
                continue
            for member in archive_plan["members"]:
                obj = group.objects[member["position"]]
                if member["opt"]:
                    move(posixpath.join(group.index_dir, member["index_file"] or ""),
                         obj.index_output)  # fmt: skip
                    final = posixpath.join(group.opt_dir, member["opt_object"] or "")
                    substitutes[final] = obj.opt_output
                    loaded.append(obj.index)
                else:
                    _write_unread_index(obj)
                    if not member["is_bitcode"]:
                        native.append(obj.index)
                writer.write(obj.plan_output, lazy_member_plan(member, obj, imports))
    finally:
        writer.close()
    final_args = formats.final_link_args(planner.final_line(raw_linker), cmd.tail, substitutes)
    write_atomic(opts.final_link_index, formats.final_link_args_bytes(final_args))
    os.makedirs(opts.index, exist_ok=True)
    write_atomic(
        posixpath.join(opts.index, "index"),
        formats.index_list_bytes([by_index[i].path for i in sorted(loaded)]),
    )
    write_atomic(opts.link_plan, formats.link_plan_bytes(loaded, native))


def _write_archive_plan(
    archive: UpstreamArchive, plan: ArchivePlan, imports: ImportMap
) -> dict[str, str]:
    """Write upstream's plan of a prepared archive; return where upstream binds its
    native members (in the optimised-objects directory), by our final line's paths."""
    objects_dir = objects_dir_for(archive.plan_output)
    opt_dir = opt_objects_dir_for(archive.plan_output)
    natives = {}
    for member in plan["members"]:
        if not member["is_bitcode"]:
            rel = posixpath.relpath(member["input"], objects_dir)
            natives[member["input"]] = posixpath.join(opt_dir, rel)
    write_atomic(archive.plan_output, upstream_archive_plan(plan, objects_dir, imports))
    return natives


def _write_unread_index(obj: UpstreamObject) -> None:
    """Bind the index output of an object no backend runs on: upstream declares one for
    every object, and nothing reads it."""
    os.makedirs(posixpath.dirname(obj.index_output) or ".", exist_ok=True)
    write_atomic(obj.index_output, b"")
