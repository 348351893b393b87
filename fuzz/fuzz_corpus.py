"""The fuzz campaign's seeds: real archives, a real planned link, a real DTLTO job file.

Built once per campaign with the real LLVM 22 tools and `dist-lto` itself from a
small C program that has everything the tools care about: bitcode objects, a
native object, a regular archive with a loaded member, a never-loaded member, a
static constructor and a native member, and a thin archive. Every seed is kept as
bytes (paths relative to the tool's working directory), so a fuzz worker writes an
input's files without touching the seeds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import orjson

LLVM_BIN = os.environ.get("DIST_LTO_LLVM_BIN", "/usr/lib/llvm-22/bin")
CLANG = os.path.join(LLVM_BIN, "clang")
LLVM_AR = os.path.join(LLVM_BIN, "llvm-ar")

SOURCES = {
    "main.c": (
        "#include <stdio.h>\n"
        "int twice(int); int scale(int); int native_mul(int, int);\n"
        "int ctor_ran;\n"
        "int main(int c, char **v) {\n"
        '  printf("%d %d\\n", twice(c) + scale(c) + native_mul(c, 3), ctor_ran);\n'
        "  return v[0] == 0;\n}\n"
    ),
    "twice.c": "int add(int, int);\nint twice(int x) { return add(x, x); }\n",
    "add.c": "int add(int a, int b) { return a + b; }\n",
    "ctor.c": (
        "extern int ctor_ran;\n"
        "__attribute__((constructor)) static void init(void) { ctor_ran = 7; }\n"
    ),
    "unused.c": "int never_called(int x) { return x * 17; }\n",
    "scale.c": "int add(int, int);\nint scale(int x) { return add(x, 100) * 3; }\n",
    "native.c": "int native_mul(int a, int b) { return a * b; }\n",
}
NATIVE = {"native.c"}
"""Compiled without LTO: a native ELF object."""

LINK_FLAGS = ["-fuse-ld=lld", "-O2"]


@dataclass
class Corpus:
    clang: str
    objects: dict[str, bytes]
    """name -> object: bitcode (`-flto=thin`) and one native ELF object."""
    archives: dict[str, bytes]
    """Regular archives (GNU, BSD, Darwin, duplicates, long names, name table with `/`)."""
    thin_archive: bytes
    """A thin archive whose members are `obj/NAME` beside it."""
    plan_tree: dict[str, bytes]
    """A planned link: sources of the meta, prepared archives, LLD's index outputs."""
    plan_meta: dict[str, object]
    index_dir: str
    """Where LLD's outputs are in `plan_tree` (removed for a run of the real index step)."""
    modules: list[tuple[str, str]]
    """(module, its index file) for every bitcode module the index step loaded."""
    dtlto_tree: dict[str, bytes]
    """An LLD DTLTO link's job file and every file its jobs read."""
    job_file: str
    dtlto_job: dict[str, object]
    dtlto_cache: dict[str, bytes] = field(default_factory=dict)
    """A result cache (`out/cache/...`) holding every job of `dtlto_job`."""
    dtlto_outputs: dict[str, bytes] = field(default_factory=dict)
    """What `dtlto_job`'s jobs write (output path -> object)."""
    link_flags: list[str] = field(default_factory=lambda: list(LINK_FLAGS))


def _run(argv: list[str], cwd: Path) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True)
    if done.returncode != 0:
        raise SystemExit(f"corpus: {' '.join(argv)} failed:\n{done.stderr.decode()}")


def _dist_lto(args: list[str], cwd: Path) -> None:
    _run([sys.executable, "-m", "dist_lto", *args], cwd)


def _tree(root: Path, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    files = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not path.is_symlink() and not rel.startswith(skip):
            files[rel] = path.read_bytes()
    return files


def _compile(src: Path, obj: Path) -> None:
    for name, text in SOURCES.items():
        (src / name).write_text(text)
        lto = [] if name in NATIVE else ["-flto=thin"]
        _run([CLANG, "-O2", *lto, "-c", str(src / name), "-o", str(obj / (name[:-2] + ".o"))], src)


def _archives(work: Path, obj: Path) -> dict[str, bytes]:
    lib_members = ["twice.o", "add.o", "ctor.o", "native.o", "unused.o"]
    made: dict[str, list[str]] = {
        "gnu.a": ["rcs", "gnu.a", *lib_members],
        "bsd.a": ["--format=bsd", "rcs", "bsd.a", *lib_members],
        "darwin.a": ["--format=darwin", "rcs", "darwin.a", "twice.o", "native.o"],
    }
    for _name, args in made.items():
        _run([LLVM_AR, *args], obj)
    # Duplicate names: `q` appends a second `add.o` (another object under that name).
    shutil.copy(obj / "add.o", work / "add.o")
    shutil.copy(obj / "unused.o", obj / "a_long_member_name_for_the_table.o")
    _run([LLVM_AR, "qc", "dup.a", "add.o", "a_long_member_name_for_the_table.o"], obj)
    _run([LLVM_AR, "q", str(obj / "dup.a"), "unused.o"], obj)
    _run([LLVM_AR, "q", str(obj / "dup.a"), str(work / "add.o")], obj)
    # A name table whose names hold `/`: llvm-ar keeps a thin archive's paths when
    # it copies its members into a regular one.
    (work / "sub").mkdir()
    shutil.copy(obj / "twice.o", work / "sub" / "twice.o")
    _run([LLVM_AR, "rcT", "sub-thin.a", "sub/twice.o", "obj/add.o"], work)
    _run([LLVM_AR, "qcL", "slash.a", "sub-thin.a"], work)
    shutil.move(work / "slash.a", obj / "slash.a")
    _run([LLVM_AR, "rcs", "empty.a"], obj)
    return {
        name: (obj / name).read_bytes()
        for name in ("gnu.a", "bsd.a", "darwin.a", "dup.a", "slash.a", "empty.a")
    }


def _planned_link(work: Path, obj: Path) -> tuple[dict[str, bytes], dict[str, object]]:
    """A link through `dist-lto prepare` and `dist-lto plan` (the real index step)."""
    link = work / "link"
    (link / "in" / "obj").mkdir(parents=True)
    (link / "in" / "thin" / "obj").mkdir(parents=True)
    for name in ("main.o", "native.o"):
        shutil.copy(obj / name, link / "in" / "obj" / name)
    shutil.copy(obj / "gnu.a", link / "in" / "libm.a")
    shutil.copy(obj / "scale.o", link / "in" / "thin" / "obj" / "scale.o")
    _run([LLVM_AR, "rcT", "libthin.a", "obj/scale.o"], link / "in" / "thin")
    for name, archive in (("libm", "in/libm.a"), ("thin", "in/thin/libthin.a")):
        _dist_lto(
            [
                "prepare",
                "--archive",
                archive,
                "--objects-out",
                f"in/prep/{name}/objects",
                "--manifest-out",
                f"in/prep/{name}/manifest.json",
            ],
            link,
        )
    objects = [
        {
            "kind": "object",
            "index": i,
            "path": f"in/obj/{name}",
            "index_output": f"out/index/in/obj/{name}.thinlto.bc",
            "plan_output": f"out/plans/{i}.json",
            "opt_output": f"out/opt/{i}.o",
        }
        for i, name in enumerate(("main.o", "native.o"))
    ]
    objects[1]["index_output"] = "out/native-index/native.o.thinlto.bc"  # not LLD's layout
    archives = [
        {
            "kind": "archive",
            "index": i,
            "manifest": f"in/prep/{name}/manifest.json",
            "plan_output": f"out/archive-plans/{i}.json",
            "index_dir": index_dir,
            "opt_objects_dir": f"out/archive-opt/{i}",
        }
        for i, (name, index_dir) in enumerate(
            (("libm", "out/index/in/prep/libm"), ("thin", "out/archive-index/1"))
        )
    ]
    meta: dict[str, object] = {
        "version": 1,
        "index_dir": "out/index",
        "link_plan_output": "out/link-plan.json",
        "final_link_args_output": "out/final-link.args",
        "groups": [
            {"pre_flags": [], "post_flags": [], "linkables": objects},
            {"pre_flags": [], "post_flags": [], "linkables": archives[:1]},
            {
                "pre_flags": ["-Wl,--whole-archive"],
                "post_flags": ["-Wl,--no-whole-archive"],
                "linkables": archives[1:],
            },
            {"linkables": [{"kind": "args", "args": ["-lm"]}]},
        ],
    }
    (link / "meta.json").write_bytes(orjson.dumps(meta, option=orjson.OPT_INDENT_2))
    _dist_lto(["plan", "meta.json", "--", CLANG, *LINK_FLAGS, "-o", "out/app"], link)
    tree = _tree(
        link,
        skip=(
            "out/plans",
            "out/archive-plans",
            "out/link-plan.json",
            "out/final-link.args",
            "out/native-index",
        ),
    )
    return tree, meta


def _dtlto(work: Path, obj: Path) -> tuple[dict[str, bytes], str, dict[str, object]]:
    """LLD's own DTLTO link of the program; the job file and every file it names."""
    link = work / "dtlto"
    link.mkdir()
    for name in ("main.o", "scale.o", "native.o", "gnu.a"):
        shutil.copy(obj / name, link / name)
    keeper = work / "keep-job.py"
    keeper.write_text(
        "import json, shutil, subprocess, sys\n"
        "shutil.copy(sys.argv[-1], 'job.json')\n"
        "jobs = json.load(open(sys.argv[-1]))\n"
        "for job in jobs['jobs']:\n"
        "    subprocess.run(jobs['common']['args'] + job['args'], check=True)\n"
    )
    _run([CLANG, "-flto=thin", *LINK_FLAGS, "main.o", "scale.o", "native.o", "gnu.a", "-o", "prog",
          f"-fthinlto-distributor={sys.executable}", f"-Xthinlto-distributor={keeper}",
          "-Wl,--save-temps"], link)  # fmt: skip
    job = orjson.loads((link / "job.json").read_bytes())
    needed = set(job["common"]["inputs"])
    for entry in job["jobs"]:
        needed.update(entry["inputs"])
    tree = {name: (link / name).read_bytes() for name in sorted(needed)}
    job["common"]["args"][0] = "bin/clang"  # a link in the sandbox: removing it is seen
    tree["job.json"] = orjson.dumps(job, option=orjson.OPT_INDENT_2)
    return tree, "job.json", job


def _dtlto_cache(work: Path, tree: dict[str, bytes], job: dict[str, object]) -> tuple[
        dict[str, bytes], dict[str, bytes]]:  # fmt: skip
    """Run the job file once with a cache: (the cache's entries, the jobs' outputs)."""
    run = work / "dtlto-cached"
    for name, data in tree.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(data)
    (run / "bin").mkdir()
    (run / "bin" / "clang").symlink_to(CLANG)
    _dist_lto(["distribute", "--cache-dir", "out/cache", "job.json"], run)
    cache = {name: data for name, data in _tree(run / "out" / "cache").items()
             if name.startswith("v2/entries/")}  # fmt: skip
    outputs = [entry["outputs"][0] for entry in job["jobs"]]  # type: ignore[index, union-attr]
    return ({f"out/cache/{name}": data for name, data in cache.items()},
            {name: (run / name).read_bytes() for name in outputs})  # fmt: skip


def build(work: Path) -> Corpus:
    """Compile the program and make every seed under `work` (an empty directory)."""
    src, obj = work / "src", work / "obj"
    src.mkdir(parents=True)
    obj.mkdir()
    _compile(src, obj)
    objects = {name[:-2] + ".o": (obj / (name[:-2] + ".o")).read_bytes() for name in SOURCES}
    archives = _archives(work, obj)
    thin_dir = work / "thin"
    (thin_dir / "obj").mkdir(parents=True)
    for name in ("twice.o", "native.o", "add.o"):
        shutil.copy(obj / name, thin_dir / "obj" / name)
    _run([LLVM_AR, "rcT", "libthin.a", "obj/twice.o", "obj/native.o", "obj/add.o"], thin_dir)
    plan_tree, plan_meta = _planned_link(work, obj)
    modules = []
    for listed in plan_tree["out/index/index.list"].decode().split():
        module = listed.removeprefix("out/index/")
        index = listed + ".thinlto.bc"
        if index not in plan_tree:  # moved into its archive's index_dir
            tail = "/" + os.path.basename(index)
            index = next(p for p in plan_tree if p.endswith(tail) and p.startswith("out/"))
        modules.append((module, index))
    dtlto_tree, job_file, job = _dtlto(work, obj)
    dtlto_cache, dtlto_outputs = _dtlto_cache(work, dtlto_tree, job)
    return Corpus(
        clang=CLANG,
        objects=objects,
        archives=archives,
        thin_archive=(thin_dir / "libthin.a").read_bytes(),
        plan_tree=plan_tree,
        plan_meta=plan_meta,
        index_dir="out/index",
        modules=modules,
        dtlto_tree=dtlto_tree,
        job_file=job_file,
        dtlto_job=job,
        dtlto_cache=dtlto_cache,
        dtlto_outputs=dtlto_outputs,
    )
