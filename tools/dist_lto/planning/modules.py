"""The inputs of one planned link as the index step sees them: modules and archives.

A module is an object or an archive member, keyed by its spelling on the index line
(LLD names its outputs and imports by that spelling). Imports are kept as ints
(`module_code`) because a large link has hundreds of thousands of them.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field

from dist_lto.errors import BadInput
from dist_lto.formats.manifest import Manifest, Member
from dist_lto.formats.meta import ArchiveInput, ObjectInput
from dist_lto.path_spelling import all_plain


@dataclass(slots=True, eq=False)
class Module:
    """An input the index step may name: an object (`archive` -1) or an archive member.

    `name` is the spelling on the index line, the key of LLD's outputs; `key` is the
    object index or the member position.
    """

    name: str
    archive: int
    key: int
    origin: ObjectInput | tuple[Manifest, Member]
    loaded: bool = False
    imports: list[int] = field(default_factory=list)
    """Imported modules as codes (see `module_code`)."""
    index_src: str = ""
    """Where LLD writes the index file."""
    index_dst: str = ""
    """Where the index file belongs (declared path); equal to `index_src` when in place."""
    size: int = 0
    """Its size in bytes once loaded (`module_size`); 0 otherwise."""

    def describe(self, meta_file: str) -> str:
        """Where the module was declared, for messages."""
        if type(self.origin) is ObjectInput:
            return f"{meta_file}: {self.origin.pointer} (object {self.key})"
        manifest, member = self.origin  # type: ignore[misc]
        return f"{manifest.file}: member {member.name!r} at position {member.position}"


@dataclass(slots=True)
class Archive:
    input: ArchiveInput
    manifest: Manifest
    whole: bool
    members: list[tuple[Member, Module]]
    """Each member with its module (named by its spelling on the index line), in order."""
    rels: list[str]
    """Each member's name inside `index_dir` (plus `.thinlto.bc`) and `opt_objects_dir`."""


POSITION_MASK = (1 << 32) - 1


def module_code(module: Module) -> int:
    """A module as one int: an object is its index, a member -(archive << 32 | position) - 1.

    Sorting codes sorts objects by index and members (in reverse) by archive and position.
    """
    if module.archive < 0:
        return module.key
    return -((module.archive << 32) | module.key) - 1


def module_size(module: Module) -> int:
    """A module's size in bytes: a member's from its manifest, an object's from the file
    (0 when it cannot be read: the size only orders backends)."""
    if type(module.origin) is ObjectInput:
        try:
            return os.stat(module.origin.path).st_size
        except OSError:
            return 0
    return module.origin[1].size  # type: ignore[index]


def member_rels(members: tuple[Member, ...], by_position: bool = False) -> list[str]:
    """Names for members' outputs: their manifest paths, or `POSITION/BASENAME` for all
    members when any path is absolute or climbs (so names never collide), or when
    `by_position` (an archive given by its objects: their paths are the build's)."""
    if not by_position and all_plain([m.path for m in members]):
        return [m.path for m in members]
    return [f"{m.position}/{posixpath.basename(m.path) or 'member'}" for m in members]


def relative_inside(path: str, directory: str) -> str | None:
    """`path` relative to `directory` when it lies inside it (both normalised), else None."""
    if directory == ".":
        return None if path.startswith(("/", "../")) or path == ".." else path
    if path.startswith(directory.rstrip("/") + "/"):
        return path[len(directory.rstrip("/")) + 1 :]
    return None


def non_ascii_module(path: str, where: str) -> BadInput:
    """LLVM 22 writes a module path with a byte above 0x7F into an individual index's
    module table as garbage (`fé.o` becomes `f\xc3\xff\xff\xff`; llvm-project issue
    194318), so no backend finds its module or its imports: refused before the index
    step, however the link would run."""
    return BadInput(
        f"{where}: module path {path!r} is not ASCII; LLVM 22 corrupts such paths in"
        " ThinLTO index files (llvm-project issue 194318): give the object an ASCII path"
    )
