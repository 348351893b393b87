"""The result cache: keys that ignore LLD's spellings but nothing that changes code, and a
store that stays whole when links race on it."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from dist_lto.distribute import cache_key, result_cache
from dist_lto.distribute.cache_key import KeyMaker, command_identity, compiler_identity
from dist_lto.distribute.result_cache import ResultCache, default_cache_dir, parse_size
from dist_lto.errors import BadInput
from dist_lto.formats.jobfile import JobFile, parse_job_file, read_job_file
from dist_lto.llvm.bitcode import read_index_records
from dist_lto.llvm.summary import canonical_summary
from hypothesis import given, settings
from hypothesis import strategies as st
from support.budget import examples
from support.links import DtltoLink, ThinIndex
from support.tools import Llvm

IDENTITY = "0" * 64


def copy_link(link: DtltoLink, dest: Path) -> Path:
    shutil.copytree(link.root, dest)
    return dest


def relink(link: DtltoLink, root: Path, serial: Path) -> JobFile:
    """Link again in `root` (a copy): a new LLD process, so new names for its files."""
    for old in root.glob("prog.*.dist-file.json"):
        old.unlink()
    subprocess.run([*link.link, f"-fthinlto-distributor={serial}", "-Wl,--save-temps"],
                   cwd=root, check=True, capture_output=True)  # fmt: skip
    (job_file,) = root.glob("prog.*.dist-file.json")
    return read_job_file(job_file.name)


def keys_by_module(files: JobFile, identity: str = IDENTITY) -> dict[str, str | None]:
    """Each job's key, by its module's name without LLD's process id."""
    maker = KeyMaker(files, identity)
    return {job.module.split(" at ")[0]: maker.key(job) for job in files.jobs}


# ---------------------------------------------------------------------------------
# Keys


def index_step(tmp_path: Path, llvm: Llvm, objects: Path, subdir: str) -> Path:
    """The small program's index step with its objects spelled `subdir/x.o`."""
    d = tmp_path / subdir
    d.mkdir(parents=True)
    for name in ("main.o", "shout.o", "twice.o", "add.o"):
        shutil.copy(objects / name, d / name)
    subprocess.run(
        [llvm.clang, "-flto=thin", "-fuse-ld=lld", *(f"{subdir}/{n}" for n in
         ("main.o", "shout.o", "twice.o", "add.o")), "-o", f"{subdir}/prog",
         "-Wl,--thinlto-index-only"],
        cwd=tmp_path, check=True,
    )  # fmt: skip
    return d


def test_an_index_taken_apart_is_the_same_for_any_spelling(
    tmp_path: Path, llvm: Llvm, small_dtlto: DtltoLink
) -> None:
    """Indexes of one program whose objects are spelled differently (different lengths)."""
    short_dir = index_step(tmp_path, llvm, small_dtlto.root, "o")
    long_dir = index_step(tmp_path, llvm, small_dtlto.root, "much/longer/path")
    short = read_index_records((short_dir / "twice.o.thinlto.bc").read_bytes())
    long = read_index_records((long_dir / "twice.o.thinlto.bc").read_bytes())
    assert sorted(path for _, path, _ in short.modules) == [b"o/add.o", b"o/twice.o"]
    respelled = [(i, p.replace(b"much/longer/path/", b"o/"), r) for i, p, r in long.modules]
    assert respelled == short.modules
    assert all(len(records) == 1 and records[0][0] == 2 for _, _, records in short.modules)
    assert (short.other, short.summary, short.summary_bytes) == (
        long.other, long.summary, long.summary_bytes)  # fmt: skip
    assert short.summary is not None and short.summary[0] == (10, [12])  # summary version 12
    main = read_index_records((short_dir / "main.o.thinlto.bc").read_bytes())
    assert main.summary != short.summary


def test_every_index_of_real_links_has_a_canonical_summary(
    tmp_path: Path, llvm: Llvm, small_dtlto: DtltoLink, lua_thin_index: ThinIndex
) -> None:
    """LLVM 22's records are all of the kinds `canonical_summary` knows, so no key falls
    back to the bytes as written (which depend on the module paths' hashes)."""
    indexes = list(lua_thin_index.root.glob("obj/*.thinlto.bc"))
    indexes += small_dtlto.root.glob("*.thinlto.bc")
    assert len(indexes) == len(lua_thin_index.build.objects) + 4
    for path in indexes:
        index = read_index_records(path.read_bytes())
        names = {i: os.fsdecode(p) for i, p, _ in index.modules}
        assert index.summary is not None, path
        assert canonical_summary(index.summary, names) is not None, path


def test_read_index_records_rejects_what_is_not_an_index() -> None:
    for data in (b"", b"BC\xc0\xde", b"\x7fELF" + bytes(60), b"BC\xc0\xde" + bytes(7)):
        with pytest.raises(ValueError):
            read_index_records(data)


@given(data=st.binary(max_size=200))
@settings(max_examples=examples(300), deadline=None)
def test_read_index_records_never_fails_otherwise_on_arbitrary_bytes(data: bytes) -> None:
    with contextlib.suppress(ValueError):
        read_index_records(b"BC\xc0\xde" + data)


@pytest.fixture(scope="module")
def lua_index_bytes(lua_thin_index: ThinIndex) -> bytes:
    return (lua_thin_index.root / "obj/lvm.o.thinlto.bc").read_bytes()


@given(flips=st.lists(st.integers(0, 1 << 20), min_size=1, max_size=4))
@settings(max_examples=examples(150), deadline=None)
def test_a_damaged_real_index_is_taken_apart_or_rejected(
    lua_index_bytes: bytes, flips: list[int]
) -> None:
    data = bytearray(lua_index_bytes)
    for bit in flips:
        data[(bit >> 3) % len(data)] ^= 1 << (bit & 7)
    with contextlib.suppress(ValueError):
        index = read_index_records(bytes(data))
        if index.summary is not None:
            canonical_summary(index.summary, {i: "m" for i, _, _ in index.modules})


# Synthetic summaries in LLVM 22's layout: VERSION, FLAGS, VALUE_GUIDs, then records.
GUIDS = {10: (1, 111), 11: (2, 222), 12: (3, 333), 13: (4, 444)}


def summary(numbering: dict[int, int], order: list[int]) -> list[tuple[int, list[int]]]:
    """Two functions and a variable, with values renumbered by `numbering` (old -> new)
    and the records after the header in `order`."""
    n = numbering
    body = [
        (16, [n[10], *GUIDS[10]]), (16, [n[11], *GUIDS[11]]), (16, [n[12], *GUIDS[12]]),
        (16, [n[13], *GUIDS[13]]),
        # f: refs the variable, calls g (hot) and h
        (5, [n[10], 0, 96, 11, 64, 0, 1, 1, 0, n[13], n[11], 3, n[12], 0]),
        (5, [n[11], 1, 96, 4, 64, 0, 0, 0, 0]),  # g
        (5, [n[12], 1, 96, 7, 64, 0, 0, 0, 0, n[11], 0]),  # h calls g
        (6, [n[13], 0, 97, 4, n[10]]),  # the variable, initialised with &f
    ]  # fmt: skip
    return [(10, [12]), (20, [1121]), *(body[i] for i in order)]


MODULES = {0: "<input:0>", 1: "<input:2>"}
SAME_NUMBERS = {k: k for k in GUIDS}


@given(
    numbering=st.permutations(list(GUIDS)).map(lambda p: dict(zip(GUIDS, p, strict=True))),
    order=st.permutations(range(8)),
)
@settings(max_examples=examples(100), deadline=None)
def test_a_summary_renumbered_and_reordered_is_the_same(
    numbering: dict[int, int], order: list[int]
) -> None:
    reference = canonical_summary(summary(SAME_NUMBERS, list(range(8))), MODULES)
    assert reference is not None
    assert canonical_summary(summary(numbering, order), MODULES) == reference


@pytest.mark.parametrize(
    ("record", "operand", "value"),
    [(6, 3, 12), (6, 8, 2), (6, 11, 0), (7, 1, 0), (7, 2, 97), (9, 3, 5), (9, 4, 11),
     (3, 2, 999)],
    ids=["f's instructions", "f's wo refs", "f's call hotness", "g's module", "g's flags",
         "variable's varflags", "variable's initialiser", "VALUE_GUID of g"],
)  # fmt: skip
def test_any_change_of_meaning_changes_the_canonical_summary(
    record: int, operand: int, value: int
) -> None:
    """(record, operand) index into `summary(SAME_NUMBERS, ...)`, whose header is 2 records."""
    records = summary(SAME_NUMBERS, list(range(8)))
    changed = [(code, list(ops)) for code, ops in records]
    changed[record][1][operand] = value
    assert changed != records
    assert canonical_summary(changed, MODULES) not in (None, canonical_summary(records, MODULES))


@pytest.mark.parametrize(
    "change",
    ["unknown record", "version 11", "undefined value", "undefined module", "odd call list",
     "refs past the end", "short variable", "value defined twice"],
)  # fmt: skip
def test_a_summary_it_does_not_know_falls_back_to_its_bytes(change: str) -> None:
    records = summary(SAME_NUMBERS, list(range(8)))
    if change == "unknown record":
        records.append((11, [123]))  # TYPE_TESTS, attached to the next function
    elif change == "version 11":
        records[0] = (10, [11])
    elif change == "undefined value":
        records[7] = (5, [11, 1, 96, 7, 64, 0, 0, 0, 0, 99, 0])
    elif change == "undefined module":
        records[7] = (5, [11, 7, 96, 4, 64, 0, 0, 0, 0])
    elif change == "odd call list":
        records[7] = (5, [11, 1, 96, 4, 64, 0, 0, 0, 0, 10])
    elif change == "refs past the end":
        records[7] = (5, [11, 1, 96, 4, 64, 0, 5, 0, 0, 10])
    elif change == "short variable":
        records[9] = (6, [13, 0, 97])
    else:
        records.append((16, [10, 9, 9]))
    assert canonical_summary(records, MODULES) is None


def test_keys_do_not_depend_on_lld_process_id_or_member_names(
    tmp_path: Path,
    small_dtlto: DtltoLink,
    serial_distributor: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = copy_link(small_dtlto, tmp_path / "again")
    monkeypatch.chdir(small_dtlto.root)
    first = read_job_file(small_dtlto.job_file)
    before = keys_by_module(first)
    monkeypatch.chdir(root)
    second = relink(small_dtlto, root, serial_distributor)
    assert second.jobs[0].output != first.jobs[0].output  # a new process id
    assert keys_by_module(second) == before
    assert None not in before.values() and len(set(before.values())) == 4


@pytest.fixture
def in_copy(tmp_path: Path, small_dtlto: DtltoLink, monkeypatch: pytest.MonkeyPatch) -> JobFile:
    """The small program's job file, read in a private copy of its directory (the cwd)."""
    root = copy_link(small_dtlto, tmp_path / "copy")
    monkeypatch.chdir(root)
    return read_job_file(small_dtlto.job_file)


def test_key_changes_with_flags_compiler_and_every_input(in_copy: JobFile) -> None:
    files = in_copy
    base = keys_by_module(files)
    flagged = JobFile(files.path, files.linker_output, [*files.args, "-O3"], files.inputs,
                      files.jobs)  # fmt: skip
    assert set(keys_by_module(flagged).values()).isdisjoint(base.values())
    assert set(keys_by_module(files, "1" * 64).values()).isdisjoint(base.values())
    main = next(job for job in files.jobs if job.module == "main.o")
    imported = main.inputs[2]  # a module main.o imports from
    with open(imported, "ab") as f:
        f.write(b"\0")
    changed = keys_by_module(files)
    readers = {job.module.split(" at ")[0] for job in files.jobs if imported in job.inputs}
    assert "main.o" in readers
    assert {m for m in base if changed[m] != base[m]} == readers


def test_key_does_not_depend_on_output_names(in_copy: JobFile) -> None:
    doc = {"common": {"linker_output": "prog", "args": in_copy.args, "inputs": []},
           "jobs": [{"args": [a if a != job.output else "elsewhere.o" for a in job.args],
                     "inputs": job.inputs, "outputs": ["elsewhere.o"]}
                    for job in in_copy.jobs[:1]]}  # fmt: skip
    renamed = parse_job_file(doc, "j.json")
    maker = KeyMaker(in_copy, IDENTITY)
    assert KeyMaker(renamed, IDENTITY).key(renamed.jobs[0]) == maker.key(in_copy.jobs[0])


def test_a_missing_input_gives_no_key(in_copy: JobFile) -> None:
    job = in_copy.jobs[0]
    os.unlink(job.inputs[-1])
    assert KeyMaker(in_copy, IDENTITY).key(job) is None


@pytest.mark.parametrize(
    ("arg", "expected"),
    [("a.o", "<input:0>"), ("-fthinlto-index=a.bc", "-fthinlto-index=<input:1>"),
     ("-fprofile-sample-use=x=y.prof", "-fprofile-sample-use=<common-input:0>"),
     ("-fx=a.o=b", "-fx=a.o=b"), ("-O2", "-O2"), ("=a.o", "=<input:0>")],
)  # fmt: skip
def test_paths_in_arguments_become_placeholders(arg: str, expected: str) -> None:
    names = {"a.o": "<input:0>", "a.bc": "<input:1>", "x=y.prof": "<common-input:0>"}
    assert cache_key._placeholder(arg, names) == expected


# ---------------------------------------------------------------------------------
# Compiler identity


@pytest.fixture
def own_clang(tmp_path: Path, llvm: Llvm) -> Path:
    """A copy of clang's executable beside links to the LLVM libraries it loads."""
    real = Path(os.path.realpath(llvm.clang))
    (tmp_path / "bin").mkdir()
    (tmp_path / "lib").mkdir()
    shutil.copy(real, tmp_path / "bin" / "clang")
    for lib in (real.parent.parent / "lib").glob("lib*.so.*"):
        if lib.name.startswith(("libLLVM", "libclang-cpp")):
            (tmp_path / "lib" / lib.name).symlink_to(lib.resolve())
    return tmp_path / "bin" / "clang"


def test_compiler_identity_covers_binary_and_llvm_libraries(
    own_clang: Path, tmp_path: Path, llvm: Llvm
) -> None:
    data = own_clang.read_bytes()
    libraries = cache_key._llvm_libraries(str(own_clang), data)
    names = sorted(os.path.basename(p).split(".so")[0] for p in libraries)
    assert names == ["libLLVM", "libclang-cpp"]
    cache = tmp_path / "cache"
    first = compiler_identity(str(own_clang), str(cache))
    assert first == compiler_identity(str(own_clang), str(cache))
    assert first != compiler_identity(llvm.clang, str(cache))  # another path
    with open(own_clang, "ab") as f:  # a different build of the same compiler
        f.write(b"\0")
    assert compiler_identity(str(own_clang), str(cache)) != first


def test_compiler_identity_is_remembered_while_its_files_are_unchanged(
    own_clang: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    compiler_identity(str(own_clang), str(cache))
    (memo,) = (cache / "v2" / "compilers").iterdir()
    doc = memo.read_text().replace(compiler_identity(str(own_clang), str(cache)), "f" * 64)
    memo.write_text(doc)
    assert compiler_identity(str(own_clang), str(cache)) == "f" * 64  # not recomputed
    os.utime(own_clang)
    assert compiler_identity(str(own_clang), str(cache)) != "f" * 64


def test_a_wrapped_compiler_is_identified_with_its_wrapper(
    own_clang: Path, tmp_path: Path, llvm: Llvm
) -> None:
    """`--thinlto-remote-compiler=ccache --thinlto-remote-compiler-prepend-arg=clang`
    makes `common.args` start `ccache clang -c ...`."""
    wrapper = tmp_path / "wrap"
    wrapper.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo wrap 1; exit 0; }\nexec "$@"\n')
    wrapper.chmod(0o755)
    cache = str(tmp_path / "cache")
    args = [str(wrapper), str(own_clang), "-c", "-O2"]
    first = command_identity(args, cache)
    assert first != compiler_identity(str(wrapper), cache)
    # after the first option, a program's path is only an argument
    assert command_identity([llvm.clang, "-c", str(own_clang)], cache) == compiler_identity(
        llvm.clang, cache
    )
    with open(own_clang, "ab") as f:  # the wrapped compiler changes, the wrapper does not
        f.write(b"\0")
    assert command_identity(args, cache) != first


def test_compiler_identity_of_a_missing_compiler_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="no-such-clang: compiler not found"):
        compiler_identity("no-such-clang", str(tmp_path))
    with pytest.raises(BadInput, match="compiler not found"):
        compiler_identity(str(tmp_path / "clang"), str(tmp_path))


def test_default_cache_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == str(tmp_path / "xdg" / "dist-lto")
    monkeypatch.delenv("XDG_CACHE_HOME")
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == str(tmp_path / "home" / ".cache" / "dist-lto")


# ---------------------------------------------------------------------------------
# The store


@pytest.fixture
def objects(small_dtlto: DtltoLink) -> list[Path]:
    """Real native objects (LLD's DTLTO outputs, kept by --save-temps)."""
    found = sorted(small_dtlto.root.glob("*.native.o"))
    assert len(found) == 4
    return found


def test_restore_gives_back_exactly_what_was_stored(tmp_path: Path, objects: list[Path]) -> None:
    cache = ResultCache(str(tmp_path / "c"))
    cache.create()
    cache.store("ab" * 32, [str(objects[0]), str(objects[1])])
    outs = [str(tmp_path / "x.o"), str(tmp_path / "y.stats")]
    assert cache.restore("ab" * 32, outs)
    assert Path(outs[0]).read_bytes() == objects[0].read_bytes()
    assert Path(outs[1]).read_bytes() == objects[1].read_bytes()
    assert cache.size() == objects[0].stat().st_size + objects[1].stat().st_size
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "x.o", "y.stats"]
    assert cache.evicted == []


def test_a_miss_writes_nothing(tmp_path: Path) -> None:
    cache = ResultCache(str(tmp_path / "c"))
    cache.create()
    assert not cache.restore("cd" * 32, [str(tmp_path / "x.o")])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


def flip_byte(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


@pytest.mark.parametrize(
    ("damage", "problem"),
    [("empty", "output 0 differs"), ("truncated", "output 0 differs"),
     ("not-elf", "output 0 differs"), ("one byte flipped", "output 0 differs"),
     ("another object", "output 0 differs"), ("second output flipped", "output 1 differs"),
     ("sums missing", "a file of it is missing"), ("output missing", "a file of it is missing"),
     ("sums malformed", "its sums are missing or malformed"),
     ("sums of one output", "it holds 1 outputs, the job has 2")],
)  # fmt: skip
def test_a_damaged_entry_is_evicted_as_a_miss_and_recorded(
    damage: str, problem: str, tmp_path: Path, objects: list[Path]
) -> None:
    """A byte flipped in the middle of an object passes every structural check: only the
    entry's sums tell it from the object that was stored."""
    cache = ResultCache(str(tmp_path / "c"))
    cache.create()
    key = "ef" * 32
    cache.store(key, [str(objects[0]), str(objects[1])])
    entry = Path(cache.entry(key))
    stored = entry / "0"
    data = stored.read_bytes()
    flipped = flip_byte(data, len(data) // 2)
    assert result_cache.object_problem(str(stored)) is None
    if damage == "one byte flipped":
        stored.write_bytes(flipped)
        assert result_cache.object_problem(str(stored)) is None  # structurally fine
    elif damage == "another object":
        shutil.copy(objects[2], stored)
    elif damage == "second output flipped":
        second = (entry / "1").read_bytes()
        (entry / "1").write_bytes(flip_byte(second, 100))
    elif damage == "sums missing":
        (entry / "sums").unlink()
    elif damage == "output missing":
        (entry / "1").unlink()
    elif damage == "sums malformed":
        (entry / "sums").write_text('[{"size": "x"}]')
    elif damage == "sums of one output":
        sums = json.loads((entry / "sums").read_text())
        (entry / "sums").write_text(json.dumps(sums[:1]))
    else:
        replacement = {"empty": b"", "truncated": data[:200], "not-elf": b"!" * 100}
        stored.write_bytes(replacement[damage])
    outs = [str(tmp_path / "x.o"), str(tmp_path / "y.o")]
    assert not cache.restore(key, outs)
    assert not entry.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]
    assert os.listdir(cache.tmp) == []
    ((where, why),) = cache.evicted
    assert where == str(entry) and why.startswith(problem)
    cache.store(key, [str(objects[0]), str(objects[1])])  # the job's result, compiled again
    assert cache.restore(key, outs)
    assert Path(outs[0]).read_bytes() == data


def test_an_entry_stores_the_sums_of_its_outputs(tmp_path: Path, objects: list[Path]) -> None:
    cache = ResultCache(str(tmp_path / "c"))
    cache.create()
    cache.store("ab" * 32, [str(objects[0])])
    sums = json.loads((Path(cache.entry("ab" * 32)) / "sums").read_text())
    data = objects[0].read_bytes()
    assert sums == [{"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}]


def _entry_with_age(cache: ResultCache, key: str, size: int, age: float) -> None:
    entry = Path(cache.entry(key))
    entry.mkdir(parents=True)
    (entry / "0").write_bytes(b"x" * size)
    then = time.time() - age
    os.utime(entry, (then, then))


def test_prune_removes_least_recently_used_first_down_to_the_limit(tmp_path: Path) -> None:
    cache = ResultCache(str(tmp_path / "c"), max_size=2500)
    cache.create()
    for i, age in enumerate([50, 10, 40, 20, 30]):
        _entry_with_age(cache, f"{i:02d}" * 32, 1000, age)
    assert cache.prune() == 3
    assert sorted(Path(p).name[:2] for _, _, p in cache._scan()) == ["01", "03"]
    assert cache.size() == 2000
    assert os.listdir(cache.tmp) == []


def test_prune_removes_temporaries_left_by_killed_links_only(tmp_path: Path) -> None:
    cache = ResultCache(str(tmp_path / "c"), max_size=1 << 20)
    cache.create()
    for name, age in (("old.1.x", 2 * 86400), ("new.2.y", 60)):
        path = Path(cache.tmp) / name
        path.mkdir()
        (path / "0").write_bytes(b"partial")
        os.utime(path, (time.time() - age, time.time() - age))
    cache.prune()
    assert os.listdir(cache.tmp) == ["new.2.y"]


def test_restore_after_use_protects_an_entry_from_pruning(
    tmp_path: Path, objects: list[Path]
) -> None:
    size = objects[0].stat().st_size
    cache = ResultCache(str(tmp_path / "c"), max_size=size)
    cache.create()
    _entry_with_age(cache, "aa" * 32, size, 100)
    cache.store("bb" * 32, [str(objects[0])])
    os.utime(cache.entry("bb" * 32), (time.time() - 200, time.time() - 200))
    assert cache.restore("bb" * 32, [str(tmp_path / "x.o")])  # now the newest
    cache.prune()
    assert [Path(p).name for _, _, p in cache._scan()] == ["bb" * 32]


def test_links_racing_on_one_cache_see_whole_entries_or_none(
    tmp_path: Path, objects: list[Path]
) -> None:
    """Storers, restorers and pruners at once: every restore is complete or a clean miss."""
    cache_dir = str(tmp_path / "c")
    ResultCache(cache_dir).create()
    keys = [f"{i:02x}" * 32 for i in range(8)]
    wanted = {key: objects[i % len(objects)].read_bytes() for i, key in enumerate(keys)}
    problems: list[str] = []
    hits = [0]

    def storer() -> None:
        cache = ResultCache(cache_dir)
        for _ in range(30):
            for i, key in enumerate(keys):
                cache.store(key, [str(objects[i % len(objects)])])

    def pruner() -> None:
        cache = ResultCache(cache_dir, max_size=3 * max(len(v) for v in wanted.values()))
        for _ in range(60):
            cache.prune()

    def restorer(n: int) -> None:
        cache = ResultCache(cache_dir)
        out = tmp_path / f"out{n}"
        out.mkdir()
        for round_ in range(40):
            for key in keys:
                target = out / f"{round_}-{key[:2]}.o"
                if cache.restore(key, [str(target)]):
                    hits[0] += 1
                    if target.read_bytes() != wanted[key]:
                        problems.append(f"{target} differs")
                elif target.exists():
                    problems.append(f"{target} written on a miss")
        leftovers = [p.name for p in out.iterdir() if p.name.startswith(".")]
        if leftovers:
            problems.append(f"temporaries left: {leftovers}")

    def reporting(work: Callable[..., None], *args: int) -> Callable[[], None]:
        def run() -> None:
            try:
                work(*args)
            except Exception as err:  # a thread's exception must fail the test
                problems.append(f"{work.__name__}: {type(err).__name__}: {err}")

        return run

    threads = [threading.Thread(target=reporting(f)) for f in (storer, storer, pruner, pruner)]
    threads += [threading.Thread(target=reporting(restorer, n)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert problems == []
    assert hits[0] > 0
    for _, _, path in ResultCache(cache_dir)._scan():
        assert Path(path, "0").read_bytes() == wanted[Path(path).name]


# ---------------------------------------------------------------------------------
# Sizes


@pytest.mark.parametrize(
    ("text", "size"),
    [("0", 0), ("1024", 1024), ("2G", 2 << 30), ("500M", 500 << 20), ("3k", 3072),
     ("1T", 1 << 40), ("2GiB", 2 << 30), ("10MB", 10 << 20)],
)  # fmt: skip
def test_sizes_take_binary_suffixes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "G", "-1", "1.5G", "12X", "١٢", "0x10"])
def test_a_malformed_size_is_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


@given(number=st.integers(0, 1 << 20), suffix=st.sampled_from(["", "K", "m", "G", "t"]))
def test_every_number_with_a_suffix_parses(number: int, suffix: str) -> None:
    unit = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[suffix.lower()]
    assert parse_size(f"{number}{suffix}") == number * unit


@given(text=st.text(max_size=8))
def test_size_parsing_fails_only_with_value_error(text: str) -> None:
    with contextlib.suppress(ValueError):
        assert parse_size(text) >= 0


def test_a_remembered_key_is_the_canonical_key_and_a_warm_lookup_decodes_no_summary(
    in_copy: JobFile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dist_lto.distribute import cache_key

    files = in_copy
    canonical = keys_by_module(files)
    aliases = str(tmp_path / "aliases")
    cold = KeyMaker(files, IDENTITY, aliases)
    assert {job.module.split(" at ")[0]: cold.key(job) for job in files.jobs} == canonical

    def decoded(*_: object) -> None:
        raise AssertionError("a remembered index was decoded again")

    original = cache_key.canonical_summary
    monkeypatch.setattr(cache_key, "canonical_summary", decoded)
    warm = KeyMaker(files, IDENTITY, aliases)
    assert {job.module.split(" at ")[0]: warm.key(job) for job in files.jobs} == canonical
    # An index changed in any byte is decoded again, never matched to an old alias.
    main = next(job for job in files.jobs if job.module == "main.o")
    with open(main.index, "ab") as f:
        f.write(b"\0\0\0\0")
    with pytest.raises(AssertionError, match="decoded again"):
        KeyMaker(files, IDENTITY, aliases).key(main)
    # So is a job whose other inputs changed: its key changes, alias or not.
    monkeypatch.setattr(cache_key, "canonical_summary", original)
    imported = main.inputs[2]
    with open(imported, "ab") as f:
        f.write(b"\0")
    changed = KeyMaker(files, IDENTITY, aliases).key(main)
    assert changed is not None and changed != canonical["main.o"]


def test_remembered_keys_still_hit_across_links_with_new_process_ids(
    tmp_path: Path,
    small_dtlto: DtltoLink,
    serial_distributor: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    aliases = str(tmp_path / "aliases")
    root = copy_link(small_dtlto, tmp_path / "again")
    monkeypatch.chdir(small_dtlto.root)
    first = read_job_file(small_dtlto.job_file)
    maker = KeyMaker(first, IDENTITY, aliases)
    before = {job.module.split(" at ")[0]: maker.key(job) for job in first.jobs}
    monkeypatch.chdir(root)
    second = relink(small_dtlto, root, serial_distributor)
    again = KeyMaker(second, IDENTITY, aliases)
    assert {job.module.split(" at ")[0]: again.key(job) for job in second.jobs} == before


def test_pruning_removes_the_remembered_index_keys_whose_entry_is_gone(
    in_copy: JobFile, tmp_path: Path, objects: list[Path]
) -> None:
    cache = ResultCache(str(tmp_path / "c"))
    cache.create()
    aliases = Path(cache.root, result_cache.LAYOUT, result_cache.ALIASES)
    maker = KeyMaker(in_copy, IDENTITY, str(aliases))
    keys = [maker.key(job) for job in in_copy.jobs]
    assert None not in keys and len(set(keys)) == len(keys) > 1

    def remembered() -> set[str]:
        return {p.read_text().split("\n")[0] for p in aliases.glob("*/*")}

    assert remembered() == set(keys)
    for key in keys:
        cache.store(str(key), [str(objects[0])])
    old = time.time() - 2 * 86400
    os.utime(cache.entry(str(keys[0])), (old, old))
    assert cache.prune() == 0
    assert remembered() == set(keys)  # every entry is still there
    assert cache.prune(max_age=86400) == 1
    assert remembered() == set(keys[1:])
    cache.clear()
    assert not list(aliases.glob("*/*"))
