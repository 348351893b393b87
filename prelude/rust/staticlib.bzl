# rust_staticlib: a Rust crate as a static library for C/C++ binaries. With
# `linker_plugin_lto` (the default) its own code is LLVM bitcode (-Clinker-plugin-lto)
# while the standard library members stay native: an archive mixing both, which the
# distributed link prepares like any other.

load("//cxx:providers.bzl", "ArchiveLinkable", "ArgsLinkable", "CxxLinkInfo", "LinkGroup", "label_key")
load("//dist_lto:prepare.bzl", "prepare_library_archive")
load("//toolchain.bzl", "LlvmToolchainInfo", "TOOLCHAIN", "dist_lto_tools")

def _rust_staticlib_impl(ctx: AnalysisContext) -> list[Provider]:
    toolchain = ctx.attrs._toolchain[LlvmToolchainInfo]
    crate = ctx.attrs.crate or ctx.label.name.replace("-", "_")
    out = ctx.actions.declare_output("lib{}.a".format(crate))
    cmd = cmd_args(
        toolchain.rustc,
        "--crate-type=staticlib",
        "--crate-name=" + crate,
        "--edition=" + ctx.attrs.edition,
        "-Copt-level=2",
        "-Clinker-plugin-lto" if ctx.attrs.linker_plugin_lto else [],
        ctx.attrs.rustc_flags,
        "-o",
        out.as_output(),
        ctx.attrs.crate_root,
        hidden = ctx.attrs.srcs,
    )
    ctx.actions.run(cmd, category = "rustc", identifier = crate)
    # Bitcode and native members mixed: prepared once for every link.
    prepared = None
    if ctx.attrs.linker_plugin_lto:
        prepared = prepare_library_archive(ctx, dist_lto_tools(toolchain), out)
    own = LinkGroup(
        owner = label_key(ctx.label),
        linkables = [
            ArchiveLinkable(archive = out, members = [], bitcode = ctx.attrs.linker_plugin_lto, whole = False, prepared = prepared),
            ArgsLinkable(args = ctx.attrs.native_libs),
        ],
        cxx = False,
    )
    return [DefaultInfo(default_output = out), CxxLinkInfo(groups = [own])]

rust_staticlib = rule(
    impl = _rust_staticlib_impl,
    doc = "A Rust static library (crate-type=staticlib) to link into C/C++ binaries.",
    attrs = {
        "crate_root": attrs.source(),
        "srcs": attrs.list(attrs.source(), default = []),
        "crate": attrs.string(default = ""),
        "edition": attrs.string(default = "2021"),
        "rustc_flags": attrs.list(attrs.string(), default = []),
        "linker_plugin_lto": attrs.bool(default = True, doc = "emit LLVM bitcode for cross-language ThinLTO"),
        # What `rustc --print native-static-libs` asks for on x86_64 Linux glibc.
        "native_libs": attrs.list(attrs.string(), default = ["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl", "-lc"]),
        "_toolchain": attrs.toolchain_dep(default = TOOLCHAIN, providers = [LlvmToolchainInfo]),
    },
)
