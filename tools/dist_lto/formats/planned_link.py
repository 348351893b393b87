"""A planned link read whole: the meta, every plan it names, checked against each other.

`dist-lto link` runs what the plans ask for and `dist-lto inspect` draws it; both read
the same files the same way through this module, so a plan that one refuses the other
refuses too: an import of an object or member the plans do not declare, an object plan
whose output is not the meta's, a member path that leaves its plan's directories.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from dist_lto.errors import BadInput
from dist_lto.formats.meta import Meta
from dist_lto.formats.plans import read_archive_plan, read_link_plan, read_object_plan

Key = tuple[int, int]
"""A module: (-1, object index) or (archive index, member position)."""


@dataclass(frozen=True, slots=True)
class PlannedModule:
    """One object or archive member of the link, as the plans describe it."""

    key: Key
    path: str
    """The module as the index step saw it (an object's path, a member's input)."""
    is_bitcode: bool
    backend: bool
    """A backend runs: bitcode the index step loaded."""
    index_file: str | None
    """The backend's index file (None when no backend runs)."""
    output: str | None
    """The native object the backend writes (None when no backend runs)."""
    imports: tuple[Key, ...]
    where: str
    """The plan and JSON pointer that describe it, for messages."""


@dataclass(frozen=True, slots=True)
class PlannedArchive:
    index: int
    manifest: str | None
    """None for an archive the meta gives by its objects."""
    members: tuple[Key, ...]


@dataclass(frozen=True, slots=True)
class PlannedLink:
    meta: Meta
    modules: dict[Key, PlannedModule]
    """Objects in the meta's order, then each archive's members in position order."""
    archives: tuple[PlannedArchive, ...]
    final_link_args: str
    command: list[str] | None
    """The COMMAND the plans were made from (None: replayed without one)."""

    def import_paths(self, module: PlannedModule) -> list[str]:
        """The paths of the modules a backend imports, in the plan's order."""
        return [self.modules[key].path for key in module.imports]


def _inside(path: str, where: str) -> None:
    """A path a plan names below one of its directories must stay below it: relative,
    never climbing out (`..`), so that a plan cannot direct a write elsewhere."""
    normal = os.path.normpath(path)
    if os.path.isabs(path) or normal in (".", "..") or normal.startswith("../"):
        raise BadInput(f"{where}: {path!r} is absolute or leaves its directory")


def _keys(objects: list[int], members: list[list[int]]) -> tuple[Key, ...]:
    return tuple([(-1, i) for i in objects] + [(a, p) for a, p in members])


def read_planned_link(meta: Meta, command: list[str] | None = None) -> PlannedLink:
    """Read every plan the meta names (BadInput for a missing, malformed or inconsistent
    one). The link plan is read first: the planner writes it last, so its presence
    means the planner's run completed; when it is missing, the message says what to run
    (with `command`, the link command, when the caller has it)."""
    if not os.path.lexists(meta.link_plan_output):
        import shlex

        how = shlex.join(command) if command else "COMMAND"
        raise BadInput(
            f"{meta.link_plan_output}: link plan missing: plan the link first, with"
            f" `dist-lto plan {shlex.quote(meta.file)} -- {how}`"
        )
    link_plan = read_link_plan(meta.link_plan_output)
    modules: dict[Key, PlannedModule] = {}
    for obj in meta.objects():
        where = obj.plan_output
        plan = read_object_plan(where)
        if plan["is_bitcode"] and plan["index_file"] is None:
            raise BadInput(f"{where}: a bitcode object without an index_file")
        if plan["opt_output"] != obj.opt_output:
            raise BadInput(
                f"{where}: /opt_output {plan['opt_output']!r} is not the meta file's"
                f" opt_output {obj.opt_output!r} for this object"
            )
        modules[(-1, plan["index"])] = PlannedModule(
            key=(-1, plan["index"]),
            path=plan["path"],
            is_bitcode=plan["is_bitcode"],
            backend=plan["is_bitcode"],
            index_file=plan["index_file"] if plan["is_bitcode"] else None,
            output=plan["opt_output"] if plan["is_bitcode"] else None,
            imports=_keys(plan["imports"], plan["member_imports"]),
            where=where,
        )
    archives = []
    for archive in meta.archives():
        archive_plan = read_archive_plan(archive.plan_output)
        keys = []
        for i, member in enumerate(archive_plan["members"]):
            where = f"{archive.plan_output}: /members/{i}"
            index_file = output = None
            if member["opt"]:
                if member["index_file"] is None or member["opt_object"] is None:
                    raise BadInput(f"{where}: a member to optimise needs index_file and opt_object")
                _inside(member["index_file"], f"{where}/index_file")
                _inside(member["opt_object"], f"{where}/opt_object")
                index_file = os.path.join(archive_plan["index_dir"], member["index_file"])
                output = os.path.join(archive_plan["opt_objects_dir"], member["opt_object"])
            key = (archive_plan["index"], member["position"])
            keys.append(key)
            modules[key] = PlannedModule(
                key=key,
                path=member["input"],
                is_bitcode=member["is_bitcode"],
                backend=member["opt"],
                index_file=index_file,
                output=output,
                imports=_keys(member["imports"], member["member_imports"]),
                where=where,
            )
        archives.append(PlannedArchive(archive.index, archive.manifest, tuple(keys)))
    for module in modules.values():
        if module.backend:
            _check_imports(module, modules)
    return PlannedLink(
        meta, modules, tuple(archives), link_plan["final_link_args"], link_plan["command"]
    )


def _check_imports(module: PlannedModule, modules: dict[Key, PlannedModule]) -> None:
    for archive, position in module.imports:
        if (archive, position) in modules:
            continue
        if archive == -1:
            raise BadInput(
                f"{module.where}: imports object {position}, which the meta does not declare"
            )
        raise BadInput(
            f"{module.where}: imports member {position} of archive {archive}, which its plan lacks"
        )
