"""The index link line and the final link line, both derived from the meta file.

One walk over the groups renders both, so the two links keep the same order and
the same flags; only what stands for an object or an archive differs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from dist_lto.formats.meta import ArchiveInput, ArgsInput, Meta, ObjectInput

_WHOLE_ON = frozenset({"--whole-archive", "-whole-archive"})
_WHOLE_OFF = frozenset({"--no-whole-archive", "-no-whole-archive"})


def linker_words(flags: Iterable[str]) -> Iterator[str]:
    """The linker's own arguments among driver flags (`-Wl,a,b` and `-Xlinker a` unwrapped)."""
    it = iter(flags)
    for flag in it:
        if flag.startswith("-Wl,"):
            yield from flag[4:].split(",")
        elif flag == "-Xlinker":
            yield next(it, "")
        else:
            yield flag


def _whole_after(flags: Iterable[str], whole: bool) -> bool:
    for word in linker_words(flags):
        if word in _WHOLE_ON:
            whole = True
        elif word in _WHOLE_OFF:
            whole = False
    return whole


def whole_archives(meta: Meta) -> dict[int, bool]:
    """Archive index -> linked whole: declared so, or between `--whole-archive` flags.

    `--start-lib` files ignore `--whole-archive` (measured with LLD 22), so an
    archive inside such a region must be listed plainly, not lazily.
    """
    state = False
    result: dict[int, bool] = {}
    for group in meta.groups:
        state = _whole_after(group.pre_flags, state)
        for item in group.linkables:
            if type(item) is ArgsInput:
                state = _whole_after(item.args, state)
            elif type(item) is ArchiveInput:
                result[item.index] = item.whole or state
        state = _whole_after(group.post_flags, state)
    return result


GROUP_WORDS = frozenset({"--start-group", "-start-group", "--end-group", "-end-group", "-(", "-)"})
"""LLD's group flags. LLD resolves symbols against every archive wherever it stands on the
line, so a group changes nothing but `--warn-backrefs` reports; and LLD refuses
`--start-lib` inside a group, which is how both link lines give archive members."""


def without_groups(args: Iterable[str]) -> list[str]:
    """`args` without group flags, bare, after `-Xlinker`, or among a `-Wl,` list's."""
    out: list[str] = []
    it = iter(args)
    for arg in it:
        if arg.startswith("-Wl,"):
            words = arg[4:].split(",")
            kept = [w for w in words if w not in GROUP_WORDS]
            if len(kept) == len(words):
                out.append(arg)
            elif any(kept):
                out.append("-Wl," + ",".join(kept))
        elif arg == "-Xlinker":
            value = next(it, None)
            if value is None:
                out.append(arg)
            elif value not in GROUP_WORDS:
                out += [arg, value]
        elif arg not in GROUP_WORDS:
            out.append(arg)
    return out


def lib(paths: list[str], raw_linker: bool) -> list[str]:
    """`paths` as lazy objects, like an archive's members."""
    if not paths:
        return []
    if raw_linker:
        return ["--start-lib", *paths, "--end-lib"]
    return ["-Wl,--start-lib", *paths, "-Wl,--end-lib"]


def render(
    meta: Meta,
    object_arg: Callable[[ObjectInput], str],
    archive_args: Callable[[ArchiveInput], list[str]],
    flags: Callable[[list[str]], list[str]] = list,
) -> list[str]:
    """The link line's inputs: each group's pre flags, linkables and post flags, in order,
    without group flags (`without_groups`), so archives may stand between them; the
    meta's own flags and args as `flags` gives them (unchanged by default)."""
    line: list[str] = []
    for group in meta.groups:
        line += flags(without_groups(group.pre_flags))
        for item in group.linkables:
            if type(item) is ObjectInput:
                line.append(object_arg(item))
            elif type(item) is ArchiveInput:
                line += archive_args(item)
            else:
                line += flags(without_groups(item.args))  # type: ignore[union-attr]
        line += flags(without_groups(group.post_flags))
    return line


@dataclass(frozen=True, slots=True)
class FinalMember:
    """What the final link gets for one member: a path, or nothing when never loaded."""

    path: str | None
    lazy: bool


def final_archive_args(members: list[FinalMember], whole: bool, raw_linker: bool) -> list[str]:
    """A prepared archive on the final line: loaded bitcode plainly, native members lazily.

    Every module the index step loaded is linked, as in-process ThinLTO links every
    loaded module (their static constructors included); native members stay lazy so
    the linker still decides about them; never-loaded bitcode is left out.
    """
    out: list[str] = []
    run: list[str] = []
    for m in members:
        if m.path is None:
            continue
        if m.lazy and not whole:
            run.append(m.path)
            continue
        out += lib(run, raw_linker)
        run = []
        out.append(m.path)
    return out + lib(run, raw_linker)
