# cxx_binary: compile, then link plainly, with in-process ThinLTO (LLD runs the
# backends on its threads), or with distributed ThinLTO (`dist_lto = True`: one
# Buck2 action per backend, scheduled from the index step's plans).

load("//dist_lto:link.bzl", "dist_lto_link")
load("//toolchain.bzl", "LlvmToolchainInfo", "TOOLCHAIN", "dist_lto_tools")
load(":compile.bzl", "compile_sources", "header_dir")
load(":link.bzl", "link_binary", "link_driver", "sample_profile_flags")
load(
    ":providers.bzl",
    "ArgsLinkable",
    "LinkGroup",
    "ObjectLinkable",
    "label_key",
    "merge_groups",
    "merge_include_dirs",
)

def _cxx_binary_impl(ctx: AnalysisContext) -> list[Provider]:
    toolchain = ctx.attrs._toolchain[LlvmToolchainInfo]
    lto = ctx.attrs.lto or ctx.attrs.dist_lto
    objects = compile_sources(
        ctx,
        toolchain,
        ctx.attrs.srcs,
        ctx.attrs.headers,
        header_dir(ctx, "headers", ctx.attrs.headers) + merge_include_dirs([], ctx.attrs.deps),
        ctx.attrs.compiler_flags,
        lto,
    )
    own = LinkGroup(
        owner = label_key(ctx.label),
        linkables = [ObjectLinkable(object = o.object, bitcode = o.bitcode) for o in objects],
        cxx = any([o.cxx for o in objects]),
    )
    groups = merge_groups([own], ctx.attrs.deps) + [_flags_group(ctx)]
    profile = ctx.attrs.sample_profile
    if ctx.attrs.dist_lto:
        out = dist_lto_link(
            ctx,
            dist_lto_tools(toolchain),
            ctx.label.name,
            groups,
            cmd_args(link_driver(toolchain, groups), toolchain.linker_flags),
            [toolchain.linker_flags, "-flto=thin", ctx.attrs.linker_flags, sample_profile_flags(profile)],
            [profile] if profile else [],
        ).binary
    else:
        out = link_binary(ctx, toolchain, groups, sample_profile_flags(profile), lto)
    return [DefaultInfo(default_output = out), RunInfo(args = cmd_args(out))]

def _flags_group(ctx: AnalysisContext) -> LinkGroup:
    """The binary's own linker flags, after every input (where `-l` flags must go)."""
    return LinkGroup(
        owner = label_key(ctx.label) + "#linker_flags",
        linkables = [ArgsLinkable(args = ctx.attrs.linker_flags)],
        cxx = False,
    )

cxx_binary = rule(
    impl = _cxx_binary_impl,
    doc = "A C/C++ program; `dist_lto = True` links it with distributed ThinLTO.",
    attrs = {
        "srcs": attrs.list(attrs.one_of(attrs.source(), attrs.tuple(attrs.source(), attrs.list(attrs.string()))), default = []),
        "headers": attrs.list(attrs.source(), default = []),
        "compiler_flags": attrs.list(attrs.string(), default = []),
        "linker_flags": attrs.list(attrs.string(), default = []),
        "deps": attrs.list(attrs.dep(), default = []),
        "lto": attrs.bool(default = True, doc = "compile to bitcode and link with in-process ThinLTO"),
        "dist_lto": attrs.bool(default = False, doc = "link with distributed ThinLTO (implies lto)"),
        "sample_profile": attrs.option(attrs.source(), default = None, doc = "an AutoFDO sample profile for the LTO backends"),
        "_toolchain": attrs.toolchain_dep(default = TOOLCHAIN, providers = [LlvmToolchainInfo]),
    },
)
