"""git from Debian's source package, compiled to ThinLTO bitcode with its own Makefile.

git (about 400 translation units, one program) is the larger workload. Its Makefile
needs no configure step: `make -n git` names the objects and archives the program is
linked from, and `make` builds them with clang `-flto=thin`. The objects are copied
under `obj/` of the cache so that a `Build` looks like the other workloads'; the
archives' members are linked as plain objects (every member, in the Makefile's order).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support import workloads

MAKE_FLAGS = [
    "NO_OPENSSL=1",
    "NO_CURL=1",
    "NO_EXPAT=1",
    "NO_TCLTK=1",
    "NO_GETTEXT=1",
    "NO_PERL=1",
    "NO_PYTHON=1",
    "V=1",
]
ARCHIVE = re.compile(r"^rm -f (\S+\.a) && ar rcs \S+ (.*)$")


def _make(tree: Path, opt: str, *targets: str, dry: bool = False) -> str:
    jobs = str(len(os.sched_getaffinity(0)))
    argv = [
        "make",
        *(["-n"] if dry else ["-j", jobs]),
        f"CC={workloads.CLANG}",
        f"CFLAGS={opt} -flto=thin",
        *MAKE_FLAGS,
        *targets,
    ]
    return subprocess.run(argv, cwd=tree, check=True, capture_output=True, text=True).stdout


def link_inputs(tree: Path, opt: str) -> tuple[list[str], list[str]]:
    """The objects git is linked from (archives expanded, first occurrence kept) and
    the libraries, read from `make -n git`."""
    dry = _make(tree, opt, "git", dry=True).splitlines()
    members = {}
    for line in dry:
        m = ARCHIVE.match(line)
        if m:
            members[m.group(1)] = m.group(2).split()
    start = next(i for i, line in enumerate(dry) if " -o git " in line)
    words = shlex.split(" ".join(line.rstrip("\\") for line in dry[start : start + 2]))
    objects: list[str] = []
    libraries: list[str] = []
    for word in words[words.index("git") + 1 :]:
        if word.endswith(".o"):
            objects.append(word)
        elif word in members:
            objects.extend(members[word])
        elif word.startswith("-l"):
            libraries.append(word)
    return list(dict.fromkeys(objects)), libraries


def build(dest: Path, *, opt: str = "-O2") -> workloads.Build:
    """Compile git into `dest/obj/`; cached, so repeated calls only copy."""
    src = workloads.source_dir("git")
    key = hashlib.sha256(f"git{opt}{workloads.CLANG}".encode()).hexdigest()[:12]
    cached = workloads.CACHE / "objects" / f"git-{key}"
    with open(workloads.CACHE / ".git.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (cached / ".done").exists():
            shutil.rmtree(cached, ignore_errors=True)
            tree = workloads.CACHE / "build" / f"git-{key}"
            if not tree.exists():  # else an interrupted build: make resumes it
                shutil.copytree(src, tree)
            objects, libraries = link_inputs(tree, opt)
            _make(tree, opt, *objects)
            for obj in objects:
                (cached / "obj" / obj).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(tree / obj, cached / "obj" / obj)
            (cached / "link.txt").write_text("\n".join([*objects, *libraries]) + "\n")
            shutil.rmtree(tree)
            (cached / ".done").touch()
    names = (cached / "link.txt").read_text().split()
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(cached / "obj", dest / "obj", dirs_exist_ok=True)
    return workloads.Build(
        name="git",
        root=dest,
        main=[f"obj/{n}" for n in names if n.endswith(".o")],
        library=[],
        native=[],
        link_flags=[n for n in names if not n.endswith(".o")],
    )


def check_binary(exe: Path, work: Path) -> None:
    """Create a repository, commit to it and read the history back; raise on any
    misbehaviour."""
    repo = work / f"{exe.name}-repo"
    shutil.rmtree(repo, ignore_errors=True)
    env = {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(work),
        "GIT_AUTHOR_NAME": "a",
        "GIT_AUTHOR_EMAIL": "a@b",
        "GIT_COMMITTER_NAME": "a",
        "GIT_COMMITTER_EMAIL": "a@b",
        "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
    }

    def git(*args: str) -> str:
        return subprocess.run(
            [str(exe.resolve()), *args],
            cwd=repo,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    repo.mkdir()
    git("init", "-q", "-b", "main")
    for i in range(3):
        (repo / "f.txt").write_text("".join(f"line {j}\n" for j in range(i * 10)))
        git("add", "f.txt")
        git("commit", "-q", "-m", f"commit {i}")
    log = git("log", "--format=%s", "--numstat")
    if git("rev-list", "--count", "HEAD").strip() != "3" or "10\t0\tf.txt" not in log:
        raise AssertionError(f"git log printed {log!r}")
    git("fsck", "--strict")
    shutil.rmtree(repo)
