# Phase 1: each archive that may hold bitcode becomes a directory of objects and a
# manifest (`dist-lto prepare`), so the index step can see its members as files.

load(":formats.bzl", "PREPARED_MANIFEST", "PREPARED_OBJECTS")
load(":linkables.bzl", "ArchiveLinkable")
load(":package.bzl", "dist_lto_command")
load(":tools.bzl", "DistLtoTools")

PreparedFiles = record(objects_dir = Artifact, manifest = Artifact)

def prepare_archive(
        ctx: AnalysisContext,
        tools: DistLtoTools,
        link_name: str,
        linkable: ArchiveLinkable,
        index: int) -> PreparedFiles:
    """One `thin_lto_prepare` action for archive number `index` of link `link_name`."""
    prefix = "dist_lto/{}/archives/{}".format(link_name, index)
    objects_dir = ctx.actions.declare_output(prefix, PREPARED_OBJECTS, dir = True)
    manifest = ctx.actions.declare_output(prefix, PREPARED_MANIFEST)
    cmd = cmd_args(
        dist_lto_command(tools.python, tools.pkg, "prepare"),
        "--archive",
        linkable.archive,
        "--objects-out",
        objects_dir.as_output(),
        "--manifest-out",
        manifest.as_output(),
        hidden = linkable.members,
    )
    ctx.actions.run(
        cmd,
        category = "thin_lto_prepare",
        identifier = "{}/{}:{}".format(link_name, index, linkable.archive.short_path),
    )
    return PreparedFiles(objects_dir = objects_dir, manifest = manifest)
