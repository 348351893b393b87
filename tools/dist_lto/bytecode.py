"""The package as Buck2's actions get it: its modules in one zip, bytecode for those the
actions import.

Run from its source, before the package has any bytecode, by the toolchain's
`python_compile` action (prelude/dist_lto/package.bzl):

    python3 -S -E .../dist_lto/bytecode.py OUT dist_lto/PATH=SOURCE...

It writes OUT/dist_lto.zip, the package's modules, and OUT/dist_lto/, its other files:
`__main__.py`, which starts the tool from the zip (`installed.py`), and the C sources
of its servers: five files where a directory of sources and bytecode made almost two
hundred, each of which the build's file system, Buck2 and a remote executor's input
root handle one by one. Only the modules that the subcommands Buck2 runs can import
are compiled: those `ENTRY_MODULES` name, and every `dist_lto` module an import
statement of a compiled one names (inside functions too), found by reading the
sources, not by importing them. The zip holds their bytecode in place of their source,
which Python's zip importer loads without looking for one; the rest (the report, the
DTLTO distributor, the remote client: a third of the package) is never imported by an
action, and stays source, compiled as it loads. The bytecode has unchecked hashes and
names each source by its path in the package, the zip's entries are in one order with
one date, so the output is the same bytes wherever and whenever it is made. Standard
library only, and nothing of the package.
"""

import importlib.util
import io
import marshal
import os
import re
import sys
import zipfile

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

ZIP = "dist_lto.zip"
LAUNCHER = "dist_lto/__main__.py"
"""Run as a file (it puts the zip on `sys.path`), so it stays one beside the zip."""
_DATE = (1980, 1, 1, 0, 0, 0)
_UNCHECKED_HASH = 0b01
"""The flags of a hash-based .pyc whose source is never checked (PEP 552)."""
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


def bytecode(source: bytes, path: str) -> bytes:
    """What `py_compile` writes for `source`, named `path` in tracebacks, with an
    unchecked hash: it does not depend on when or where it is made."""
    code = compile(source, path, "exec", dont_inherit=True)
    header = importlib.util.MAGIC_NUMBER + _UNCHECKED_HASH.to_bytes(4, "little")
    return header + importlib.util.source_hash(source) + marshal.dumps(code)


def _entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, _DATE)
    info.external_attr = 0o644 << 16
    return info


def main(argv: list[str]) -> int:
    out = argv[0]
    sources: dict[str, bytes] = {}
    for rel, src in (arg.split("=", 1) for arg in argv[1:]):
        with open(src, "rb") as f:
            sources[rel] = f.read()
    texts = {module_of(rel): data.decode() for rel, data in sources.items() if rel.endswith(".py")}
    compiled = closure(texts)
    members: dict[str, bytes] = {}
    files: dict[str, bytes] = {}
    for rel, data in sources.items():
        if rel == LAUNCHER or not rel.endswith(".py"):
            files[rel] = data
        elif module_of(rel) in compiled:
            try:
                members[rel + "c"] = bytecode(data, rel)
            except SyntaxError as err:
                sys.stderr.write(f"{rel}:{err.lineno}: {err.msg}\n")
                return 1
        else:
            members[rel] = data
    os.makedirs(out, exist_ok=True)
    for rel, data in files.items():
        dest = os.path.join(out, rel)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "wb") as f:
            f.write(data)
    # Made in memory and written at once: Buck2's file watcher wakes for every write
    # under the project, and the zip would take one per member header and body.
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, data in sorted(members.items()):
            archive.writestr(_entry(name), data)
    with open(os.path.join(out, ZIP), "wb") as f:
        f.write(buffer.getbuffer())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
