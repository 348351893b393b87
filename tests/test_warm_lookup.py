"""A warm link's cache lookups: no summary decoded and no output file created, and still
the key of everything a backend's output depends on, and no damaged result restored."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from dist_lto.backend import VerifiedModules, check_primary
from dist_lto.distribute import cache_key
from dist_lto.distribute.cache_key import KeyMaker, WrittenIndex, read_index
from dist_lto.distribute.result_cache import ResultCache
from dist_lto.errors import BadInput
from dist_lto.formats.jobfile import JobFile, parse_job_file, read_job_file
from dist_lto.llvm import bitcode
from dist_lto.llvm.bitcode import IndexModules, IndexRecords, parse_index
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.budget import examples
from support.links import DtltoLink, ThinIndex
from support.tools import Llvm

IDENTITY = "0" * 64


@pytest.fixture
def in_copy(tmp_path: Path, small_dtlto: DtltoLink, monkeypatch: pytest.MonkeyPatch) -> JobFile:
    """The small program's job file, read in a private copy of its directory (the cwd)."""
    root = tmp_path / "copy"
    shutil.copytree(small_dtlto.root, root)
    monkeypatch.chdir(root)
    return read_job_file(small_dtlto.job_file)


def table(modules: IndexModules | None) -> tuple[object, ...] | None:
    return None if modules is None else (modules.paths, modules.hashes, modules.skip)


def keys(files: JobFile, aliases: str | None, identity: str = IDENTITY) -> dict[str, str | None]:
    maker = KeyMaker(files, identity, aliases)
    return {job.module.split(" at ")[0]: maker.key(job) for job in files.jobs}


# ---------------------------------------------------------------------------------
# The module table read once


def test_the_module_table_read_for_the_key_is_the_one_the_check_reads(
    small_dtlto: DtltoLink, lua_thin_index: ThinIndex
) -> None:
    indexes = [
        *lua_thin_index.root.glob("obj/*.thinlto.bc"),
        *small_dtlto.root.glob("*.thinlto.bc"),
    ]
    assert len(indexes) > 4
    for path in indexes:
        data = path.read_bytes()
        assert table(WrittenIndex(data).modules()) == table(parse_index(data)), path


def damaged(lua_thin_index: ThinIndex, cut: int, flips: list[int]) -> bytes:
    """lvm.o's index, its last `cut` bytes (modulo its size) cut off, bits `flips` flipped."""
    data = bytearray((lua_thin_index.root / "obj/lvm.o.thinlto.bc").read_bytes())
    del data[len(data) - cut % len(data) :]
    for bit in flips:
        if data:
            data[(bit >> 3) % len(data)] ^= 1 << (bit & 7)
    return bytes(data)


@given(cut=st.integers(0, 10_000), flips=st.lists(st.integers(0, 1 << 20), max_size=3))
@settings(max_examples=examples(200), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
def test_a_damaged_index_gives_the_checks_table_or_none(
    lua_thin_index: ThinIndex, cut: int, flips: list[int]
) -> None:
    """Where the two readers could differ (a damaged index), the one the key uses gives
    no table and `check_primary` reads the index itself."""
    data = damaged(lua_thin_index, cut, flips)
    modules = WrittenIndex(data).modules()
    reference = None
    with contextlib.suppress(ValueError):
        reference = parse_index(data)
    if modules is not None:
        assert table(modules) == table(reference)


def records_both_ways(data: bytes) -> tuple[object, object]:
    """`read_index_records(data)` with the fast summary walk and with its reference, each
    as its result or the exception type it raised."""
    found = []
    for walk in (bitcode._summary_records, bitcode._summary_records_slowly):
        saved = bitcode._summary_records
        bitcode._summary_records = walk
        try:
            index = bitcode.read_index_records(data)
            found.append((index.modules, index.summary, index.summary_bytes, index.other))
        except ValueError as err:
            found.append(type(err))
        finally:
            bitcode._summary_records = saved
    return found[0], found[1]


def test_the_fast_summary_walk_reads_what_its_reference_reads(
    small_dtlto: DtltoLink, lua_thin_index: ThinIndex
) -> None:
    indexes = [*lua_thin_index.root.glob("obj/*.thinlto.bc"),
               *small_dtlto.root.glob("*.thinlto.bc")]  # fmt: skip
    for path in indexes:
        fast, reference = records_both_ways(path.read_bytes())
        assert fast == reference and isinstance(fast, tuple), path


@given(cut=st.integers(0, 10_000), flips=st.lists(st.integers(0, 1 << 20), max_size=4))
@settings(max_examples=examples(300), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
def test_the_fast_summary_walk_agrees_on_damaged_indexes(
    lua_thin_index: ThinIndex, cut: int, flips: list[int]
) -> None:
    # Most of it kept, so that the walk gets far.
    fast, reference = records_both_ways(damaged(lua_thin_index, cut % 64, flips))
    assert fast == reference


# ---------------------------------------------------------------------------------
# Keys through aliases


def recompile(llvm: Llvm, source: str, dest: str, workdir: Path) -> None:
    (workdir / "changed.c").write_text(source)
    subprocess.run([llvm.clang, "-O2", "-flto=thin", "-c", "changed.c", "-o", dest],
                   cwd=workdir, check=True)  # fmt: skip


CHANGES = ["flags", "compiler", "primary module", "imported module", "index"]


@pytest.mark.parametrize("change", CHANGES)
def test_a_warm_key_changes_whenever_the_backends_output_could(
    change: str, in_copy: JobFile, tmp_path: Path, llvm: Llvm
) -> None:
    """Keys read through aliases (a warm link's) are the canonical keys, before and after
    any change of what the backend reads: only the keys of the jobs that read it change."""
    files = in_copy
    aliases = str(tmp_path / "aliases")
    before = keys(files, None)
    assert keys(files, aliases) == before  # writes the aliases
    assert keys(files, aliases) == before  # reads them
    main = next(job for job in files.jobs if job.module == "main.o")
    identity = IDENTITY
    if change == "flags":
        files = JobFile(files.path, files.linker_output, [*files.args, "-O3"], files.inputs,
                        files.jobs)  # fmt: skip
    elif change == "compiler":
        identity = "1" * 64
    elif change == "primary module":
        recompile(llvm, '#include <stdio.h>\nint twice(int);\nint shout(const char *);\n'
                  'int main(int c, char **v) { printf("%d!\\n", twice(c)); return shout(v[0]); }\n',
                  main.module, Path.cwd())  # fmt: skip
    elif change == "imported module":
        with open(main.inputs[2], "ab") as f:
            f.write(b"\0")
    else:
        data = bytearray(Path(main.index).read_bytes())
        data[len(data) // 2] ^= 0x10
        Path(main.index).write_bytes(bytes(data))
    after = keys(files, None, identity)
    assert keys(files, aliases, identity) == after
    changed = {m for m in before if after[m] != before[m]}
    if change in ("flags", "compiler"):
        assert changed == set(before)
    else:
        assert "main.o" in changed
        touched = main.module if change == "primary module" else main.inputs[2]
        readers = {job.module.split(" at ")[0] for job in files.jobs if touched in job.inputs}
        if change == "index":
            readers = {"main.o"}
        assert changed == readers


def test_an_alias_is_not_used_for_a_job_whose_output_is_spelled_like_a_module(
    in_copy: JobFile, tmp_path: Path
) -> None:
    """The alias of an index as written covers the paths of the job's inputs, not of its
    outputs: a job writing where a module of its index is named keys differently."""
    main = next(job for job in in_copy.jobs if job.module == "main.o")
    imported = main.inputs[2]
    inputs = [p for p in main.inputs if p != imported]

    def job_writing(output: str) -> JobFile:
        doc = {"common": {"linker_output": "prog", "args": in_copy.args, "inputs": []},
               "jobs": [{"args": [a if a != main.output else output for a in main.args],
                         "inputs": inputs, "outputs": [output]}]}  # fmt: skip
        return parse_job_file(doc, "j.json")

    aliases = str(tmp_path / "aliases")
    usual, odd = job_writing("main.native.o"), job_writing(imported)
    assert KeyMaker(usual, IDENTITY, aliases).key(usual.jobs[0]) is not None
    canonical = KeyMaker(odd, IDENTITY).key(odd.jobs[0])
    assert canonical != KeyMaker(usual, IDENTITY).key(usual.jobs[0])
    assert KeyMaker(odd, IDENTITY, aliases).key(odd.jobs[0]) == canonical


def test_a_warm_lookup_decodes_no_summary_and_remembers_the_module_table(
    in_copy: JobFile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jobs on the link's own objects decode nothing; jobs reading archive members LLD
    named after its process id (whose bytes every link writes anew) decode the module
    table only."""
    aliases = str(tmp_path / "aliases")
    cold = keys(in_copy, aliases)
    tables = {job.module: table(read_index(job.index).modules()) for job in in_copy.jobs}

    def decoded(*_: object, **__: object) -> None:
        raise AssertionError("a summary was decoded on a warm lookup")

    reads: list[bool] = []
    reader = cache_key.read_index_records

    def spied(data: bytes, *, decode_summary: bool = True) -> IndexRecords:
        reads.append(decode_summary)
        return reader(data, decode_summary=decode_summary)

    monkeypatch.setattr(cache_key, "canonical_summary", decoded)
    monkeypatch.setattr(cache_key, "read_index_records", spied)
    maker = KeyMaker(in_copy, IDENTITY, aliases)
    members = 0
    for job in in_copy.jobs:
        reads.clear()
        index = read_index(job.index)
        assert maker.key(job, index) == cold[job.module.split(" at ")[0]]
        assert table(index.modules()) == tables[job.module]
        named_by_lld = any(" at " in path for path in job.inputs)
        members += named_by_lld
        assert reads == ([False] if named_by_lld else []), job.module
    assert 0 < members < len(in_copy.jobs)


def test_a_stale_imported_module_is_refused_with_a_remembered_table(
    in_copy: JobFile, tmp_path: Path, llvm: Llvm
) -> None:
    """A module compiled again after the index step changes the key (so no alias of the
    old one applies) and the check refuses the index, as without a cache."""
    aliases = str(tmp_path / "aliases")
    keys(in_copy, aliases)
    twice = next(job for job in in_copy.jobs if job.module.startswith("libm.a(twice.o"))
    imported = next(p for p in twice.inputs[2:] if "add.o" in p)
    recompile(llvm, "int add(int a, int b) { return a - b; }\n", imported, Path.cwd())
    index = read_index(twice.index)
    KeyMaker(in_copy, IDENTITY, aliases).key(twice, index)
    with pytest.raises(BadInput, match="index is stale"):
        check_primary(twice.module, twice.index, index.modules(), VerifiedModules())
    verified = VerifiedModules()
    for job in in_copy.jobs:  # the others still pass, each module checked once
        if job is not twice and imported not in job.inputs:
            check_primary(job.module, job.index, read_index(job.index).modules(), verified)
    assert verified.seen and os.fsencode(imported) not in {key[0] for key in verified.seen}


# ---------------------------------------------------------------------------------
# Restores by hard link


@pytest.fixture
def objects(small_dtlto: DtltoLink) -> list[Path]:
    found = sorted(small_dtlto.root.glob("*.native.o"))
    assert len(found) == 4
    return found


def test_a_restore_links_the_read_only_entry(tmp_path: Path, objects: list[Path]) -> None:
    cache = ResultCache(str(tmp_path / "c"))
    cache.create()
    key = "ab" * 32
    cache.store(key, [str(objects[0])])
    stored = Path(cache.entry(key)) / "0"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o444
    out = tmp_path / "x.o"
    assert cache.restore(key, [str(out)])
    assert out.stat().st_ino == stored.stat().st_ino
    assert out.read_bytes() == objects[0].read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "x.o"]


def test_restoring_over_an_earlier_restore_leaves_nothing_beside_it(
    tmp_path: Path, objects: list[Path]
) -> None:
    """The output is then a link to the entry's file already, and renaming another link
    to the same file over it does nothing (rename(2)): the temporary must still go."""
    cache = ResultCache(str(tmp_path / "c"))
    cache.create()
    key = "ab" * 32
    cache.store(key, [str(objects[0])])
    out = tmp_path / "x.o"
    assert cache.restore(key, [str(out)])
    assert cache.restore(key, [str(out)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "x.o"]
    assert out.read_bytes() == objects[0].read_bytes()


@pytest.mark.parametrize("damage", ["one byte flipped", "truncated", "emptied"])
def test_an_output_changed_in_place_after_a_restore_is_never_restored_again(
    damage: str, tmp_path: Path, objects: list[Path]
) -> None:
    """A restored output shares its entry's file: writing into it changes the entry,
    which the next restore's hash tells from what was stored."""
    cache = ResultCache(str(tmp_path / "c"))
    cache.create()
    key = "cd" * 32
    cache.store(key, [str(objects[0])])
    out = tmp_path / "x.o"
    assert cache.restore(key, [str(out)])
    data = out.read_bytes()
    out.chmod(0o644)  # what a user would do first (root need not)
    with open(out, "r+b") as f:
        if damage == "one byte flipped":
            f.seek(len(data) // 2)
            f.write(bytes([data[len(data) // 2] ^ 1]))
        else:
            f.truncate(200 if damage == "truncated" else 0)
    again = tmp_path / "y.o"
    assert not cache.restore(key, [str(again)])
    assert not again.exists()
    ((_, why),) = cache.evicted
    assert why == "output 0 differs from its recorded size and SHA-256"


def test_a_writable_entry_is_copied_not_linked(tmp_path: Path, objects: list[Path]) -> None:
    cache = ResultCache(str(tmp_path / "c"))
    cache.create()
    key = "ef" * 32
    cache.store(key, [str(objects[0])])
    stored = Path(cache.entry(key)) / "0"
    stored.chmod(0o644)  # as entries were stored before they were made read-only
    out = tmp_path / "x.o"
    assert cache.restore(key, [str(out)])
    assert out.stat().st_ino != stored.stat().st_ino
    assert out.read_bytes() == objects[0].read_bytes()
    assert stat.S_IMODE(out.stat().st_mode) & 0o200
