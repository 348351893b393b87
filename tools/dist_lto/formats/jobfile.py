"""LLD 22's DTLTO job file (`<output>.<pid>.dist-file.json`): read and validated strictly.

LLD writes one per link and runs the distributor on it (`<prog> <args...> <file>`):

    {"common": {"linker_output": "prog", "args": [compiler, flags...], "inputs": [...]},
     "jobs": [{"args": [module, "-fthinlto-index=<index>", "-o", <object>, ...],
               "inputs": [module, index, imported modules...],
               "outputs": [object, ...]}, ...]}

Each job's command is `common.args + job.args`. The file is LLD's format, not ours, so
it has no version: anything LLD 22 would not write (a missing or unknown field, a
wrong type, a job whose arguments do not name its reserved inputs and output) is
rejected with its JSON pointer rather than guessed at. See docs/distribute.md.
"""

import os

from dist_lto import TYPE_CHECKING
from dist_lto.formats.jsonio import Fields, read_json

if TYPE_CHECKING:
    from typing import Any, ClassVar

INDEX_FLAG = "-fthinlto-index="
OUTPUT_FLAG = "-o"

_assign = object.__setattr__


class _Frozen:
    """What `@dataclass(frozen=True)` gave Job and JobFile, without `dataclasses`: the
    distributor reads a job file on every link, and that import (with the `inspect`
    it loads) costs more than reading a whole job file. Equality compares
    the `_fields` in order, fields cannot be assigned, instances are unhashable (their
    fields are lists) and can be copied and pickled."""

    __slots__ = ()
    _fields: "ClassVar[tuple[str, ...]]" = ()

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({shown})"

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:  # copy and pickle, as before
        return type(self), self._values()

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}")


class Job(_Frozen):
    """One backend compile (immutable; a slotted class, not a dataclass: see `_Frozen`).

    Invariants (checked by `parse_job_file`): `inputs[0]` is the module and `args`
    names it; `inputs[1]` is its index and `args` holds `-fthinlto-index=<inputs[1]>`;
    `outputs[0]` is the native object and `args` holds exactly one `-o <outputs[0]>`
    pair, at `output_at`.
    """

    __slots__ = ("args", "inputs", "number", "output_at", "outputs")
    _fields = ("number", "args", "inputs", "outputs", "output_at")

    number: int
    """Position in the file's `jobs` array (messages, JSON pointers)."""
    args: list[str]
    inputs: list[str]
    outputs: list[str]
    output_at: int
    """Index of `-o` in `args`."""

    def __init__(
        self, number: int, args: list[str], inputs: list[str], outputs: list[str], output_at: int
    ) -> None:
        _assign(self, "number", number)
        _assign(self, "args", args)
        _assign(self, "inputs", inputs)
        _assign(self, "outputs", outputs)
        _assign(self, "output_at", output_at)

    @property
    def module(self) -> str:
        return self.inputs[0]

    @property
    def index(self) -> str:
        return self.inputs[1]

    @property
    def output(self) -> str:
        return self.outputs[0]

    def args_without_output(self) -> list[str]:
        """`args` minus the `-o <object>` pair (the strict runner supplies its own `-o`)."""
        return self.args[: self.output_at] + self.args[self.output_at + 2 :]


class JobFile(_Frozen):
    """A whole job file (immutable; not a dataclass: see `_Frozen`). `args[0]` is the
    compiler (`--thinlto-remote-compiler=`, else the clang that drove the link);
    `inputs` are files every job reads (profiles)."""

    __slots__ = ("args", "inputs", "jobs", "linker_output", "path")
    _fields = ("path", "linker_output", "args", "inputs", "jobs")

    path: str
    linker_output: str
    args: list[str]
    inputs: list[str]
    jobs: list[Job]

    def __init__(
        self, path: str, linker_output: str, args: list[str], inputs: list[str], jobs: list[Job]
    ) -> None:
        _assign(self, "path", path)
        _assign(self, "linker_output", linker_output)
        _assign(self, "args", args)
        _assign(self, "inputs", inputs)
        _assign(self, "jobs", jobs)

    @property
    def compiler(self) -> str:
        return self.args[0]

    def command(self, job: Job) -> list[str]:
        """The job's command exactly as LLD describes it (to show and to rerun by hand)."""
        return self.args + job.args


def read_job_file(path: str) -> JobFile:
    """Read and validate the job file at `path`; BadInput naming the JSON pointer if wrong."""
    return parse_job_file(read_json(path, "DTLTO job file"), path)


def parse_job_file(doc: object, path: str) -> JobFile:
    """Validate a parsed job file `doc` (read from `path`, named in errors)."""
    fields = Fields(path)
    top = fields.expect(doc, dict, "")
    fields.only_keys(top, {"common", "jobs"}, "")
    common = fields.get(top, "common", dict, "")
    fields.only_keys(common, {"linker_output", "args", "inputs"}, "/common")
    linker_output = _path(
        fields, fields.get(common, "linker_output", str, "/common"), "/common/linker_output"
    )
    args = _strings(fields, common, "args", "/common")
    if not args:
        fields.fail("/common/args", "empty: its first entry must be the compiler")
    _path(fields, args[0], "/common/args/0")
    if OUTPUT_FLAG in args:
        fields.fail(
            f"/common/args/{args.index(OUTPUT_FLAG)}",
            "-o belongs in each job's args, not in the common ones",
        )
    inputs = _strings(fields, common, "inputs", "/common")
    _no_empty_path(fields, inputs, "/common/inputs")
    raw_jobs = fields.get(top, "jobs", list, "")
    jobs = [_job(fields, raw, number) for number, raw in enumerate(raw_jobs)]
    _check_files(fields, inputs, args[0], path, jobs)
    return JobFile(path, linker_output, args, inputs, jobs)


# A job file can hold 10,000 jobs of 20 paths each, checked before the first job
# starts: the checks below look at whole lists at once (`in`, `join`, `count`).


def _strings(fields: Fields, obj: "dict[str, Any]", key: str, pointer: str) -> list[str]:
    items = fields.strings(obj, key, pointer)
    if "\0" in "".join(items):
        i = next(i for i, item in enumerate(items) if "\0" in item)
        fields.fail(f"{pointer}/{key}/{i}", "contains a NUL character")
    return items


def _no_empty_path(fields: Fields, paths: list[str], pointer: str) -> None:
    """Fail on the first empty path (`paths` come from `_strings`: none holds a NUL)."""
    if "" in paths:
        fields.fail(f"{pointer}/{paths.index('')}", "empty path")


def _path(fields: Fields, value: str, pointer: str) -> str:
    if not value:
        fields.fail(pointer, "empty path")
    if "\0" in value:
        fields.fail(pointer, "contains a NUL character")
    return value


def _job(fields: Fields, raw: object, number: int) -> Job:
    at = f"/jobs/{number}"
    obj = fields.expect(raw, dict, at)
    fields.only_keys(obj, {"args", "inputs", "outputs"}, at)
    args = _strings(fields, obj, "args", at)
    inputs = _strings(fields, obj, "inputs", at)
    outputs = _strings(fields, obj, "outputs", at)
    _no_empty_path(fields, inputs, f"{at}/inputs")
    _no_empty_path(fields, outputs, f"{at}/outputs")
    if len(inputs) < 2:
        fields.fail(
            f"{at}/inputs", f"has {len(inputs)} entries: the module and its index come first"
        )
    if not outputs:
        fields.fail(f"{at}/outputs", "empty: the native object comes first")
    module, index = inputs[0], inputs[1]
    if module not in args:
        fields.fail(f"{at}/args", f"does not name the module {module!r} (inputs/0)")
    if INDEX_FLAG + index not in args:
        fields.fail(f"{at}/args", f"lacks {INDEX_FLAG}{index} for the index (inputs/1)")
    output_flags = args.count(OUTPUT_FLAG)
    if output_flags != 1:
        fields.fail(f"{at}/args", f"has {output_flags} -o flags, expected exactly one")
    output_at = args.index(OUTPUT_FLAG)
    if output_at + 1 == len(args) or args[output_at + 1] != outputs[0]:
        fields.fail(
            f"{at}/args/{output_at}", f"-o is not followed by the object {outputs[0]!r} (outputs/0)"
        )
    return Job(number, args, inputs, outputs, output_at)


def _check_files(
    fields: Fields, common_inputs: list[str], compiler: str, path: str, jobs: list[Job]
) -> None:
    """No two jobs write one file, and no job writes a file that is read: an input, the
    compiler or the job file itself (outputs are removed before the compiler runs, so it
    would be lost). Paths are compared normalised."""
    read = {os.path.normpath(compiler): "the compiler", os.path.normpath(path): "the job file"}
    inputs = set(common_inputs)
    for job in jobs:
        inputs.update(job.inputs)  # mostly the same modules: normalise each once
    read.update(dict.fromkeys(map(os.path.normpath, inputs), "an input"))
    written: dict[str, str] = {}
    for job in jobs:
        for i, output in enumerate(job.outputs):
            pointer = f"/jobs/{job.number}/outputs/{i}"
            norm = os.path.normpath(output)
            if norm in read:
                fields.fail(pointer, f"{output!r} is also {read[norm]}")
            if norm in written:
                fields.fail(pointer, f"{output!r} is also written by {written[norm]}")
            written[norm] = pointer
