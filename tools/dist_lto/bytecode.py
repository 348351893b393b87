"""The package as Buck2's actions get it: every source, and the bytecode of the modules
those actions import.

Run from its source, before the package has any bytecode, by the toolchain's
`python_compile` action (prelude/dist_lto/package.bzl):

    python3 -S -E .../dist_lto/bytecode.py OUT dist_lto/PATH=SOURCE...

Each source is copied to OUT/dist_lto/PATH. Only the modules that the subcommands Buck2
runs can import are compiled: those `ENTRY_MODULES` name, and every `dist_lto` module
an import statement of a compiled one names (inside functions too), found by reading
the sources, not by importing them. The rest (the report, the DTLTO distributor, the
remote client: a third of the package) is never imported by an action; it still
imports, compiled as it loads. The bytecode has unchecked hashes and names each source
by its path in the package (Python names it by where it lies when it loads), so the
output is the same bytes wherever and whenever it is made. Standard library only, and
nothing of the package.
"""

import os
import py_compile
import re
import sys

ENTRY_MODULES = (
    "dist_lto.__main__",
    "dist_lto.commands.opt",
    "dist_lto.commands.opt_worker",
    "dist_lto.commands.plan",
    "dist_lto.commands.prepare",
    "dist_lto.upstream",
    "dist_lto.upstream.copy_member",
    "dist_lto.upstream.opt",
    "dist_lto.upstream.plan",
    "dist_lto.upstream.prepare",
    "dist_lto.worker.plans",
)
"""The modules whose `main` a Buck2 action runs (`dist-lto SUBCOMMAND`, `dist-lto
upstream ROLE`), and the worker's planner process."""

_UNCHECKED = py_compile.PycInvalidationMode.UNCHECKED_HASH
_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(dist_lto(?:\.\w+)*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#]*)"
    r"|import[ \t]+(dist_lto(?:\.\w+)*))",
    re.MULTILINE,
)


def module_of(path: str) -> str:
    """`dist_lto/a/b.py` -> `dist_lto.a.b`; a package's `__init__.py` -> the package."""
    name = path.removesuffix(".py").replace("/", ".")
    return name.removesuffix(".__init__")


def imported(source: str, modules: set[str]) -> set[str]:
    """The modules of `modules` that `source`'s import statements load: each module
    named, its parent packages, and each name imported from a package that is a module."""
    found: set[str] = set()
    for base, names, plain in _IMPORT.findall(source):
        named = {base or plain}
        if base:
            named |= {f"{base}.{n}" for n in re.findall(r"\w+", names)}
        for name in named:
            parts = name.split(".")
            found |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    return found & modules


def closure(sources: dict[str, str]) -> set[str]:
    """The modules (by name) that `ENTRY_MODULES` can import; `sources`: name -> text."""
    modules = set(sources)
    seen: set[str] = set()
    todo = [m for m in ENTRY_MODULES if m in modules]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += imported(sources[name], modules) - seen
    return seen


def main(argv: list[str]) -> int:
    out = argv[0]
    texts: dict[str, str] = {}
    paths: dict[str, str] = {}
    for rel, src in (arg.split("=", 1) for arg in argv[1:]):
        with open(src, "rb") as f:
            data = f.read()
        dest = os.path.join(out, rel)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "wb") as f:
            f.write(data)
        if rel.endswith(".py"):
            texts[module_of(rel)] = data.decode()
            paths[module_of(rel)] = rel
    for name in sorted(closure(texts)):
        path = os.path.join(out, paths[name])
        try:
            py_compile.compile(path, dfile=paths[name], doraise=True, invalidation_mode=_UNCHECKED)
        except py_compile.PyCompileError as err:
            sys.stderr.write(f"{paths[name]}: {err.msg}\n")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
