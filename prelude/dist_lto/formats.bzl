# What the rules write and read of dist-lto's file formats, in one place: the meta file
# `dist-lto plan` reads and the plans it writes (docs/plan.md), and the manifest
# `dist-lto prepare` writes (docs/prepare.md), whose member paths follow the layout
# `prepare.bzl` declares. Every file read here is checked for the version these rules
# know, so that tools and rules from different releases fail in analysis, naming the
# file, rather than misread each other.

META_VERSION = 1
PLAN_VERSION = 3
LINK_PLAN_VERSION = 2
MANIFEST_VERSION = 1

PREPARED_OBJECTS = "objects"
"""A prepared archive's objects directory, beside its manifest: the manifest spells a
regular archive's members as `objects/<path>`."""

PREPARED_MANIFEST = "manifest.json"

def meta_object(index: int, path: Artifact, index_output, plan_output, opt_output) -> dict[str, typing.Any]:
    """A bitcode object of the meta file: `index` numbers it among the link's objects."""
    return {
        "kind": "object",
        "index": index,
        "path": path,
        "index_output": index_output,
        "plan_output": plan_output,
        "opt_output": opt_output,
    }

def meta_archive(index: int, source: Artifact | list[Artifact], plan_output, index_dir, opt_objects_dir, whole: bool) -> dict[str, typing.Any]:
    """An archive of the meta file: `index` numbers it among the link's archives;
    `source` is its prepared manifest, or the objects it was made of."""
    doc = {
        "kind": "archive",
        "index": index,
        "plan_output": plan_output,
        "index_dir": index_dir,
        "opt_objects_dir": opt_objects_dir,
        "whole": whole,
    }
    doc["objects" if type(source) == "list" else "manifest"] = source
    return doc

def meta_args(args: list) -> dict[str, typing.Any]:
    """Link-line arguments the planner passes through in place: strings, artifacts and
    cmd_args, written as one flat list of strings (a cmd_args is written as a list)."""
    return {"kind": "args", "args": cmd_args(args)}

def meta_group(linkables: list[dict[str, typing.Any]]) -> dict[str, typing.Any]:
    return {"pre_flags": [], "post_flags": [], "linkables": linkables}

def meta(index_dir, link_plan_output, final_link_args_output, groups: list) -> dict[str, typing.Any]:
    return {
        "version": META_VERSION,
        "index_dir": index_dir,
        "link_plan_output": link_plan_output,
        "final_link_args_output": final_link_args_output,
        "groups": groups,
    }

def manifest_member_files(manifest: dict[str, typing.Any], objects_dir: Artifact, what: str) -> dict[int, Artifact]:
    """A prepared regular archive's members by position, projected out of its objects
    directory; `what` names the archive in a failure."""
    prefix = PREPARED_OBJECTS + "/"
    files = {}
    for entry in manifest["members"]:
        path = entry["path"]
        if not path.startswith(prefix):
            fail("{}: member {} is at `{}`, not under `{}`".format(what, entry["position"], path, prefix))
        files[entry["position"]] = objects_dir.project(path[len(prefix):])
    return files

def _read_versioned(artifacts, file: Artifact, what: str, version: int) -> dict[str, typing.Any]:
    document = artifacts[file].read_json()
    found = document.get("version")
    if found != version:
        fail("{}: {}: {} version {}, where these rules read version {}: the dist-lto tools and rules come from different releases".format(
            file.owner.raw_target(),
            file.short_path,
            what,
            found,
            version,
        ))
    return document

def read_object_plan(artifacts, plan: Artifact) -> dict[str, typing.Any]:
    """An object plan (`dist-lto plan`): whether a backend runs, importing what."""
    return _read_versioned(artifacts, plan, "object plan", PLAN_VERSION)

def read_archive_plan(artifacts, plan: Artifact) -> dict[str, typing.Any]:
    """An archive plan (`dist-lto plan`): each member's backend and imports."""
    return _read_versioned(artifacts, plan, "archive plan", PLAN_VERSION)

def read_link_plan(artifacts, plan: Artifact) -> dict[str, typing.Any]:
    """The link plan (`dist-lto plan`): which objects and archives the final link uses."""
    return _read_versioned(artifacts, plan, "link plan", LINK_PLAN_VERSION)

def read_manifest(artifacts, manifest: Artifact) -> dict[str, typing.Any]:
    """A prepared archive's manifest (`dist-lto prepare`)."""
    return _read_versioned(artifacts, manifest, "manifest", MANIFEST_VERSION)
