# Plain and in-process ThinLTO links: the link line from the link groups.

load("//dist_lto:linkables.bzl", "linkable_args")
load("//toolchain.bzl", "LlvmToolchainInfo")
load(":providers.bzl", "ArchiveLinkable", "LinkGroup")

def link_line(groups: list[LinkGroup]):
    """The inputs of a link in order, as a command line (thin members as hidden inputs)."""
    args = []
    members = []
    for group in groups:
        for linkable in group.linkables:
            args.extend(linkable_args(linkable))
            if isinstance(linkable, ArchiveLinkable):
                members.extend(linkable.members)
    return cmd_args(args, hidden = members)

def needs_cxx(groups: list[LinkGroup]) -> bool:
    for group in groups:
        if group.cxx:
            return True
    return False

def link_driver(toolchain: LlvmToolchainInfo, groups: list[LinkGroup]) -> str:
    """clang++ when any input is C++ (it adds the C++ runtime), clang otherwise."""
    return toolchain.clangxx if needs_cxx(groups) else toolchain.clang

def sample_profile_flags(profile: Artifact | None) -> list:
    """The link flag that gives LTO backends a sample profile (LLD passes it to each)."""
    if profile == None:
        return []
    return [cmd_args(profile, format = "-Wl,--lto-sample-profile={}")]

def link_binary(
        ctx: AnalysisContext,
        toolchain: LlvmToolchainInfo,
        groups: list[LinkGroup],
        linker_flags: list,
        thin_lto: bool) -> Artifact:
    """A plain link, or an in-process ThinLTO link when `thin_lto` (LLD runs the backends)."""
    out = ctx.actions.declare_output(ctx.label.name)
    cmd = cmd_args(
        link_driver(toolchain, groups),
        toolchain.linker_flags,
        "-flto=thin" if thin_lto else [],
        "-o",
        out.as_output(),
        link_line(groups),
        linker_flags,
    )
    ctx.actions.run(cmd, category = "cxx_link", identifier = out.basename)
    return out
