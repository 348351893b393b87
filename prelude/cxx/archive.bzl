# Making a static archive of objects with llvm-ar: regular (members copied in) or
# thin (members only named, so they stay inputs of whatever reads the archive).

load("//toolchain.bzl", "LlvmToolchainInfo")

# The kinds of archive a library can ask for.
ARCHIVE_KINDS = [
    "regular",  # members copied into the archive
    "thin",  # members referenced by path (llvm-ar --thin)
]

def make_archive(ctx: AnalysisContext, toolchain: LlvmToolchainInfo, objects: list[Artifact], kind: str) -> Artifact:
    if kind not in ARCHIVE_KINDS:
        fail("{}: archive kind must be one of {}, got `{}`".format(ctx.label.name, ARCHIVE_KINDS, kind))
    out = ctx.actions.declare_output("lib{}.a".format(ctx.label.name))
    cmd = cmd_args(
        toolchain.ar,
        "qcs",
        "--thin" if kind == "thin" else [],
        out.as_output(),
        objects,
    )
    ctx.actions.run(cmd, category = "archive", identifier = out.basename)
    return out
