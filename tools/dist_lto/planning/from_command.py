"""A meta file and prepared archives from a plain link command, all under one directory.

`dist-lto link --out-dir DIR -- COMMAND` takes a link line as a user or a makefile
writes it. Its inputs are told apart by content, as LLD tells them: an ar archive
(regular or thin) is prepared (`archive/prepare.py`) and declared as an archive, once
however often the line names it (LLD loads an archive's members once); an ELF
relocatable object or a bitcode file is declared as an object; anything else (a shared
library, a linker script) stays where it is as plain arguments, with the flags whose
place matters (`llvm/link_command.py`). Every path written is below DIR, relative when
DIR is: DIR/meta.json, DIR/objects/N/, DIR/archives/N/, DIR/index/, DIR/link-plan.json,
DIR/final-link.args.
"""

from __future__ import annotations

import os
import posixpath
import shutil
from dataclasses import dataclass

from dist_lto.archive.ar_headers import ARCH_MAGIC, THIN_MAGIC
from dist_lto.archive.prepare import prepare
from dist_lto.errors import BadInput
from dist_lto.formats.jsonio import dumps
from dist_lto.formats.meta import (
    ArchiveInput,
    ArgsInput,
    Group,
    Linkable,
    Meta,
    ObjectInput,
    meta_document,
)
from dist_lto.fsutil import read_input, write_atomic
from dist_lto.llvm.bitcode import is_bitcode
from dist_lto.llvm.link_command import InPlace, split

_ELF_MAGIC = b"\x7fELF"
_ET_REL = 1


@dataclass(frozen=True, slots=True)
class CommandLink:
    """What the planner and the link run: the meta file and the link's COMMAND (the
    program and the whole link's flags; the inputs are in the meta)."""

    meta: str
    command: list[str]


def _kind(path: str) -> str:
    """What the input at `path` is, by content: `archive`, `object` (ELF relocatable or
    bitcode) or `other`."""
    head = read_input(path, "link input", 18)
    if head[:8] in (ARCH_MAGIC, THIN_MAGIC):
        return "archive"
    if is_bitcode(head):
        return "object"
    if head[:4] == _ELF_MAGIC and len(head) == 18:
        e_type = head[16:18] if head[5] == 2 else head[17:15:-1]  # big-endian first
        if int.from_bytes(e_type, "big") == _ET_REL:
            return "object"
    return "other"


def _object_name(path: str) -> str:
    base = posixpath.basename(path) or "object"
    return base if base.endswith(".o") else base + ".o"


def _prepared(archive: str, directory: str) -> str:
    """Prepare `archive` into `directory` (what an earlier run prepared there is
    replaced); the manifest's path."""
    objects = posixpath.join(directory, "objects")
    manifest = posixpath.join(directory, "manifest.json")
    shutil.rmtree(objects, ignore_errors=True)
    if os.path.lexists(manifest):
        os.unlink(manifest)
    prepare(archive, objects, manifest)
    return manifest


def write_meta(command: list[str], out_dir: str) -> CommandLink:
    """Prepare the archives COMMAND names and write DIR/meta.json for it."""
    out = posixpath.normpath(out_dir)
    line = split(command)
    linkables: list[Linkable] = []
    archives: dict[tuple[int, int], int] = {}
    objects = 0
    for item in line.items:
        pointer = f"/groups/0/linkables/{len(linkables)}"
        if isinstance(item, InPlace):
            linkables.append(ArgsInput(tuple(item.args), pointer))
            continue
        path = item.path
        kind = _kind(path)
        if kind == "other":
            linkables.append(ArgsInput((path,), pointer))
        elif kind == "object":
            name = _object_name(path)
            at = posixpath.join(out, "objects", str(objects))
            linkables.append(
                ObjectInput(
                    objects,
                    path,
                    index_output=posixpath.join(at, name + ".thinlto.bc"),
                    plan_output=posixpath.join(at, "plan.json"),
                    opt_output=posixpath.join(at, name),
                    pointer=pointer,
                )
            )
            objects += 1
        else:
            st = os.stat(path)
            if (st.st_dev, st.st_ino) in archives:
                continue  # named again: LLD loads its members once all the same
            index = archives[(st.st_dev, st.st_ino)] = len(archives)
            at = posixpath.join(out, "archives", str(index))
            linkables.append(
                ArchiveInput(
                    index,
                    _prepared(path, at),
                    plan_output=posixpath.join(at, "plan.json"),
                    index_dir=posixpath.join(at, "index"),
                    opt_objects_dir=posixpath.join(at, "opt"),
                    whole=False,
                    pointer=pointer,
                )
            )
    meta = posixpath.join(out, "meta.json")
    document = meta_document(
        Meta(
            meta,
            index_dir=posixpath.join(out, "index"),
            link_plan_output=posixpath.join(out, "link-plan.json"),
            final_link_args_output=posixpath.join(out, "final-link.args"),
            groups=(Group((), (), tuple(linkables)),),
        )
    )
    try:
        os.makedirs(out, exist_ok=True)
        write_atomic(meta, dumps(document))
    except OSError as err:
        raise BadInput(f"{meta}: cannot write the meta file: {err.strerror}") from None
    return CommandLink(meta, line.command)
