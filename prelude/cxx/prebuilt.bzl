# prebuilt_cxx_library: an archive built elsewhere, linked as it is (or whole).

load(
    ":providers.bzl",
    "ArchiveLinkable",
    "ArgsLinkable",
    "CxxHeadersInfo",
    "CxxLinkInfo",
    "LinkGroup",
    "label_key",
    "merge_groups",
    "merge_include_dirs",
)
load("//dist_lto:prepare.bzl", "prepare_library_archive")
load("//toolchain.bzl", "LlvmToolchainInfo", "TOOLCHAIN", "dist_lto_tools")
load(":compile.bzl", "header_dir")

def _prebuilt_cxx_library_impl(ctx: AnalysisContext) -> list[Provider]:
    # A bitcode archive's contents are unknown here: prepared once for every link.
    prepared = None
    if ctx.attrs.bitcode:
        tools = dist_lto_tools(ctx.attrs._toolchain[LlvmToolchainInfo])
        prepared = prepare_library_archive(ctx, tools, ctx.attrs.static_lib)
    linkables = [ArchiveLinkable(
        archive = ctx.attrs.static_lib,
        members = [],
        bitcode = ctx.attrs.bitcode,
        whole = ctx.attrs.link_whole,
        prepared = prepared,
    )]
    if ctx.attrs.exported_linker_flags:
        linkables.append(ArgsLinkable(args = ctx.attrs.exported_linker_flags))
    own = LinkGroup(owner = label_key(ctx.label), linkables = linkables, cxx = ctx.attrs.cxx)
    return [
        DefaultInfo(default_output = ctx.attrs.static_lib),
        CxxLinkInfo(groups = merge_groups([own], ctx.attrs.deps)),
        CxxHeadersInfo(include_dirs = merge_include_dirs(
            header_dir(ctx, "exported_headers", ctx.attrs.exported_headers),
            ctx.attrs.deps,
        )),
    ]

prebuilt_cxx_library = rule(
    impl = _prebuilt_cxx_library_impl,
    doc = "A prebuilt static archive. Native unless `bitcode`; `link_whole` keeps every member.",
    attrs = {
        "static_lib": attrs.source(),
        "link_whole": attrs.bool(default = False),
        "bitcode": attrs.bool(default = False, doc = "may hold ThinLTO bitcode members"),
        "cxx": attrs.bool(default = False, doc = "needs the C++ runtime"),
        "exported_headers": attrs.list(attrs.source(), default = []),
        "exported_linker_flags": attrs.list(attrs.string(), default = []),
        "deps": attrs.list(attrs.dep(), default = []),
        "_toolchain": attrs.toolchain_dep(default = TOOLCHAIN, providers = [LlvmToolchainInfo]),
    },
)
