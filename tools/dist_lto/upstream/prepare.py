"""`dist-lto upstream prepare`: upstream's prepare command line on `dist-lto prepare`.

Upstream runs `PREPARE --manifest-out M --objects-out DIR --ar AR --archive A --name N`
and reads `{"objects": [...]}` from M: the members, spelled as the index step and the
backends will spell them. We extract with `dist-lto prepare` (duplicate names never
overwrite a real member, bitcode told by its magic, no `ar` or `file(1)`), keep our
manifest beside the members (`layout.py`), and list every member in M.

A thin archive's members are copied into DIR: upstream gives the index step and the
opt actions the objects directory, never the thin archive's members, so only copies
inside DIR reach them (and a remote worker).
"""

from __future__ import annotations

import argparse
import os
import posixpath
import shutil

from dist_lto import TYPE_CHECKING
from dist_lto.archive.member_names import assign_paths
from dist_lto.archive.prepare import prepare
from dist_lto.errors import BadInput, DistLtoError
from dist_lto.formats.manifest import manifest_bytes, manifest_document
from dist_lto.fsutil import write_atomic
from dist_lto.upstream.formats import prepare_manifest_bytes
from dist_lto.upstream.layout import MEMBERS, manifest_for

if TYPE_CHECKING:
    from typing import Any

    from dist_lto.formats.manifest import Entry


def _copy_thin_members(document: dict[str, Any], manifest: str, members_dir: str) -> dict[str, Any]:
    """Copy a thin archive's members under `members_dir`; the manifest then points there."""
    base = posixpath.dirname(manifest)
    entries = document["members"]
    names = assign_paths([posixpath.basename(e["name"]) or "member" for e in entries])
    os.makedirs(members_dir, exist_ok=True)
    copied: list[Entry] = []
    for entry, name in zip(entries, names, strict=True):
        source = posixpath.normpath(posixpath.join(base, entry["path"]))
        target = posixpath.join(members_dir, name)
        try:
            shutil.copyfile(source, target)
        except OSError as err:
            raise BadInput(
                f"{document['archive']}: thin archive member {entry['name']!r} cannot be"
                f" copied from {source}: {err.strerror}"
            ) from None
        copied.append(
            {
                "name": entry["name"],
                "position": entry["position"],
                "path": posixpath.relpath(target, base),
                "size": entry["size"],
                "bitcode": entry["bitcode"],
            }
        )
    write_atomic(manifest, manifest_bytes(document["archive"], False, copied))
    return manifest_document(document["archive"], False, copied)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="dist-lto upstream prepare")
    parser.add_argument("--manifest-out", required=True)
    parser.add_argument("--objects-out", required=True)
    parser.add_argument("--archive", required=True)
    parser.add_argument("--ar", help="ignored: archives are read with libarchive")
    parser.add_argument("--name", help="ignored")
    args = parser.parse_args(argv)
    objects_dir = args.objects_out.rstrip("/") or args.objects_out
    manifest = manifest_for(objects_dir)
    members_dir = posixpath.join(objects_dir, MEMBERS)
    document = prepare(args.archive, members_dir, manifest)
    try:
        if document["thin"]:
            document = _copy_thin_members(document, manifest, members_dir)
        base = posixpath.dirname(manifest)
        objects = [posixpath.normpath(posixpath.join(base, e["path"])) for e in document["members"]]
        write_atomic(args.manifest_out, prepare_manifest_bytes(manifest, objects))
    except OSError as err:
        raise DistLtoError(f"{args.manifest_out}: cannot write: {err.strerror}") from None
    return 0
