"""`dist-lto upstream TOOL ...`: our tools behind Buck2's upstream prelude.

Buck2's bundled prelude runs distributed ThinLTO (`cxx_binary(enable_distributed_thinlto
= True)`) with the tools a toolchain names in `DistLtoToolsInfo`. Each module here
accepts the command line upstream's Starlark writes for one of them and translates
between upstream's files and ours; the work itself is done by `dist_lto.archive.prepare`,
`dist_lto.planning.planner` and `dist_lto.commands.opt` (docs/upstream-buck2.md):

- `prepare`: upstream's `--manifest-out/--objects-out/--archive` on `dist-lto prepare`;
- `plan`: upstream's planner (`--meta ... -- INDEX COMMAND`) on `dist-lto plan`, with
  stock LLD (no `--thinlto-full-index`, no `index.full`);
- `opt`: upstream's opt tool (`--out/--input/--index/--args -- COMPILER`) on
  `dist-lto opt`; it runs once per module, so it and this dispatcher import nothing
  beyond the opt path's modules;
- `copy`: upstream's copy tool for native archive members.
"""

import sys

TOOLS = {
    "prepare": "dist_lto.upstream.prepare",
    "plan": "dist_lto.upstream.plan",
    "opt": "dist_lto.upstream.opt",
    "copy": "dist_lto.upstream.copy_member",
}
"""Tool name -> module with `main(argv) -> int`."""

_USAGE = "usage: dist-lto upstream {prepare,plan,opt,copy} ARGS...  (docs/upstream-buck2.md)"


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in TOOLS:
        print(_USAGE, file=sys.stderr if argv[:1] not in (["-h"], ["--help"]) else sys.stdout)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    module = __import__(TOOLS[argv[0]], fromlist=["main"])
    return module.main(argv[1:])
