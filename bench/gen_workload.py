#!/usr/bin/env python3
"""A generated C program of N modules shaped like real code, for builds at scale.

Lua and zstd have 33 and 39 modules; links worth distributing have thousands. This
program, the same for the same seed and N, has what such code bases have:

- libraries of 20-100 modules, each with a header of inline functions and
  declarations; most are regular archives, some thin archives, some plain objects
  (`use_archive = False` on Buck2's upstream prelude; our prelude has no such
  library, so there they are regular archives);
- a few hub modules in the first library, whose functions almost every module calls
  (so almost every backend imports from them);
- a long tail of leaf modules that call only hubs, inner modules that also call a few
  modules of their own library and of the libraries they depend on, one runner per
  library calling every module of it;
- one very large module (hundreds of functions);
- `main.c`, which runs every library and prints `checksum <16 hex digits>`.

Every function is unsigned 64-bit arithmetic on its argument, so `Workload.checksum()`
computes in Python what the program must print (run without arguments): a build that
prints anything else is wrong, whichever way it was linked.

Usage: .venv/bin/python bench/gen_workload.py --n 2000 [--seed 1] DEST PROJECT
(PROJECT: `ours` or `upstream`; writes DEST/scale/... for `//scale/app:app`).
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass
from pathlib import Path

MASK = (1 << 64) - 1
FNV_PRIME = 0x100000001B3

LIBRARY_KINDS = ("regular", "thin", "objects")
"""How a library reaches the link: a regular archive, a thin archive, plain objects
between --start-lib and --end-lib (upstream's `use_archive = False`)."""

PROJECTS = ("ours", "upstream")
PACKAGE = "scale"
"""The package directory the workload is written under, in either project."""

ROLES = ("main", "runner", "hub", "leaf", "inner", "big")


@dataclass(frozen=True)
class Function:
    """`a = x ^ k0; repeat `rounds` times: a = rotl(a, rot) * k1 + i; if odd, a ^= k2`."""

    k0: int
    k1: int
    k2: int
    rot: int
    rounds: int

    def __call__(self, x: int) -> int:
        a = x ^ self.k0
        for i in range(self.rounds):
            a = ((((a << self.rot) | (a >> (64 - self.rot))) & MASK) * self.k1 + i) & MASK
            if a & 1:
                a ^= self.k2
        return a

    def c(self, name: str) -> str:
        return (
            f"static uint64_t {name}(uint64_t x) {{\n"
            f"    uint64_t a = x ^ {self.k0:#x}ULL;\n"
            f"    for (uint64_t i = 0; i < {self.rounds}; i++) {{\n"
            f"        a = ((a << {self.rot}) | (a >> {64 - self.rot})) * {self.k1:#x}ULL + i;\n"
            f"        if (a & 1) a ^= {self.k2:#x}ULL;\n"
            "    }\n    return a;\n}\n"
        )


@dataclass(frozen=True)
class Module:
    """One translation unit `NAME.c` of library `library`, exporting `NAME_step` and
    `NAME_run` (runners export `LIB_run`, main exports `main`)."""

    name: str
    library: int
    role: str
    salt: int
    functions: tuple[Function, ...]
    calls: tuple[str, ...]
    """Modules whose `_step` this module's `_run` calls, in order."""
    hubs: tuple[str, str]
    """The hub whose `_step` this module's `_step` calls, and the one its `_run` calls."""


@dataclass(frozen=True)
class Library:
    index: int
    kind: str
    deps: tuple[int, ...]
    """Libraries whose modules this one's call (always library 0, with the hubs)."""
    modules: tuple[Module, ...]
    """Its modules in runner order; the runner itself is not among them."""
    mix: tuple[int, int, int]
    """The header's inline `lK_mix`: shift, odd multiplier, shift."""

    @property
    def name(self) -> str:
        return f"l{self.index}"

    @property
    def sources(self) -> list[str]:
        return [f"{m.name}.c" for m in self.modules] + [f"{self.name}_all.c"]


@dataclass(frozen=True)
class Workload:
    seed: int
    n: int
    libraries: tuple[Library, ...]

    @property
    def modules(self) -> dict[str, Module]:
        return {m.name: m for lib in self.libraries for m in lib.modules}

    @property
    def edited(self) -> str:
        """The path (below the package) of the leaf module an incremental build edits:
        the first leaf of the middle library."""
        lib = self.libraries[len(self.libraries) // 2]
        leaf = next(m for m in lib.modules if m.role == "leaf")
        return f"{lib.name}/{leaf.name}.c"

    def checksum(self) -> int:
        """What the program prints (as `checksum %016llx`) when run without arguments."""
        modules = self.modules
        step_cache: dict[tuple[str, int], int] = {}

        def mix(lib: Library, x: int) -> int:
            s1, k, s2 = lib.mix
            x ^= x >> s1
            x = (x * k) & MASK
            return x ^ (x >> s2)

        def step(m: Module, x: int) -> int:
            key = (m.name, x)
            if key in step_cache:
                return step_cache[key]
            a = mix(self.libraries[m.library], x ^ m.salt)
            for f in m.functions:
                a = f(a)
            if m.role != "hub":
                a = (a + step(modules[m.hubs[0]], a)) & MASK
            step_cache[key] = a
            return a

        def run(m: Module, x: int) -> int:
            a = step(m, x)
            for i, callee in enumerate(m.calls):
                a ^= step(modules[callee], (a + i) & MASK)
            if m.role != "hub":
                a = (a + step(modules[m.hubs[1]], a ^ 0x5BD1E995)) & MASK
            return a

        acc = (1 * 0x9E3779B97F4A7C15) & MASK  # argc == 1
        for lib in self.libraries:
            a = acc
            for j, m in enumerate(lib.modules):
                a = ((a * FNV_PRIME) & MASK) ^ run(m, a ^ j)
            acc = ((acc * FNV_PRIME) & MASK) ^ ((a + lib.index) & MASK)
        return acc


def _function(rng: random.Random, rounds: tuple[int, int]) -> Function:
    return Function(
        k0=rng.getrandbits(64),
        k1=rng.getrandbits(64) | 1,
        k2=rng.getrandbits(64),
        rot=rng.randint(1, 63),
        rounds=rng.randint(*rounds),
    )


def library_sizes(rng: random.Random, count: int) -> list[int]:
    """Sizes of 20-100 modules (runner included) summing to `count` (at least 20);
    small programs get libraries near 20, so they still have several."""
    sizes = []
    remaining = count
    while remaining:
        size = rng.randint(20, min(100, max(20, remaining // 3)))
        if remaining - size < 20:
            size = remaining if remaining <= 100 else remaining - 20
        sizes.append(size)
        remaining -= size
    return sizes


def generate(seed: int, n: int) -> Workload:
    """The workload of `n` modules (main and runners included) for `seed`."""
    if n < 21:
        raise ValueError(f"a workload needs at least 21 modules, not {n}")
    rng = random.Random(f"dist-lto-scale/{seed}/{n}")
    sizes = library_sizes(rng, n - 1)
    hub_count = min(5, 2 + n // 2000)
    big_library = len(sizes) // 3
    hubs = tuple(f"l0_hub{h}" for h in range(hub_count))
    libraries: list[Library] = []
    callable_by_lib: dict[int, list[str]] = {}
    for k, size in enumerate(sizes):
        if k < len(LIBRARY_KINDS):
            kind = LIBRARY_KINDS[k]
        else:
            kind = rng.choices(LIBRARY_KINDS, weights=(6, 2, 2))[0]
        lower = list(range(1, k))
        deps = (0, *sorted(rng.sample(lower, min(len(lower), rng.randint(0, 3))))) if k else ()
        modules: list[Module] = []
        names: list[str] = []
        for j in range(size - 1):  # the last one is the runner
            if k == 0 and j < hub_count:
                role, name = "hub", hubs[j]
            elif k == big_library and j == 0:
                role, name = "big", f"l{k}_big"
            else:
                role = "leaf" if rng.random() < 0.6 else "inner"
                name = f"l{k}_m{j}"
            if role == "hub":
                functions = tuple(_function(rng, (1, 3)) for _ in range(2))
            elif role == "big":
                functions = tuple(_function(rng, (2, 6)) for _ in range(300 + n // 20))
            elif role == "leaf":
                functions = tuple(_function(rng, (1, 4)) for _ in range(rng.randint(1, 4)))
            else:
                functions = tuple(_function(rng, (2, 6)) for _ in range(rng.randint(3, 10)))
            calls: tuple[str, ...] = ()
            if role in ("inner", "big"):
                pool = names + [c for d in deps for c in callable_by_lib[d]]
                if pool:
                    calls = tuple(rng.choice(pool) for _ in range(rng.randint(1, 5)))
            modules.append(
                Module(
                    name=name,
                    library=k,
                    role=role,
                    salt=rng.getrandbits(64),
                    functions=functions,
                    calls=calls,
                    hubs=(rng.choice(hubs), rng.choice(hubs)),
                )
            )
            names.append(name)
        callable_by_lib[k] = names
        mix = (rng.randint(13, 33), rng.getrandbits(64) | 1, rng.randint(13, 33))
        libraries.append(Library(k, kind, deps, tuple(modules), mix))
    return Workload(seed, n, tuple(libraries))


# -- C sources -------------------------------------------------------------------------


def header_text(lib: Library) -> str:
    guard = f"DIST_LTO_SCALE_{lib.name.upper()}_H"
    s1, k, s2 = lib.mix
    lines = [f"#ifndef {guard}", f"#define {guard}", "#include <stdint.h>", ""]
    lines.append(f"static inline uint64_t {lib.name}_mix(uint64_t x) {{")
    lines.append(
        f"    x ^= x >> {s1};\n    x *= {k:#x}ULL;\n    x ^= x >> {s2};\n    return x;\n}}"
    )
    for m in lib.modules:
        lines.append(f"uint64_t {m.name}_step(uint64_t x);")
        lines.append(f"uint64_t {m.name}_run(uint64_t x);")
    lines += [f"uint64_t {lib.name}_run(uint64_t x);", f"#endif /* {guard} */", ""]
    return "\n".join(lines)


def module_text(w: Workload, m: Module) -> str:
    lib = w.libraries[m.library]
    headers = sorted({0, m.library, *(w.modules[c].library for c in m.calls)})
    out = ["#include <stdint.h>"] + [f'#include "l{h}.h"' for h in headers] + [""]
    for i, f in enumerate(m.functions):
        out.append(f.c(f"{m.name}_f{i}"))
    out.append(f"uint64_t {m.name}_step(uint64_t x) {{")
    out.append(f"    uint64_t a = {lib.name}_mix(x ^ {m.salt:#x}ULL);")
    out += [f"    a = {m.name}_f{i}(a);" for i in range(len(m.functions))]
    if m.role != "hub":
        out.append(f"    a += {m.hubs[0]}_step(a);")
    out += ["    return a;", "}", "", f"uint64_t {m.name}_run(uint64_t x) {{"]
    out.append(f"    uint64_t a = {m.name}_step(x);")
    out += [f"    a ^= {c}_step(a + {i});" for i, c in enumerate(m.calls)]
    if m.role != "hub":
        out.append(f"    a += {m.hubs[1]}_step(a ^ 0x5bd1e995);")
    out += ["    return a;", "}", ""]
    return "\n".join(out)


def runner_text(lib: Library) -> str:
    out = ["#include <stdint.h>", f'#include "{lib.name}.h"', ""]
    out += [f"uint64_t {lib.name}_run(uint64_t x) {{", "    uint64_t a = x;"]
    out += [f"    a = a * {FNV_PRIME:#x}ULL ^ {m.name}_run(a ^ {j});"
            for j, m in enumerate(lib.modules)]  # fmt: skip
    out += ["    return a;", "}", ""]
    return "\n".join(out)


def main_text(w: Workload) -> str:
    out = ["#include <stdint.h>", "#include <stdio.h>"]
    out += [f'#include "{lib.name}.h"' for lib in w.libraries]
    out += ["", "int main(int argc, char **argv) {", "    (void)argv;"]
    out.append("    uint64_t acc = (uint64_t)argc * 0x9e3779b97f4a7c15ULL;")
    out += [f"    acc = acc * {FNV_PRIME:#x}ULL ^ ({lib.name}_run(acc) + {lib.index});"
            for lib in w.libraries]  # fmt: skip
    out += ['    printf("checksum %016llx\\n", (unsigned long long)acc);', "    return 0;", "}", ""]
    return "\n".join(out)


def write_sources(w: Workload, pkg: Path) -> None:
    """Every library's header and modules under `pkg/lK/`, and `pkg/app/main.c`."""
    for lib in w.libraries:
        d = pkg / lib.name
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{lib.name}.h").write_text(header_text(lib))
        for m in lib.modules:
            (d / f"{m.name}.c").write_text(module_text(w, m))
        (d / f"{lib.name}_all.c").write_text(runner_text(lib))
    (pkg / "app").mkdir(parents=True, exist_ok=True)
    (pkg / "app" / "main.c").write_text(main_text(w))


# -- Buck2 packages --------------------------------------------------------------------


def _list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{i}"' for i in items) + "]"


def library_buck(w: Workload, lib: Library, project: str, package: str) -> str:
    deps = _list([f"//{package}/l{d}:l{d}" for d in lib.deps])
    srcs = "[\n" + "".join(f'        "{s}",\n' for s in lib.sources) + "    ]"
    common = (
        f'    srcs = {srcs},\n    exported_headers = ["{lib.name}.h"],\n    deps = {deps},\n'
        '    visibility = ["PUBLIC"],\n'
    )
    if project == "ours":
        kind = '    archive = "thin",\n' if lib.kind == "thin" else ""
        return f'cxx_library(\n    name = "{lib.name}",\n{common}{kind})\n'
    extra = '    header_namespace = "",\n    preferred_linkage = "static",\n'
    if lib.kind == "objects":
        extra += "    use_archive = False,\n"
    if lib.kind != "thin":
        return f'cxx_library(\n    name = "{lib.name}",\n{common}{extra})\n'
    return (
        f'cxx_library(\n    name = "{lib.name}-regular",\n{common}{extra})\n\n'
        f'configured_alias(\n    name = "{lib.name}",\n    actual = ":{lib.name}-regular",\n'
        '    platform = "//platforms:thin_archives",\n    visibility = ["PUBLIC"],\n)\n'
    )


APP_TARGETS = {
    "ours": {"dist": "app", "inprocess": "app-inprocess"},
    "upstream": {"dist": "app", "fine": "app-fine", "inprocess": "app-inprocess"},
}
"""The binaries of each project's app package, by how they link."""


def app_buck(w: Workload, project: str, package: str) -> str:
    deps = "[\n" + "".join(f'        "//{package}/{lib.name}:{lib.name}",\n'
                           for lib in w.libraries) + "    ]"  # fmt: skip
    common = f'    srcs = ["main.c"],\n    deps = {deps},\n'
    if project == "ours":
        return (
            f'cxx_binary(\n    name = "app",\n{common}    dist_lto = True,\n)\n\n'
            f'cxx_binary(\n    name = "app-inprocess",\n{common}    lto = True,\n)\n'
        )
    return (
        'load("@dist_lto//upstream:cxx_binary.bzl", "dist_lto_cxx_binary")\n\n'
        f'cxx_binary(\n    name = "app",\n{common}    enable_distributed_thinlto = True,\n)\n\n'
        f'cxx_binary(\n    name = "app-inprocess",\n{common}'
        "    enable_distributed_thinlto = False,\n)\n\n"
        f'dist_lto_cxx_binary(\n    name = "app-fine",\n{common})\n'
    )


def write_project(w: Workload, root: Path, project: str, package: str = PACKAGE) -> Path:
    """The workload's sources and BUCK files under `root/package` for `project` (`ours`:
    a copy of this repository's project; `upstream`: of examples/upstream). Returns the
    package directory."""
    if project not in PROJECTS:
        raise ValueError(f"project must be one of {PROJECTS}, not {project!r}")
    pkg = root / package
    write_sources(w, pkg)
    for lib in w.libraries:
        (pkg / lib.name / "BUCK").write_text(library_buck(w, lib, project, package))
    (pkg / "app" / "BUCK").write_text(app_buck(w, project, package))
    return pkg


def edit(path: Path, n: int) -> None:
    """A one-file edit: one more exported function at the end of `path`, so its bitcode
    and summary change and the program's output does not."""
    with path.open("a") as f:
        name = f"dist_lto_scale_edit_{n}"
        f.write(
            f"\nuint64_t {name}(uint64_t x);\n"
            f"uint64_t {name}(uint64_t x) {{ return x * {n} + 1; }}\n"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, required=True, help="modules, main and runners included")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("dest", type=Path)
    parser.add_argument("project", choices=PROJECTS)
    args = parser.parse_args()
    if args.n < 21:
        parser.error(f"--n: at least 21 modules, not {args.n}")
    w = generate(args.seed, args.n)
    write_project(w, args.dest, args.project)
    print(f"checksum {w.checksum():016x}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
