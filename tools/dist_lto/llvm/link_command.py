"""A plain link command split into the link's inputs and the flags of the whole link.

A link line (`clang -fuse-ld=lld -O2 main.o libfoo.a -lm -o app`) mixes three kinds of
arguments: the inputs (objects, archives, shared libraries, linker scripts); flags whose
place among the inputs matters (`-lm`, `-Wl,--whole-archive`, `-Wl,--start-group`,
`-Wl,-Bstatic`, `-Wl,--as-needed`); and flags that hold for the whole link (`-O2`,
`-fuse-ld=lld`, `-o app`, `-L dir`). The meta file keeps the first two in their order;
the third is the COMMAND that the index step and the final link run with their `@file`
(docs/link.md). Works for a clang driver and for LLD itself (`ld.lld`), whose flags are
told apart by LLD 22's option table (`llvm/flags.py`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from dist_lto.errors import BadInput
from dist_lto.llvm.flags import DRIVER_SEPARATE, LLD_SEPARATE, LLD_SHORT_SEPARATE, ArgCursor
from dist_lto.llvm.index_step import is_raw_linker

POSITIONAL_WORDS = frozenset({
    "--whole-archive", "-whole-archive", "--no-whole-archive", "-no-whole-archive",
    "--start-group", "-start-group", "--end-group", "-end-group", "-(", "-)",
    "--start-lib", "-start-lib", "--end-lib", "-end-lib",
    "--as-needed", "-as-needed", "--no-as-needed", "-no-as-needed",
    "-Bstatic", "-Bdynamic", "-dn", "-dy", "-non_shared", "-call_shared", "-static",
    "--push-state", "-push-state", "--pop-state", "-pop-state",
    "--copy-dt-needed-entries", "--no-copy-dt-needed-entries",
})  # fmt: skip
"""LLD's flags that act on the inputs after them (`-static` is `-Bstatic` to LLD, not to
the driver)."""


@dataclass(frozen=True, slots=True)
class Operand:
    """An input file, spelled as on the link line."""

    path: str


@dataclass(frozen=True, slots=True)
class InPlace:
    """Flags that must keep their place among the inputs (a library, a region flag)."""

    args: tuple[str, ...]


Item = Operand | InPlace


@dataclass(frozen=True, slots=True)
class LinkCommand:
    """A link line split: `command` (the program and the whole link's flags, in their
    order) and `items` (inputs and positional flags, in theirs). `command + items`
    links the same program as the original line."""

    command: list[str]
    items: tuple[Item, ...]
    raw_linker: bool


_SEPARATE = LLD_SEPARATE | {"mllvm", "plugin-opt"}
"""LLD's long options whose value may be the next argument."""


def _library(word: str) -> bool:
    """`-lfoo`, `--library=foo` (not `-lto-...`, a single-dash spelling of `--lto-...`)."""
    if word.startswith("-l"):
        return not word.startswith("-lto-")
    return word.startswith("--library=")


def _in_place(words: list[str]) -> bool:
    return any(w in POSITIONAL_WORDS or _library(w) for w in words)


class _Walk(ArgCursor):
    """A cursor over the link line's arguments after the program."""

    __slots__ = ("flags", "items")

    def __init__(self, args: list[str]) -> None:
        super().__init__(args, "COMMAND")
        self.flags: list[str] = []
        self.items: list[Item] = []


def _check(arg: str) -> None:
    if not arg:
        raise BadInput("COMMAND: an empty argument")
    if arg[0] == "@":
        raise BadInput(f"COMMAND: {arg!r}: expand response files into the link command")
    if arg == "-":
        raise BadInput("COMMAND: '-' (standard input) cannot be an input of a planned link")


def _driver_arg(arg: str, walk: _Walk) -> None:
    if arg[0] != "-":
        walk.items.append(Operand(arg))
    elif arg == "-l":
        walk.items.append(InPlace((arg, walk.value(arg))))
    elif arg.startswith("-l"):
        walk.items.append(InPlace((arg,)))
    elif arg.startswith("-Wl,"):
        if _in_place(arg[4:].split(",")):
            walk.items.append(InPlace((arg,)))
        else:
            walk.flags.append(arg)
    elif arg == "-Xlinker":
        value = walk.value(arg)
        if _in_place([value]):
            walk.items.append(InPlace((arg, value)))
        else:
            walk.flags += [arg, value]
    elif arg.startswith("-x"):
        raise BadInput(f"COMMAND: {arg!r}: a link command names no source language")
    elif arg in DRIVER_SEPARATE:
        walk.flags += [arg, walk.value(arg)]
    else:
        walk.flags.append(arg)


def _linker_arg(arg: str, walk: _Walk) -> None:
    if arg[0] != "-":
        walk.items.append(Operand(arg))
        return
    name = arg[2:] if arg.startswith("--") else arg[1:]
    if arg in ("-l", "--library"):
        walk.items.append(InPlace((arg, walk.value(arg))))
    elif _in_place([arg]):
        walk.items.append(InPlace((arg,)))
    elif (arg[1] != "-" and name in LLD_SHORT_SEPARATE) or name in _SEPARATE:
        walk.flags += [arg, walk.value(arg)]
    else:
        walk.flags.append(arg)


def split(command: list[str]) -> LinkCommand:
    """Split a link command (program first); BadInput for what no planned link can take
    (a response file, standard input, a flag missing its value)."""
    if not command:
        raise BadInput("COMMAND: the link command is empty")
    raw = is_raw_linker(command)
    walk = _Walk(command[1:])
    step = _linker_arg if raw else _driver_arg
    while (arg := walk.next()) is not None:
        _check(arg)
        step(arg, walk)
    return LinkCommand([command[0], *walk.flags], tuple(walk.items), raw)


def _program(name: str) -> str:
    """A program as the system finds it: `clang-22` and `/usr/lib/llvm-22/bin/clang` are
    one program spelled two ways."""
    import shutil

    found = shutil.which(name)
    return os.path.realpath(found) if found else name


def difference(planned: list[str], given: list[str]) -> str | None:
    """How `given` differs from `planned` (two link commands), as one phrase; None when
    they are the same command (the program may be spelled differently)."""
    import difflib
    import shlex

    changes = []
    if planned[:1] != given[:1] and _program(planned[0]) != _program(given[0]):
        changes.append(f"program {given[0]!r} where the plan has {planned[0]!r}")
    matcher = difflib.SequenceMatcher(a=planned[1:], b=given[1:], autojunk=False)
    for op, a1, a2, b1, b2 in matcher.get_opcodes():
        old, new = shlex.join(planned[1 + a1 : 1 + a2]), shlex.join(given[1 + b1 : 1 + b2])
        if op == "replace":
            changes.append(f"`{new}` where the plan has `{old}`")
        elif op == "delete":
            changes.append(f"no `{old}`, which the plan has")
        elif op == "insert":
            changes.append(f"`{new}`, which the plan lacks")
    return "; ".join(changes) or None


def _joined_output(arg: str, raw: bool) -> str | None:
    """The flag part of `arg` when it names the output with its path joined (`-oapp`;
    `--output=app` to LLD), else None."""
    if raw:
        if arg in ("-output", "--output"):
            return None
        for flag in ("--output=", "-output="):
            if arg.startswith(flag):
                return flag
    if arg.startswith("-o") and len(arg) > 2 and not arg.startswith("-obj"):
        return "-o"
    return None


def _takes_value(arg: str, raw: bool) -> bool:
    """Whether `arg` is a flag whose value is the next argument (not the output's)."""
    if not raw:
        return arg in DRIVER_SEPARATE
    if not arg.startswith("-"):
        return False
    name = arg[2:] if arg.startswith("--") else arg[1:]
    return (arg[1] != "-" and name in LLD_SHORT_SEPARATE) or name in _SEPARATE


def with_output(command: list[str], path: str) -> tuple[list[str], str] | None:
    """`command` with its output (`-o`) respelled as `path`, and the output it named; None
    when it names none or more than one, or names one through `-Wl,` or `-Xlinker`."""
    raw = is_raw_linker(command)
    separate = {"-o", "--output", "-output"} if raw else {"-o"}
    result = [command[0]]
    found: str | None = None
    walk = ArgCursor(command[1:])
    while (arg := walk.next()) is not None:
        flag = _joined_output(arg, raw)
        if flag is not None or arg in separate:
            named = arg[len(flag) :] if flag is not None else walk.next()
            if found is not None or not named:
                return None
            found = named
            result += [flag + path] if flag is not None else [arg, path]
            continue
        if arg.startswith("-Wl,") and any(
            part.startswith(("-o", "--o")) for part in arg[4:].split(",")
        ):
            return None  # an output (or what might be one) given to the linker directly
        result.append(arg)
        if _takes_value(arg, raw) and (value := walk.next()) is not None:
            if arg == "-Xlinker" and value in ("-o", "--output", "-output"):
                return None
            result.append(value)
    return (result, found) if found is not None else None
