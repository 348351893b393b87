"""The linker's line behind a clang driver's link, found once, so that a link can run the
linker itself.

A clang driver asked to link starts (about 30 ms here, loading libclang-cpp and libLLVM),
works out the linker's arguments and starts the linker. `clang -### FLAGS` prints that
command without running it, but refuses inputs that do not exist yet, so the inputs are
given as one `-Wl,` marker where the link's argument file stands: the driver copies
`-Wl,` words into the linker's line in place, between its own arguments before the
inputs (start files, library paths, LTO options) and after them (the C library, end
files). The output is a marker too, so one line serves every output.

A line is used only where it runs what the driver would: the driver printed one
command, of a linker, holding each marker once and nothing else of them, and said
nothing more (no warning, no `-v` lines); and every argument in the marker's place is
one the driver copies unchanged in place (`linker_inputs`). Otherwise the driver runs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from dist_lto.llvm.index_step import is_raw_linker
from dist_lto.process import children

RESOLVE_SECONDS = 20
"""How long the driver may take to print its line (it takes about 30 ms)."""
OUTPUT_LIMIT = 1 << 20
"""What of the driver's output is read (its line is a few kilobytes)."""

_QUOTED = re.compile(r' "((?:[^"\\]|\\.)*)"')
_ESCAPED = re.compile(r"\\(.)")
_HEADER = ("Target: ", "Thread model: ", "InstalledDir: ", "Build config: ", "Configuration file: ")
"""What `clang -###` prints before its commands, beside its version line."""

COMPILED_SUFFIXES = frozenset({
    "c", "C", "cc", "CC", "cp", "cpp", "CPP", "c++", "C++", "cxx", "CXX", "cppm", "ixx", "cu",
    "cui", "cuh", "cl", "clcpp", "hip", "hipi", "hlsl", "m", "M", "mm", "mi", "mii", "i", "ii",
    "iih", "iim", "s", "S", "sx", "asm", "ll", "bc", "ast", "pch", "gch", "pcm", "ifs", "h", "H",
    "hh", "hpp", "hxx", "inc", "f", "F", "for", "FOR", "fpp", "FPP", "f90", "F90", "f95", "F95",
    "f03", "F03", "f08", "F08",
})  # fmt: skip
"""File suffixes that a clang driver compiles or assembles rather than hands the linker."""


@dataclass(frozen=True, slots=True)
class LinkerLine:
    """A driver's link as the linker's own command: `before` (the linker first) up to the
    inputs, `after` them, and where in `before` the output goes."""

    before: tuple[str, ...]
    after: tuple[str, ...]
    output_at: int

    def command(self, inputs: Sequence[str], output: str | None) -> list[str]:
        """The linker's argv for `inputs` (linker words), writing `output` (None: no `-o`,
        as for an index step, which writes none)."""
        head = list(self.before)
        if output is not None:
            head[self.output_at : self.output_at] = ["-o", output]
        return [*head, *inputs, *self.after]

    def as_json(self) -> dict[str, object]:
        return {"before": list(self.before), "after": list(self.after), "output_at": self.output_at}

    @classmethod
    def from_json(cls, doc: dict[str, object]) -> LinkerLine:
        before, after, at = doc["before"], doc["after"], doc["output_at"]
        if not (_strings(before) and _strings(after) and type(at) is int):
            raise ValueError("not a linker line")
        return cls(tuple(before), tuple(after), at)  # type: ignore[arg-type]


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(type(v) is str for v in value)


def resolve(
    driver: Sequence[str],
    env: Mapping[str, str] | None = None,
    spent: Callable[[float], None] | None = None,
) -> LinkerLine | str:
    """The linker's line behind `driver` (a clang driver, named clang*, and its link
    flags, without `-o` or inputs), or why it cannot be used (the driver runs then).
    `spent` is told the CPU seconds the driver took."""
    if not driver or not os.path.basename(driver[0]).startswith("clang"):
        return "not a clang driver"
    for word in driver[1:]:
        if word.startswith("-o") or word in ("-###", "-v", "--verbose") or word.startswith("@"):
            return f"the driver is given `{word}`"
    nonce = os.urandom(8).hex()
    output, inputs = f"dist-lto-output-{nonce}", f"dist-lto-inputs-{nonce}"
    argv = [driver[0], "-###", *driver[1:], "-o", output, "-Wl," + inputs]
    try:
        done = children.run(
            argv,
            env=env,
            stdin=children.DEVNULL,
            stdout=children.CAPTURE,
            timeout=RESOLVE_SECONDS,
            cpu=True,
            limit=OUTPUT_LIMIT,
        )
    except children.CannotRun as err:
        return f"cannot run {driver[0]}: {err.reason}"
    except children.TimedOut:
        return f"{driver[0]} -### took more than {RESOLVE_SECONDS} s"
    if spent is not None:
        spent(done.cpu)
    text = (done.stdout + done.stderr).decode(errors="replace")
    if done.status != 0:
        said = [line for line in text.splitlines() if line and not _header(line)]
        return f"{driver[0]} -###: {said[0] if said else children.describe_status(done.status)}"
    return parse(text, nonce)


def parse(text: str, nonce: str) -> LinkerLine | str:
    """The line in `clang -###` output `text` whose markers carry `nonce`, or why not."""
    commands = []
    for line in text.splitlines():
        if line.startswith(' "'):
            words = _words(line)
            if words is None:
                return "the driver printed a command it did not quote whole"
            commands.append(words)
        elif not _header(line):
            return f"the driver said: {line.strip()}"
    if len(commands) != 1:
        return f"the driver would run {len(commands)} commands"
    words = commands[0]
    if not is_raw_linker(words):
        return f"the driver would run {words[0]}, not a linker"
    output, inputs = f"dist-lto-output-{nonce}", f"dist-lto-inputs-{nonce}"
    marked = [i for i, w in enumerate(words) if nonce in w]
    if [words[i] for i in marked] != [output, inputs] or words[marked[0] - 1] != "-o":
        return "the driver's line names the output or the inputs other than in place"
    out_at, in_at = marked
    before = words[: out_at - 1] + words[out_at + 1 : in_at]
    return LinkerLine(tuple(before), tuple(words[in_at + 1 :]), out_at - 1)


def _header(line: str) -> bool:
    return line.startswith(_HEADER) or "clang version " in line


def _words(line: str) -> list[str] | None:
    words = []
    at = 0
    for m in _QUOTED.finditer(line):
        if m.start() != at:
            return None
        words.append(_ESCAPED.sub(r"\1", m.group(1)))
        at = m.end()
    return words if at == len(line) and words else None


def linker_inputs(words: Iterable[str]) -> list[str] | None:
    """Driver link arguments as the driver hands them to the linker in place: files, `-l`,
    `-Wl,` and `-Xlinker`; None when anything else is among them. Other driver options
    take effect elsewhere in the line (`-L` before the driver's own search paths,
    `-pthread` a library after the inputs); a response file may hold anything; a source
    file is compiled first."""
    out: list[str] = []
    it = iter(words)
    for word in it:
        if word.startswith("-Wl,"):
            out += word[4:].split(",")
        elif word == "-Xlinker" or word == "-l":
            value = next(it, None)
            if value is None or (word == "-l" and value.startswith("-")):
                return None
            out.append(value if word == "-Xlinker" else "-l" + value)
        elif word.startswith("-l"):
            out.append(word)
        elif not word or word.startswith(("-", "@")) or _compiled(word):
            return None
        else:
            out.append(word)
    return out


def _compiled(path: str) -> bool:
    name = os.path.basename(path)
    return "." in name and name.rpartition(".")[2] in COMPILED_SUFFIXES


_known: dict[tuple[str, ...], LinkerLine] = {}


def remember(driver: Sequence[str], line: LinkerLine) -> None:
    """Tell this process the line behind `driver` (`known`)."""
    _known[tuple(driver)] = line


def known(driver: Sequence[str]) -> LinkerLine | None:
    """The line behind `driver` this process was told (`remember`), if any: the opt worker
    resolves it while the compiles run and tells each plan it sends its planner."""
    return _known.get(tuple(driver))
