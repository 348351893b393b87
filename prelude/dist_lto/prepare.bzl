# Phase 1: an archive that may hold bitcode, whose objects the rules do not know,
# becomes a directory of objects and a manifest (`dist-lto prepare`), so the index step
# can see its members as files. The rule that makes such an archive prepares it once
# (`prepare_library_archive`, shared by every link: a prebuilt library, a Rust
# staticlib); otherwise each link does (`prepare_archive`: archives from Buck2's
# upstream prelude).

load(":formats.bzl", "PREPARED_MANIFEST", "PREPARED_OBJECTS")
load(":linkables.bzl", "ArchiveLinkable", "PreparedFiles")
load(":package.bzl", "dist_lto_command")
load(":tools.bzl", "DistLtoTools")

def _prepare_files(
        ctx: AnalysisContext,
        tools: DistLtoTools,
        archive: Artifact,
        prefix: str,
        identifier: str,
        members: list[Artifact] = []) -> PreparedFiles:
    """One `thin_lto_prepare` action: `archive` into `PREFIX/objects/` and
    `PREFIX/manifest.json` (`members`: a thin archive's, inputs of the action)."""
    objects_dir = ctx.actions.declare_output(prefix, PREPARED_OBJECTS, dir = True)
    manifest = ctx.actions.declare_output(prefix, PREPARED_MANIFEST)
    cmd = cmd_args(
        dist_lto_command(tools.python, tools.pkg, "prepare"),
        "--archive",
        archive,
        "--objects-out",
        objects_dir.as_output(),
        "--manifest-out",
        manifest.as_output(),
        hidden = members,
    )
    ctx.actions.run(cmd, category = "thin_lto_prepare", identifier = identifier)
    return PreparedFiles(objects_dir = objects_dir, manifest = manifest)

def prepare_library_archive(ctx: AnalysisContext, tools: DistLtoTools, archive: Artifact) -> PreparedFiles:
    """A library's own archive, prepared beside it (`dist_lto_prepared/`) for every
    distributed link that needs it: Buck2 runs the action only then."""
    return _prepare_files(ctx, tools, archive, "dist_lto_prepared", archive.basename)

def prepare_archive(
        ctx: AnalysisContext,
        tools: DistLtoTools,
        link_name: str,
        linkable: ArchiveLinkable,
        index: int) -> PreparedFiles:
    """Archive number `index` of link `link_name`, prepared by the rule that made it, or
    else by one action of this link."""
    if linkable.prepared:
        return linkable.prepared
    return _prepare_files(
        ctx,
        tools,
        linkable.archive,
        "dist_lto/{}/archives/{}".format(link_name, index),
        "{}/{}:{}".format(link_name, index, linkable.archive.short_path),
        linkable.members,
    )
