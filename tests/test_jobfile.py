"""LLD 22's DTLTO job file: what LLD writes parses; anything else fails naming its JSON pointer."""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from dist_lto.errors import BadInput
from dist_lto.formats.jobfile import Job, JobFile, parse_job_file, read_job_file
from dist_lto.formats.jsonio import loads
from hypothesis import given, settings
from hypothesis import strategies as st
from support.budget import examples
from support.links import DtltoLink
from support.tools import run_cli

COMPILER = "/usr/lib/llvm-22/bin/clang"
COMMON_ARGS = [COMPILER, "-c", "--target=x86_64-pc-linux-gnu", "-O2", "-faddrsig",
               "-ffunction-sections", "-fdata-sections", "-fpic",
               "-Wno-unused-command-line-argument"]  # fmt: skip


def lld_job(module: str, task: int, imports: list[str]) -> dict[str, Any]:
    """A job spelled the way LLD 22 writes one."""
    stem = module.rsplit(".", 1)[0]
    native = f"{stem}.{task}.5023.native.o"
    index = f"{native}.thinlto.bc"
    return {
        "args": [module, f"-fthinlto-index={index}", "-o", native],
        "inputs": [module, index, *imports],
        "outputs": [native],
    }


def valid_doc() -> dict[str, Any]:
    return {
        "common": {"linker_output": "prog", "args": list(COMMON_ARGS), "inputs": []},
        "jobs": [lld_job("a.o", 1, ["b.o"]), lld_job("b.o", 2, [])],
    }


def write(tmp_path: Path, doc: object) -> str:
    path = tmp_path / "prog.5023.dist-file.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_the_job_file_lld_wrote_parses(small_dtlto: DtltoLink) -> None:
    path = str(small_dtlto.root / small_dtlto.job_file)
    files = read_job_file(path)
    raw = json.loads(Path(path).read_text())
    assert files.compiler == small_dtlto.link[0]
    assert files.linker_output == "prog"
    assert len(files.jobs) == 4
    modules = sorted(job.module for job in files.jobs)
    assert modules[2:] == ["main.o", "shout.o"]
    assert all(
        m.startswith(f"libm.a({name}.o at ")
        for m, name in zip(modules, ["add", "twice"], strict=False)
    )
    for job, raw_job in zip(files.jobs, raw["jobs"], strict=True):
        assert files.command(job) == raw["common"]["args"] + raw_job["args"]
        assert job.index == raw_job["inputs"][1]
        assert job.output == raw_job["outputs"][0]
        without = job.args_without_output()
        assert "-o" not in without and job.output not in without
        assert len(without) == len(job.args) - 2


def test_jobs_compare_by_value_and_cannot_be_changed(tmp_path: Path) -> None:
    """Job and JobFile behave as the frozen dataclasses they were (equal by fields, no
    assignment, unhashable lists inside) without loading `dataclasses`."""
    path = write(tmp_path, valid_doc())
    files, again = read_job_file(path), read_job_file(path)
    assert files == again and files is not again
    assert files.jobs[0] == again.jobs[0] != files.jobs[1]
    assert files != JobFile(files.path, files.linker_output, [*files.args, "-O3"], files.inputs,
                            files.jobs)  # fmt: skip
    assert files.jobs[0] != (0, *vars_of(files.jobs[0])[1:])
    for record, field in ((files, "jobs"), (files.jobs[0], "args")):
        with pytest.raises(AttributeError, match=f"cannot assign to field '{field}'"):
            setattr(record, field, [])
        with pytest.raises(AttributeError, match=f"cannot delete field '{field}'"):
            delattr(record, field)
        with pytest.raises(AttributeError):
            record.extra = 1  # type: ignore[union-attr]
        with pytest.raises(TypeError, match="unhashable"):
            hash(record)
    assert repr(files.jobs[1]).startswith("Job(number=1, args=['b.o', ")
    assert copy.deepcopy(files) == files == pickle.loads(pickle.dumps(files))


def vars_of(job: Job) -> tuple[object, ...]:
    return (job.number, job.args, job.inputs, job.outputs, job.output_at)


def test_a_job_file_without_jobs_is_valid(tmp_path: Path) -> None:
    doc = valid_doc()
    doc["jobs"] = []
    assert read_job_file(write(tmp_path, doc)).jobs == []


def _set(pointer: str, value: object) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        *parents, last = pointer.strip("/").split("/")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return change


def _delete(pointer: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        *parents, last = pointer.strip("/").split("/")
        node: Any = doc
        for part in parents:
            node = node[part]
        del node[last]

    return change


BAD: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "unknown top field": (_set("/version", 1), "/version: unknown field"),
    "no common": (_delete("/common"), "/common: missing required field"),
    "no jobs": (_delete("/jobs"), "/jobs: missing required field"),
    "jobs not array": (_set("/jobs", {}), "/jobs: expected array, got object"),
    "linker output number": (_set("/common/linker_output", 3),
                             "/common/linker_output: expected string, got integer"),
    "empty common args": (_set("/common/args", []), "/common/args: empty: its first entry"),
    "empty compiler": (_set("/common/args/0", ""), "/common/args/0: empty path"),
    "-o in common args": (_set("/common/args/1", "-o"), "/common/args/1: -o belongs in each job"),
    "unknown common field": (_set("/common/env", {}), "/common/env: unknown field"),
    "no common inputs": (_delete("/common/inputs"), "/common/inputs: missing required field"),
    "empty common input": (_set("/common/inputs", [""]), "/common/inputs/0: empty path"),
    "job not object": (_set("/jobs/1", []), "/jobs/1: expected object, got array"),
    "unknown job field": (_set("/jobs/0/priority", 1), "/jobs/0/priority: unknown field"),
    "arg not string": (_set("/jobs/0/args/1", 7), "/jobs/0/args/1: expected string, got integer"),
    "NUL in arg": (_set("/jobs/0/args/1", "-fthinlto-index=a\0"),
                   "/jobs/0/args/1: contains a NUL character"),
    "one input": (_set("/jobs/1/inputs", ["b.o"]), "/jobs/1/inputs: has 1 entries"),
    "no outputs": (_set("/jobs/0/outputs", []), "/jobs/0/outputs: empty: the native object"),
    "empty output": (_set("/jobs/0/outputs", [""]), "/jobs/0/outputs/0: empty path"),
    "module not in args": (_set("/jobs/0/args/0", "other.o"),
                           "/jobs/0/args: does not name the module 'a.o' (inputs/0)"),
    "index flag missing": (_set("/jobs/0/args/1", "-fthinlto-index=elsewhere.bc"),
                           "/jobs/0/args: lacks -fthinlto-index=a.1.5023.native.o.thinlto.bc"),
    "no -o": (_set("/jobs/0/args/2", "-O"), "/jobs/0/args: has 0 -o flags, expected exactly one"),
    "-o before another file": (_set("/jobs/0/args/3", "x.o"),
                               "/jobs/0/args/2: -o is not followed by the object"),
    "-o last": (_set("/jobs/0/args", ["a.o", "-fthinlto-index=a.1.5023.native.o.thinlto.bc",
                                      "a.1.5023.native.o", "-o"]),
                "/jobs/0/args/3: -o is not followed by the object"),
    "output shared": (
        _set("/jobs/1", {**lld_job("b.o", 2, []), "outputs": ["a.1.5023.native.o"],
                         "args": ["b.o", "-fthinlto-index=b.2.5023.native.o.thinlto.bc", "-o",
                                  "a.1.5023.native.o"]}),
        "/jobs/1/outputs/0: 'a.1.5023.native.o' is also written by /jobs/0/outputs/0",
    ),
    "output is an input": (_set("/jobs/1/outputs", ["b.2.5023.native.o", "a.o"]),
                           "/jobs/1/outputs/1: 'a.o' is also an input"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_a_job_file_lld_would_not_write_is_rejected_naming_the_pointer(
    case: str, tmp_path: Path
) -> None:
    change, expected = BAD[case]
    doc = valid_doc()
    change(doc)
    path = write(tmp_path, doc)
    with pytest.raises(BadInput) as caught:
        read_job_file(path)
    assert caught.value.message.startswith(f"{path}: {expected}")
    assert "\n" not in caught.value.message


def test_two_output_flags_are_rejected(tmp_path: Path) -> None:
    doc = valid_doc()
    doc["jobs"][0]["args"] += ["-o", "a.1.5023.native.o"]
    with pytest.raises(BadInput, match=r"/jobs/0/args: has 2 -o flags, expected exactly one"):
        read_job_file(write(tmp_path, doc))


def test_a_bad_job_file_fails_the_command_with_one_line_and_status_2(tmp_path: Path) -> None:
    doc = valid_doc()
    doc["jobs"][1]["outputs"] = []
    path = write(tmp_path, doc)
    result = run_cli(["distribute", "--no-cache", path], cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == (
        f"dist-lto distribute: error: {path}: /jobs/1/outputs: empty: the native object"
        " comes first\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [Path(path).name]


@pytest.mark.parametrize(
    ("content", "problem"),
    [(b"{", "not valid JSON"),
     (None, "cannot read DTLTO job file: No such file or directory"),
     (b'\xef\xbb\xbf{"common": {}}', "not valid JSON: a byte order mark"),
     (b'{"jobs": [NaN]}', "not valid JSON: NaN is not JSON"),
     (b'{"jobs": [1e400]}', "not valid JSON: number 1e400 is beyond a double"),
     (b'{"jobs": ["\\ud800"]}', "not valid JSON: a string holds a lone surrogate \\ud800"),
     (b'{"jobs": ["\xff"]}', "not valid JSON: 'utf-8' codec can't decode byte 0xff"),
     (b"[" * 100_000, "not valid JSON: arrays or objects nested too deeply")],
    ids=["malformed", "missing", "bom", "nan", "infinite", "lone-surrogate", "not-utf-8",
         "deep"],
)  # fmt: skip
def test_an_unreadable_job_file_is_bad_input(
    content: bytes | None, problem: str, tmp_path: Path
) -> None:
    path = tmp_path / "j.dist-file.json"
    if content is not None:
        path.write_bytes(content)
    result = run_cli(["distribute", "--no-cache", str(path)])
    assert result.returncode == 2
    assert result.stderr.startswith(f"dist-lto distribute: error: {path}: {problem}")
    assert len(result.stderr.splitlines()) == 1


# ---------------------------------------------------------------------------------
# Properties

NAMES = st.text("abcdefgh0123456789()._- /", min_size=1, max_size=12).filter(lambda s: s != "-o")


@st.composite
def job_files(draw: st.DrawFn) -> dict[str, Any]:
    """Valid job files: distinct module names, imports among them, extra flags anywhere."""
    modules = draw(st.lists(NAMES, min_size=0, max_size=6, unique=True))
    flags = st.lists(st.sampled_from(["-g", "-O3", "-fproc-stat-report", "-mllvm", "-x"]),
                     max_size=2)  # fmt: skip
    jobs = []
    for task, module in enumerate(modules, 1):
        imports = draw(st.lists(st.sampled_from(modules), max_size=3)) if modules else []
        job = lld_job(module, task, imports)
        job["outputs"][0] = f"out{task}.native.o"
        job["args"][3] = job["outputs"][0]
        job["args"] = draw(flags) + job["args"] + draw(flags)
        jobs.append(job)
    profiles = st.lists(st.sampled_from(["prof.txt", "list.txt"]), max_size=2)
    common = {"linker_output": draw(NAMES), "args": [COMPILER, *draw(flags)],
              "inputs": draw(profiles)}  # fmt: skip
    return {"common": common, "jobs": jobs}


@given(doc=job_files())
@settings(max_examples=examples(150), deadline=None)
def test_every_valid_job_file_parses_to_its_jobs(doc: dict[str, Any]) -> None:
    files = parse_job_file(copy.deepcopy(doc), "j.json")
    assert files.args == doc["common"]["args"]
    for job, raw in zip(files.jobs, doc["jobs"], strict=True):
        assert (job.args, job.inputs, job.outputs) == (raw["args"], raw["inputs"], raw["outputs"])
        assert job.args[job.output_at : job.output_at + 2] == ["-o", job.output]
        without = job.args_without_output()
        assert len(without) == len(job.args) - 2
        assert "-o" not in without
        assert job.module in without and f"-fthinlto-index={job.index}" in without


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


def _pointers(node: object, at: str = "") -> list[str]:
    found = [at]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _pointers(value, f"{at}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _pointers(value, f"{at}/{i}")
    return found


@given(doc=job_files(), data=st.data())
@settings(max_examples=examples(200), deadline=None)
def test_any_damage_is_valid_or_bad_input_naming_a_pointer(
    doc: dict[str, Any], data: st.DataObject
) -> None:
    pointer = data.draw(st.sampled_from(_pointers(doc)))
    value = data.draw(JSON)
    if pointer == "":
        doc = value  # type: ignore[assignment]
    else:
        _set(pointer, value)(doc)
    try:
        parse_job_file(doc, "j.json")
    except BadInput as err:
        assert err.message.startswith("j.json: /")
        assert "\n" not in err.message


# ---------------------------------------------------------------------------------
# JSON is read as strictly as orjson read it (`jsonio.loads`: `json` is cheaper to import)

TOKENS = st.sampled_from(
    ["{", "}", "[", "]", '"', ",", ":", " ", "\n", "\t", "0", "7", "-", ".", "e", "E", "+",
     "18446744073709551615", "18446744073709551616", "-9223372036854775808",
     "-9223372036854775809", "1e308", "1e309", "-1e400", "1e-400", "1.5", "true", "false",
     "null", "NaN", "Infinity", "-Infinity", "\\ud800", "\\udc00", "\\ud83d\\ude00",
     "\\uD83D\\uDE00", "\\u0000", "\\n", '\\"', "\\\\", "\\x", "a", "\u00e9", "\ufeff", "\x01",
     "\ud800", "\x7f"]
)  # fmt: skip
JSONISH = st.lists(TOKENS, max_size=14).map(lambda parts: "".join(parts).encode(
    "utf-8", "surrogatepass"))  # fmt: skip
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4)
    | st.sampled_from([1 << 63, 1 << 64, -(1 << 63) - 1, 10**400, 1e308]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                max_size=3),
    max_leaves=10,
)  # fmt: skip


def _outcome(parse: Callable[[bytes], object], data: bytes) -> str:
    try:
        return repr(parse(data))
    except ValueError:  # orjson.JSONDecodeError is one
        return "not JSON"


@given(data=st.one_of(
    JSONISH,
    st.binary(max_size=16),
    st.builds(lambda v, ascii: json.dumps(v, ensure_ascii=ascii).encode("utf-8", "surrogatepass"),
              VALUES, st.booleans()),
))  # fmt: skip
@settings(max_examples=examples(600), deadline=None)
def test_json_is_read_exactly_as_orjson_reads_it(data: bytes) -> None:
    assert _outcome(loads, data) == _outcome(orjson.loads, data)
