"""The files of upstream Buck2's distributed ThinLTO, as its Starlark writes and reads them.

One owner for each: the meta file (7 lines per input, `read_upstream_meta`), the index
command and its argument file (`split_index_command`, `read_argsfile`), the object and
archive plans, the index list, the link plan and the final link's argument file it
reads back, and the manifest of its prepare step. docs/formats.md describes them; the
translation between these and ours is `plan.py`'s and `prepare.py`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dist_lto.errors import BadInput, DistLtoError
from dist_lto.formats import jsonio
from dist_lto.formats.response_file import response_file
from dist_lto.fsutil import read_input

META_LINES = 7
INDEX_SUFFIX = ".thinlto.bc"
OPT_SUFFIX = ".opt.o"
ARGSFILE_SUFFIX = "thinlto_index_argsfile"
START_LIB = ("-Wl,--start-lib", "--start-lib")
END_LIB = ("-Wl,--end-lib", "--end-lib")
INDEX_FLAGS = ("--thinlto-index-only", "--thinlto-emit-imports-files", "--thinlto-full-index",
                "--thinlto-prefix-replace")  # fmt: skip
"""Upstream's index-step flags; `dist-lto plan` adds its own."""


@dataclass
class UpstreamObject:
    """A bitcode-object entry of upstream's meta."""

    path: str
    index: int
    index_output: str
    plan_output: str
    line: int = 0
    """Its first line in the meta file (0: not read from one)."""

    @property
    def opt_output(self) -> str:
        """Where upstream's Starlark binds this object's optimised object."""
        return self.index_output.removesuffix(INDEX_SUFFIX) + OPT_SUFFIX


@dataclass
class UpstreamArchive:
    """An archive of upstream's meta, with its members in manifest order."""

    index: int
    plan_output: str
    index_dir: str
    members: list[str] = field(default_factory=list)
    line: int = 0
    """The first line of its first member in the meta file (0: not read from one)."""


@dataclass
class UpstreamMeta:
    objects: dict[str, UpstreamObject]
    archives: dict[int, UpstreamArchive]
    member_archive: dict[str, int]
    """Member path -> archive index."""


def read_upstream_meta(path: str) -> UpstreamMeta:
    """Upstream's meta file: 7 lines per input (path, index output, plan output, index,
    archive name, archive plan, archive index directory), then an empty line."""
    try:
        lines = read_input(path, "upstream meta file").decode().split("\n")
    except UnicodeDecodeError as err:
        raise BadInput(f"{path}: cannot read upstream meta file: {err}") from None
    if lines and lines[-1] == "":
        lines.pop()  # the last line's newline
    if len(lines) % META_LINES == 1 and lines[-1] == "":
        lines.pop()  # upstream's terminating empty line (an object's own fields end empty)
    if len(lines) % META_LINES:
        raise BadInput(f"{path}: {len(lines)} lines, not a multiple of {META_LINES}")
    meta = UpstreamMeta({}, {}, {})
    for at in range(0, len(lines), META_LINES):
        obj, index_out, plan_out, idx, _name, archive_plan, archive_dir = lines[at : at + 7]
        try:
            index = int(idx)
        except ValueError:
            raise BadInput(f"{path}: line {at + 4}: index {idx!r} is not a number") from None
        if not 0 <= index < 1 << 63:
            raise BadInput(f"{path}: line {at + 4}: index {idx!r} is not between 0 and 2**63-1")
        if not obj:
            raise BadInput(f"{path}: line {at + 1}: empty object path")
        if index_out:
            meta.objects[obj] = UpstreamObject(obj, index, index_out, plan_out, at + 1)
        else:
            archive = meta.archives.setdefault(
                index, UpstreamArchive(index, archive_plan, archive_dir, line=at + 1)
            )
            archive.members.append(obj)
            meta.member_archive[obj] = index
    return meta


@dataclass
class IndexCommand:
    """Upstream's index command, taken apart."""

    head: list[str]
    """The linker driver and the toolchain's flags (before ARGSFILE)."""
    argsfile: str
    tail: list[str]
    """The toolchain's post-linker flags (after upstream's own index flags)."""


def split_index_command(command: list[str]) -> IndexCommand:
    at = [i for i, a in enumerate(command) if a.startswith("@") and a.endswith(ARGSFILE_SUFFIX)]
    if len(at) != 1:
        raise BadInput(
            f"the index command has {len(at)} @...{ARGSFILE_SUFFIX} arguments, expected one"
        )
    head, rest = command[: at[0]], command[at[0] + 1 :]
    tail: list[str] = []
    i = 0
    while i < len(rest):
        arg = rest[i]
        i += 1
        if arg == "-o":
            i += 1  # the real output: never given to the index step
        elif arg.removeprefix("-Wl,").startswith(INDEX_FLAGS):
            continue
        else:
            tail.append(arg)
    if not head:
        raise BadInput("the index command has no linker before its argument file")
    return IndexCommand(head, command[at[0]][1:], tail)


def read_argsfile(path: str) -> list[str]:
    """Buck2's argument file: one argument per line, as written."""
    try:
        text = read_input(path, "index argument file").decode()
    except UnicodeDecodeError as err:
        raise BadInput(f"{path}: cannot read the index argument file: {err}") from None
    return [line for line in text.split("\n") if line]


def final_link_args(final: list[str], tail: list[str], substitutes: dict[str, str]) -> list[str]:
    """Our final line without the post-linker flags (upstream's final link command adds
    them again), with the files upstream binds in place of ours: native archive members
    from the optimised-objects directory, a `LazyGroup`'s optimised objects where
    upstream's opt actions write them."""
    if tail:
        if final[-len(tail) :] != tail:
            raise DistLtoError("the final link line does not end with the post-linker flags")
        final = final[: -len(tail)]
    return [substitutes.get(arg, arg) for arg in final]


def object_plan_bytes(
    index: int, path: str, bitcode_file: str, imports: list[int], archive_imports: list[int]
) -> bytes:
    """Upstream's plan of a bitcode object its opt action optimises."""
    return jsonio.dumps(
        {
            "archive_imports": archive_imports,
            "bitcode_file": bitcode_file,
            "imports": imports,
            "index": index,
            "is_bc": True,
            "path": path,
        }
    )


NOT_OPTIMISED = jsonio.dumps({"is_bc": False})
"""Upstream's plan of an object no opt action runs on (native, or never loaded)."""


def archive_plan_bytes(base_dir: str, entries: list[dict[str, object]]) -> bytes:
    """Upstream's archive plan: `base_dir` and one entry per member, in member order."""
    return jsonio.dumps({"base_dir": base_dir, "objects": entries})


def index_list_bytes(paths: list[str]) -> bytes:
    """`DIR/index`: the objects the link loaded, one path per line."""
    return "".join(path + "\n" for path in paths).encode()


def link_plan_bytes(loaded: list[int], native: list[int]) -> bytes:
    """Upstream's link plan: the objects the link loaded and those that are native."""
    return jsonio.dumps(
        {
            "index": {str(i): 1 for i in sorted(loaded)},
            "non_lto_objects": {str(i): 1 for i in sorted(native)},
        }
    )


def final_link_args_bytes(args: list[str]) -> bytes:
    """The final link's argument file upstream's link action reads."""
    return response_file(args)


def prepare_manifest_bytes(manifest: str, objects: list[str]) -> bytes:
    """The manifest of upstream's prepare step: its objects as the index step spells them
    (and, for us, where our own manifest lies)."""
    return jsonio.dumps({"manifest": manifest, "objects": objects})
