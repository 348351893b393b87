"""`dist-lto upstream opt`: upstream's opt command line on `dist-lto opt`.

Upstream's Starlark runs, per module,
`OPT --out O --input M --index M.thinlto.bc --split-dwarf=MODE [--dwo D] --args FLAGS
-- COMPILER`, where FLAGS is the link's argument file (the linker driver first, then
its flags, one per line). Split DWARF (the toolchain's `split_debug_mode`) is ours:
`split` with `--dwo D`, `single` (kept in the object) as it is.
`dist-lto opt` does the rest: flags as LLD's in-process ThinLTO applies them, the
spelling check against the index, and a failure (clang's status, or exit 0 with an
empty or non-ELF object) is this action's failure. Runs once per module: standard
library only, no argparse on the usual path.
"""

from dist_lto.cli import scan
from dist_lto.commands import opt
from dist_lto.errors import BadInput

_VALUES = {"--out": "out", "--input": "input", "--index": "index", "--args": "args",
           "--dwo": "dwo", "--split-dwarf": "split_dwarf"}  # fmt: skip
_FLAGS = {"--debug": "debug"}


class _Upstream:
    __slots__ = ("args", "command", "debug", "dwo", "index", "input", "out", "split_dwarf")

    def __init__(self) -> None:
        self.out = self.input = self.index = ""
        self.args: str | None = None
        self.dwo: str | None = None
        self.split_dwarf = "none"
        self.debug = False
        self.command: list[str] = []


def translate_argv(argv: list[str]) -> list[str]:
    """The `dist-lto opt` argv for upstream's opt argv (BadInput for what we cannot run)."""
    up = _Upstream()
    positional = scan(argv, up, _VALUES, _FLAGS, rest="command")
    if positional is None or positional:
        raise BadInput(f"unexpected upstream opt arguments: {' '.join(argv)}")
    if not (up.out and up.input and up.index and up.command):
        raise BadInput("upstream opt needs --out, --input, --index and `-- COMPILER`")
    ours = ["--input", up.input, "--index", up.index, "--out", up.out]
    if up.split_dwarf != "none":
        ours.append(f"--split-dwarf={up.split_dwarf}")  # checked by `dist-lto opt`
    if up.dwo:
        ours += ["--dwo", up.dwo]
    if up.args:
        ours += ["--args", up.args]
    if up.debug:
        ours.append("--print-command")
    return [*ours, "--", *up.command]


def main(argv: list[str]) -> int:
    return opt.main(translate_argv(argv))
