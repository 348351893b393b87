"""Real programs for tests and benchmarks: Lua 5.4 and zstd from Debian's source packages.

Sources are fetched once with `apt-get source` (the deb-src entries come from
`.ci/setup`) into `.cache/workloads/` (or `$DIST_LTO_WORKLOAD_CACHE`) and never
committed. `build(name, dest)` compiles a program's translation units to ThinLTO
bitcode objects under `dest/obj/` and returns a `Build` whose paths are relative
to `dest`, so every test can run its link steps with `cwd=dest` and spell paths
exactly as the index step saw them.
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

LLVM_BIN = os.environ.get("DIST_LTO_LLVM_BIN", "/usr/lib/llvm-22/bin")
CLANG = os.path.join(LLVM_BIN, "clang")
REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("DIST_LTO_WORKLOAD_CACHE", REPO / ".cache" / "workloads"))

SOURCE_PACKAGES = {
    "lua": ("lua5.4", "lua5.4-5.4.4"),
    "zstd": ("libzstd", "libzstd-1.5.4+dfsg2"),
    "git": ("git", "git-2.39.5"),  # built with its own Makefile: see git_build.py
}


@dataclass
class Unit:
    """One translation unit: its source, its object (relative to the build dir), its flags."""

    source: str
    obj: str
    lto: bool = True
    flags: list[str] = field(default_factory=list)


@dataclass
class Build:
    """A program compiled to objects under `root`; all paths relative to `root`.

    `library` objects are the ones a real build would put in an archive;
    `main` objects go on the link line directly.
    """

    name: str
    root: Path
    main: list[str]
    library: list[str]
    native: list[str]
    link_flags: list[str]

    @property
    def objects(self) -> list[str]:
        return self.main + self.library


def source_dir(name: str) -> Path:
    """The unpacked Debian source tree of workload `name`, fetched on first use."""
    package, dirname = SOURCE_PACKAGES[name]
    src = CACHE / "src"
    src.mkdir(parents=True, exist_ok=True)
    tree = src / dirname
    with open(src / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (tree / ".fetched").exists():
            shutil.rmtree(tree, ignore_errors=True)
            subprocess.run(
                ["apt-get", "source", "-qq", package],
                cwd=src,
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            (tree / ".fetched").touch()
    return tree


def _lua_units(src: Path) -> tuple[list[Unit], list[Unit], list[str]]:
    s = src / "src"
    flags = ["-DLUA_COMPAT_5_3", "-DLUA_USE_LINUX", f"-I{s}"]
    names = sorted(p.stem for p in s.glob("*.c") if p.stem not in ("lua", "luac"))
    lib = [Unit(str(s / f"{n}.c"), f"obj/{n}.o", flags=flags) for n in names]
    main = [Unit(str(s / "lua.c"), "obj/lua.o", flags=flags)]
    return main, lib, ["-lm"]


def _zstd_units(src: Path) -> tuple[list[Unit], list[Unit], list[str]]:
    lib_dir = src / "lib"
    flags = [
        f"-I{lib_dir}",
        f"-I{lib_dir / 'common'}",
        "-DZSTD_LEGACY_SUPPORT=0",
        "-DXXH_NAMESPACE=ZSTD_",
    ]
    lib: list[Unit] = []
    for sub in ("common", "compress", "decompress", "dictBuilder"):
        for p in sorted((lib_dir / sub).glob("*.c")):
            lib.append(Unit(str(p), f"obj/lib/{sub}/{p.stem}.o", flags=flags))
        for p in sorted((lib_dir / sub).glob("*.S")):
            lib.append(Unit(str(p), f"obj/lib/{sub}/{p.stem}.o", lto=False, flags=flags))
    progs = src / "programs"
    main = [
        Unit(str(p), f"obj/programs/{p.stem}.o", flags=[*flags, f"-I{progs}"])
        for p in sorted(progs.glob("*.c"))
    ]
    return main, lib, ["-lpthread"]


def units(name: str, src: Path) -> tuple[list[Unit], list[Unit], list[str]]:
    """Workload `name`'s main units, library units and link flags, for its source tree
    at `src` (the fetched one or a copy; a copy of Lua's gets the header that Debian's
    build generates)."""
    if name == "lua":
        header = src / "src" / "lua5.4-deb-multiarch.h"
        if not header.exists():
            header.write_text('#define DEB_HOST_MULTIARCH "x86_64-linux-gnu"\n')
        return _lua_units(src)
    return _zstd_units(src)


def _compile(unit: Unit, root: Path, opt: str) -> None:
    out = root / unit.obj
    out.parent.mkdir(parents=True, exist_ok=True)
    mode = ["-flto=thin"] if unit.lto else []
    subprocess.run(
        [CLANG, opt, *mode, "-c", unit.source, "-o", str(out), *unit.flags],
        check=True,
        capture_output=True,
    )


def build(name: str, dest: Path, *, opt: str = "-O2") -> Build:
    """Compile workload `name` into `dest/obj/`; cached, so repeated calls only copy."""
    main, lib, libs = units(name, source_dir(name))
    key = hashlib.sha256(f"{name}{opt}{CLANG}".encode()).hexdigest()[:12]
    cached = CACHE / "objects" / f"{name}-{key}"
    with open(CACHE / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (cached / ".done").exists():
            shutil.rmtree(cached, ignore_errors=True)
            with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
                list(pool.map(lambda u: _compile(u, cached, opt), main + lib))
            (cached / ".done").touch()
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(cached / "obj", dest / "obj", dirs_exist_ok=True)
    return Build(
        name=name,
        root=dest,
        main=[u.obj for u in main],
        library=[u.obj for u in lib if u.lto],
        native=[u.obj for u in lib if not u.lto],
        link_flags=libs,
    )


def check_binary(name: str, exe: Path) -> None:
    """Run a functional check of a linked workload binary; raise on any misbehaviour."""
    if name == "lua":
        out = subprocess.run(
            [
                str(exe),
                "-e",
                "local t={} for i=1,100 do t[i]=i*i end"
                " print(#t, t[100], string.format('%5.2f', math.pi))",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        if out.split() != ["100", "10000", "3.14"]:
            raise AssertionError(f"lua printed {out!r}")
    else:
        data = b"".join(b"distributed thinlto %d\n" % i for i in range(20000))
        packed = subprocess.run(
            [str(exe), "-q", "-c", "-19"], input=data, check=True, capture_output=True
        ).stdout
        back = subprocess.run(
            [str(exe), "-q", "-d", "-c"], input=packed, check=True, capture_output=True
        ).stdout
        if back != data or len(packed) >= len(data) // 10:
            raise AssertionError("zstd round trip failed")


def link_in_process(b: Build, out: str) -> None:
    """The reference: an in-process ThinLTO link of the build with LLD."""
    subprocess.run(
        [
            CLANG,
            "-flto=thin",
            "-fuse-ld=lld",
            "-O2",
            *b.objects,
            *b.native,
            "-o",
            out,
            *b.link_flags,
        ],
        cwd=b.root,
        check=True,
        capture_output=True,
    )
