# What the rules write and read of dist-lto's file formats, in one place: the meta file
# `dist-lto plan` reads (docs/plan.md) and the manifest `dist-lto prepare` writes
# (docs/prepare.md), whose member paths follow the layout `prepare.bzl` declares.

META_VERSION = 1

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

def meta_archive(index: int, manifest: Artifact, plan_output, index_dir, opt_objects_dir, whole: bool) -> dict[str, typing.Any]:
    """A prepared archive of the meta file: `index` numbers it among the link's archives."""
    return {
        "kind": "archive",
        "index": index,
        "manifest": manifest,
        "plan_output": plan_output,
        "index_dir": index_dir,
        "opt_objects_dir": opt_objects_dir,
        "whole": whole,
    }

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
