# Phase 2: the index step and the plans, in one action (`dist-lto plan`).
#
# The meta file (docs/plan.md) lists the link's inputs in link order, each bitcode
# object and archive (prepared, or given by its objects) with the paths of the files
# the planner writes for it. Every one of those files is declared here and bound by
# this action, so the phases after it can name them before it runs. Starlark never
# reads the archive manifests: the planner does, which is why this is a plain action
# and not a dynamic_output.

load(":formats.bzl", "meta", "meta_archive", "meta_args", "meta_group", "meta_object")
load(":linkables.bzl", "ArchiveLinkable", "LinkGroup", "ObjectLinkable", "known_objects", "linkable_args")
load(":prepare.bzl", "prepare_archive")
load(":tools.bzl", "DistLtoTools", "plan_executable")
load(":types.bzl", "BitcodeObject", "PreparedArchive")

# The link as the planner will see it: the meta's groups and what they number.
CollectedLink = record(
    groups = list,
    objects = list[BitcodeObject],
    archives = list[PreparedArchive],
    # Artifacts, and cmd_args holding artifacts (flags from upstream's providers).
    static_inputs = list[Artifact | cmd_args],
)

def collect_link(
        ctx: AnalysisContext,
        tools: DistLtoTools,
        name: str,
        groups: list[LinkGroup],
        split_dwarf: bool) -> CollectedLink:
    """Number the bitcode objects and archives, declare their files, prepare the archives.

    Args:
        split_dwarf: declare a .dwo output per bitcode object and a .dwo directory per
            archive (the `split` mode of SPLIT_DWARF_MODES).
    """
    objects = []
    archives = []
    static_inputs = []
    meta_groups = []
    for group in groups:
        linkables = []
        for linkable in group.linkables:
            if isinstance(linkable, ObjectLinkable) and linkable.bitcode:
                obj = _declare_object(ctx, name, linkable.object, len(objects), split_dwarf)
                linkables.append(meta_object(
                    len(objects),
                    obj.object,
                    obj.index_file.as_output(),
                    obj.plan.as_output(),
                    obj.opt.as_output(),
                ))
                objects.append(obj)
            elif isinstance(linkable, ArchiveLinkable) and linkable.bitcode:
                archive = _declare_archive(ctx, tools, name, linkable, len(archives), split_dwarf)
                linkables.append(meta_archive(
                    len(archives),
                    archive.manifest or known_objects(linkable),
                    archive.plan.as_output(),
                    archive.index_dir.as_output(),
                    archive.opt_dir.as_output(),
                    linkable.whole,
                ))
                archives.append(archive)
                static_inputs.extend(known_objects(linkable))
            else:
                args = linkable_args(linkable)
                static_inputs.extend([a for a in args if not isinstance(a, str)])
                if isinstance(linkable, ArchiveLinkable):
                    static_inputs.extend(linkable.members)
                linkables.append(meta_args(args))
        if linkables:
            meta_groups.append(meta_group(linkables))
    return CollectedLink(groups = meta_groups, objects = objects, archives = archives, static_inputs = static_inputs)

def _declare_object(ctx: AnalysisContext, link_name: str, object: Artifact, index: int, split_dwarf: bool) -> BitcodeObject:
    prefix = "dist_lto/{}/objects/{}".format(link_name, index)
    return BitcodeObject(
        object = object,
        index_file = ctx.actions.declare_output(prefix, object.basename + ".thinlto.bc"),
        plan = ctx.actions.declare_output(prefix, "plan.json"),
        opt = ctx.actions.declare_output(prefix, "opt/" + object.basename),
        dwo = ctx.actions.declare_output(prefix, "opt/" + object.basename + ".dwo") if split_dwarf else None,
    )

def _declare_archive(
        ctx: AnalysisContext,
        tools: DistLtoTools,
        link_name: str,
        linkable: ArchiveLinkable,
        index: int,
        split_dwarf: bool) -> PreparedArchive:
    prepared = None if known_objects(linkable) else prepare_archive(ctx, tools, link_name, linkable, index)
    prefix = "dist_lto/{}/archives/{}".format(link_name, index)
    return PreparedArchive(
        linkable = linkable,
        objects_dir = prepared.objects_dir if prepared else None,
        manifest = prepared.manifest if prepared else None,
        plan = ctx.actions.declare_output(prefix, "plan.json"),
        index_dir = ctx.actions.declare_output(prefix, "index", dir = True),
        opt_dir = ctx.actions.declare_output(prefix, "opt", dir = True),
        dwo_dir = ctx.actions.declare_output(prefix, "dwo", dir = True) if split_dwarf else None,
    )

def run_plan(
        ctx: AnalysisContext,
        tools: DistLtoTools,
        link_name: str,
        link: CollectedLink,
        driver_command,
        link_plan: Artifact,
        final_link_args: Artifact,
        after: list[Artifact] = []) -> None:
    """Write the meta file and run `dist-lto plan` on it (category `thin_lto_plan`),
    once the artifacts `after` exist too."""
    prefix = "dist_lto/" + link_name
    index_dir = ctx.actions.declare_output(prefix, "index", dir = True)
    meta_file = ctx.actions.write_json(
        prefix + "/meta.json",
        meta(index_dir.as_output(), link_plan.as_output(), final_link_args.as_output(), link.groups),
        pretty = True,
    )
    outputs = [index_dir.as_output(), link_plan.as_output(), final_link_args.as_output()]
    inputs = list(link.static_inputs)
    for obj in link.objects:
        outputs += [obj.index_file.as_output(), obj.plan.as_output()]
        inputs.append(obj.object)
    for archive in link.archives:
        outputs += [archive.plan.as_output(), archive.index_dir.as_output()]
        if archive.manifest:
            inputs += [archive.objects_dir, archive.manifest]
    cmd = cmd_args(
        "plan",
        meta_file,
        "--",
        driver_command,
        hidden = inputs + outputs + after,
    )
    ctx.actions.run(cmd, category = "thin_lto_plan", identifier = link_name, exe = plan_executable(tools))
