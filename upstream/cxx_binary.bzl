# dist_lto_cxx_binary: a program of a repository on Buck2's upstream prelude, linked
# with our distributed ThinLTO phases (prelude/dist_lto/, the same ones our own
# cxx_binary runs) instead of upstream's.
#
# It reads what to link from the deps' upstream link providers (`MergedLinkInfo`, the
# archive, object and flag linkables upstream's own dist_lto.bzl unpacks), and the
# linker, its flags, the backend compiler and the split-DWARF mode from the
# repository's `CxxToolchainInfo`. Every opt action then reads exactly its module, its
# index and the modules it imports (docs/upstream-buck2.md compares both routes).
#
# The macro compiles the program's own sources with upstream's `cxx_library` (its
# objects linked whole, as upstream's cxx_binary links them) and links them with the
# rule, `dist_lto_cxx_link`, which a repository may also use directly.

load("@prelude//cxx:cxx_link_utility.bzl", "cxx_link_cmd_parts")
load("@prelude//cxx:cxx_toolchain_types.bzl", "CxxToolchainInfo")
load("@prelude//decls:toolchains_common.bzl", "toolchains_common")
load(
    "@prelude//linking:link_info.bzl",
    "ArchiveContentsType",
    "LinkInfo",
    "LinkStrategy",
    "MergedLinkInfo",
    "ObjectsLinkable",
    "SharedLibLinkable",
    "get_link_args_for_strategy",
    "map_to_link_infos",
    "process_link_strategy_for_pic_behavior",
    UpstreamArchiveLinkable = "ArchiveLinkable",
)
load("//upstream/phases:link.bzl", "dist_lto_link")
load(
    "//upstream/phases:linkables.bzl",
    "ArchiveLinkable",
    "ArgsLinkable",
    "LinkGroup",
    "ObjectLinkable",
)
load("//upstream/phases:tools.bzl", "DistLtoRunnerInfo", "tools_from_runner")

def _flags(flags: list) -> list[str | Artifact | cmd_args]:
    """Linker flags as the meta file carries them: strings and files as they are,
    anything else (a flag with macros, a cmd_args) as a cmd_args, written into the meta
    file as its arguments."""
    return [f if isinstance(f, str) or isinstance(f, Artifact) else cmd_args(f) for f in flags]

def _lazy_objects(objects: list[Artifact]) -> ArchiveLinkable:
    """Objects the link loads only when needed (`--start-lib ... --end-lib`, a
    `cxx_library` with `use_archive = False`) as an archive given by its objects: the
    phases plan and link it as they do any archive (never-loaded objects get no opt
    action, members stay single inputs); no archive file is made."""
    return ArchiveLinkable(archive = None, members = [], objects = objects, bitcode = True, whole = False)

def _linkables(info: LinkInfo) -> list:
    """One upstream `LinkInfo`'s linkables as ours, in order."""
    found = []
    what = info.name or "a dependency"
    for linkable in info.linkables:
        if isinstance(linkable, ObjectsLinkable) or (
            isinstance(linkable, UpstreamArchiveLinkable) and
            linkable.archive.archive_contents_type == ArchiveContentsType("virtual")
        ):
            objects = linkable.objects if isinstance(linkable, ObjectsLinkable) else linkable.archive.external_objects
            if not objects:
                continue
            if linkable.link_whole:
                # Bitcode or not: the planner finds out and passes native ones through.
                found.extend([ObjectLinkable(object = o, bitcode = True) for o in objects])
            else:
                found.append(_lazy_objects(objects))
        elif isinstance(linkable, UpstreamArchiveLinkable):
            thin = linkable.archive.archive_contents_type == ArchiveContentsType("thin")
            found.append(ArchiveLinkable(
                archive = linkable.archive.artifact,
                members = linkable.archive.external_objects if thin else [],
                bitcode = linkable.supports_lto,
                whole = linkable.link_whole,
            ))
        elif isinstance(linkable, SharedLibLinkable):
            if linkable.link_without_soname:
                fail("{}: shared library `{}` with link_without_soname: dist_lto_cxx_link links static programs".format(what, linkable.lib.short_path))
            found.append(ArgsLinkable(args = [linkable.lib]))

        # Frameworks and Swift modules: Apple's; a GNU link has none (upstream's own
        # link line leaves them out too).
    return found

def _groups(infos: list[LinkInfo]) -> list[LinkGroup]:
    groups = []
    for i, info in enumerate(infos):
        what = info.name or "link info {}".format(i)
        linkables = []
        if info.pre_flags:
            linkables.append(ArgsLinkable(args = _flags(info.pre_flags)))
        linkables.extend(_linkables(info))
        if info.post_flags:
            linkables.append(ArgsLinkable(args = _flags(info.post_flags)))
        if linkables:
            groups.append(LinkGroup(owner = what, linkables = linkables, cxx = False))
    return groups

def _dist_lto_cxx_link_impl(ctx: AnalysisContext) -> list[Provider]:
    toolchain = ctx.attrs._cxx_toolchain[CxxToolchainInfo]
    runner = ctx.attrs._dist_lto[DistLtoRunnerInfo]
    linker_info = toolchain.linker_info
    strategy = process_link_strategy_for_pic_behavior(LinkStrategy("static"), toolchain.pic_behavior)
    merged = [d[MergedLinkInfo] for d in ctx.attrs.deps if MergedLinkInfo in d]
    args = get_link_args_for_strategy(ctx.actions, ctx.label, linker_info, merged, strategy, False, None)
    infos = map_to_link_infos([args])

    parts = cxx_link_cmd_parts(toolchain, True)
    own_flags = _flags(_listed(linker_info.binary_linker_flags)) + ctx.attrs.linker_flags
    post_flags = _flags(_listed(linker_info.post_linker_flags))
    groups = [LinkGroup(owner = "linker_flags", linkables = [ArgsLinkable(args = own_flags)], cxx = False)]
    groups += _groups(infos)
    groups.append(LinkGroup(owner = "post_linker_flags", linkables = [ArgsLinkable(args = post_flags)], cxx = False))

    # What the backends read of the link's flags (-O, -mllvm, ...), as upstream gives its
    # own opt actions: the toolchain's, the program's, every library's.
    backend_flags = [parts.linker_flags, own_flags]
    for info in infos:
        backend_flags += [f for f in info.pre_flags + info.post_flags if isinstance(f, str)]
    backend_flags.append(parts.post_linker_flags)

    linked = dist_lto_link(
        ctx,
        tools_from_runner(runner, toolchain.cxx_compiler_info.compiler),
        ctx.label.name,
        groups,
        parts.link_cmd,
        backend_flags,
        split_dwarf = toolchain.split_debug_mode.value,
    )
    return [
        DefaultInfo(default_output = linked.binary, other_outputs = linked.debug_files),
        RunInfo(args = cmd_args(linked.binary, hidden = linked.debug_files)),
    ]

def _listed(flags) -> list:
    """A toolchain's flags field (a list, None or cmd_args) as a list."""
    if flags == None:
        return []
    if type(flags) == "list":
        return flags
    return [flags]

dist_lto_cxx_link = rule(
    impl = _dist_lto_cxx_link_impl,
    doc = "Links upstream cxx_library / rust_library / prebuilt_cxx_library targets statically with dist-lto's distributed ThinLTO.",
    attrs = {
        "deps": attrs.list(attrs.dep(), default = [], doc = "what to link, in order (each with its own dependencies)"),
        "linker_flags": attrs.list(attrs.string(), default = [], doc = "flags before every input, as cxx_binary's"),
        "_cxx_toolchain": toolchains_common.cxx(),
        "_dist_lto": attrs.dep(default = "dist_lto//upstream:toolset", providers = [DistLtoRunnerInfo]),
    },
)

# cxx_library attributes that make no sense for a program's own objects.
_NOT_FOR_OBJECTS = ["link_whole", "use_archive", "preferred_linkage", "exported_linker_flags"]

def dist_lto_cxx_binary(
        name: str,
        srcs: list = [],
        deps: list = [],
        linker_flags: list[str] = [],
        visibility: list[str] = [],
        **kwargs):
    """A program like upstream's `cxx_binary`, linked with dist-lto's distributed ThinLTO.

    Args:
        name: the program.
        srcs: its own sources, compiled by an upstream `cxx_library` named
            `<name>-objects` whose objects are all linked (as cxx_binary's are).
        deps: libraries to link: cxx_library, rust_library, prebuilt_cxx_library...
        linker_flags: the program's linker flags (before every input).
        **kwargs: compile attributes of cxx_library for the program's own sources
            (headers, compiler_flags, preprocessor_flags, ...).
    """
    for attr in _NOT_FOR_OBJECTS:
        if attr in kwargs:
            fail("dist_lto_cxx_binary `{}`: `{}` does not apply to a program's own objects".format(name, attr))
    link_deps = list(deps)
    if srcs:
        objects = name + "-objects"
        native.cxx_library(
            name = objects,
            srcs = srcs,
            deps = deps,
            link_whole = True,
            use_archive = False,
            preferred_linkage = "static",
            **kwargs
        )
        link_deps = [":" + objects] + link_deps
    dist_lto_cxx_link(name = name, deps = link_deps, linker_flags = linker_flags, visibility = visibility)
