# cxx_library: sources compiled (to ThinLTO bitcode by default) into a regular or
# thin archive, with headers and link groups for the targets that depend on it.

load("//toolchain.bzl", "LlvmToolchainInfo", "TOOLCHAIN")
load(":archive.bzl", "ARCHIVE_KINDS", "make_archive")
load(":compile.bzl", "compile_sources", "header_dir")
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

def _cxx_library_impl(ctx: AnalysisContext) -> list[Provider]:
    toolchain = ctx.attrs._toolchain[LlvmToolchainInfo]
    exported = header_dir(ctx, "exported_headers", ctx.attrs.exported_headers)
    private = header_dir(ctx, "headers", ctx.attrs.headers + ctx.attrs.exported_headers)
    objects = compile_sources(
        ctx,
        toolchain,
        ctx.attrs.srcs,
        ctx.attrs.headers + ctx.attrs.exported_headers,
        private + merge_include_dirs([], ctx.attrs.deps),
        ctx.attrs.compiler_flags,
        ctx.attrs.lto,
    )
    linkables = []
    archive = None
    if objects:
        archive = make_archive(ctx, toolchain, [o.object for o in objects], ctx.attrs.archive)
        linkables.append(ArchiveLinkable(
            archive = archive,
            members = [o.object for o in objects] if ctx.attrs.archive == "thin" else [],
            bitcode = any([o.bitcode for o in objects]),
            whole = ctx.attrs.link_whole,
            objects = [o.object for o in objects],
        ))
    if ctx.attrs.exported_linker_flags:
        linkables.append(ArgsLinkable(args = ctx.attrs.exported_linker_flags))
    own = LinkGroup(owner = label_key(ctx.label), linkables = linkables, cxx = any([o.cxx for o in objects]))
    return [
        DefaultInfo(default_output = archive),
        CxxLinkInfo(groups = merge_groups([own], ctx.attrs.deps)),
        CxxHeadersInfo(include_dirs = merge_include_dirs(exported, ctx.attrs.deps)),
    ]

cxx_library = rule(
    impl = _cxx_library_impl,
    doc = "A C/C++ library: an archive of ThinLTO bitcode objects (unless lto = False).",
    attrs = {
        "srcs": attrs.list(attrs.one_of(attrs.source(), attrs.tuple(attrs.source(), attrs.list(attrs.string()))), default = []),
        "headers": attrs.list(attrs.source(), default = []),
        "exported_headers": attrs.list(attrs.source(), default = []),
        "compiler_flags": attrs.list(attrs.string(), default = []),
        "exported_linker_flags": attrs.list(attrs.string(), default = []),
        "deps": attrs.list(attrs.dep(), default = []),
        "lto": attrs.bool(default = True, doc = "compile to ThinLTO bitcode"),
        "archive": attrs.enum(ARCHIVE_KINDS, default = "regular"),
        "link_whole": attrs.bool(default = False),
        "_toolchain": attrs.toolchain_dep(default = TOOLCHAIN, providers = [LlvmToolchainInfo]),
    },
)
