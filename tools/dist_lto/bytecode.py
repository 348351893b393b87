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

Being the same bytes, a zip made once is kept in the user's cache (`bytecode/` in the
directory the package's other caches share), named by the interpreter and every
source, and a build in a new buck-out takes it from there instead of compiling again:
about a tenth of a second of CPU that would otherwise go beside the build's first
compiles. A missing, unreadable or damaged entry is made again; without a cache
directory (no HOME, as on a remote executor) the zip is made every time.
"""

import hashlib
import importlib.util
import io
import marshal
import os
import stat
import sys
import time

# `re` and `zipfile` are imported where a zip is made: loading them would be half of the
# CPU of an action that takes the zip from the cache.

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
KEPT = 8
"""How many zips the cache keeps, the most recently used."""
_DIGEST = 32
"""A cached zip starts with the SHA-256 of the rest, which a hit checks."""
_IMPORT = (
    r"(?m)^[ \t]*(?:from[ \t]+(dist_lto(?:\.\w+)*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#]*)"
    r"|import[ \t]+(dist_lto(?:\.\w+)*))"
)


def module_of(path: str) -> str:
    """`dist_lto/a/b.py` -> `dist_lto.a.b`; a package's `__init__.py` -> the package."""
    name = path.removesuffix(".py").replace("/", ".")
    return name.removesuffix(".__init__")


def imported(source: str, modules: set[str]) -> set[str]:
    """The modules of `modules` that `source`'s import statements load: each module
    named, its parent packages, and each name imported from a package that is a module."""
    import re

    found: set[str] = set()
    for base, names, plain in re.findall(_IMPORT, source):
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


def user_cache_dir() -> str | None:
    """The directory the package's caches share, by the rule of
    `dist_lto.distribute.result_cache.user_cache_dir`, which this script cannot import."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        return os.path.join(xdg, "dist-lto")
    home = os.environ.get("HOME", "")
    if os.path.isabs(home) and os.path.isdir(home):
        return os.path.join(home, ".cache", "dist-lto")
    return None


def cache_key(sources: dict[str, bytes]) -> str:
    """What the zip depends on: this interpreter (its bytecode) and every source, by path."""
    digest = hashlib.sha256(b"dist-lto bytecode 1\0" + importlib.util.MAGIC_NUMBER)
    digest.update(sys.version.encode() + b"\0")
    for rel, data in sorted(sources.items()):
        digest.update(b"%s\0%d\0" % (rel.encode(), len(data)))
        digest.update(data)
    return digest.hexdigest()


def cached(directory: str, key: str, most: int) -> bytes | None:
    """The zip kept under `key`, if it is a regular file of at most `most` bytes and
    whole; marked as just used."""
    path = os.path.join(directory, key + ".zip")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with open(fd, "rb", closefd=False) as f:
            kept = f.read(most + _DIGEST + 1)
        if len(kept) > most + _DIGEST or hashlib.sha256(kept[_DIGEST:]).digest() != kept[:_DIGEST]:
            return None
        try:  # noqa: SIM105 (a cache this user may read but not change still serves)
            os.utime(fd)
        except OSError:
            pass
    except OSError:
        return None
    finally:
        os.close(fd)
    return kept[_DIGEST:]


def keep(directory: str, key: str, made: bytes) -> None:
    """Keep `made` under `key` (written to a temporary name and renamed, so that a build
    beside this one reads all of it or none), and only the `KEPT` most recently used;
    temporaries an hour old are a stopped build's."""
    try:
        os.makedirs(directory, exist_ok=True)
        temporary = os.path.join(directory, f".{key}.{os.getpid()}.tmp")
        with open(temporary, "wb") as f:
            f.write(hashlib.sha256(made).digest() + made)
        os.replace(temporary, os.path.join(directory, key + ".zip"))
        zips = []
        for entry in os.scandir(directory):
            if not entry.is_file(follow_symlinks=False):
                continue
            when = entry.stat(follow_symlinks=False).st_mtime
            if entry.name.endswith(".zip"):
                zips.append((when, entry.path))
            elif entry.name.endswith(".tmp") and when < time.time() - 3600:
                os.unlink(entry.path)
        for _, stale in sorted(zips, reverse=True)[KEPT:]:
            os.unlink(stale)
    except OSError:
        pass


def main(argv: list[str]) -> int:
    out = argv[0]
    sources: dict[str, bytes] = {}
    for rel, src in (arg.split("=", 1) for arg in argv[1:]):
        with open(src, "rb") as f:
            sources[rel] = f.read()
    home = user_cache_dir()
    directory = os.path.join(home, "bytecode") if home else None
    key = cache_key(sources)
    # A zip is about the size of the sources (bytecode for some, source for the rest).
    most = 2 * sum(len(data) for data in sources.values()) + (1 << 20)
    made = cached(directory, key, most) if directory else None
    if made is None:
        made = zipped(sources)
        if made is None:
            return 1
        if directory:
            keep(directory, key, made)
    os.makedirs(out, exist_ok=True)
    for rel, data in sources.items():
        if rel == LAUNCHER or not rel.endswith(".py"):
            dest = os.path.join(out, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "wb") as f:
                f.write(data)
    # Written at once: Buck2's file watcher wakes for every write under the project, and
    # the zip would take one per member header and body.
    with open(os.path.join(out, ZIP), "wb") as f:
        f.write(made)
    return 0


def zipped(sources: dict[str, bytes]) -> bytes | None:
    """The zip of the package's modules, bytecode for what actions import; None (the
    error printed) when one of those does not compile."""
    texts = {module_of(rel): data.decode() for rel, data in sources.items() if rel.endswith(".py")}
    compiled = closure(texts)
    members: dict[str, bytes] = {}
    for rel, data in sources.items():
        if rel == LAUNCHER or not rel.endswith(".py"):
            continue
        if module_of(rel) in compiled:
            try:
                members[rel + "c"] = bytecode(data, rel)
            except SyntaxError as err:
                sys.stderr.write(f"{rel}:{err.lineno}: {err.msg}\n")
                return None
        else:
            members[rel] = data
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, data in sorted(members.items()):
            info = zipfile.ZipInfo(name, _DATE)
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    return buffer.getvalue()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
