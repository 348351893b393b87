# A tool named by its path on every machine that runs actions (LLVM 22 is installed
# there): nothing is downloaded.

def _path_tool_impl(ctx: AnalysisContext) -> list[Provider]:
    return [DefaultInfo(), RunInfo(args = cmd_args(ctx.attrs.path))]

path_tool = rule(
    impl = _path_tool_impl,
    attrs = {"path": attrs.string()},
)
