"""Running the recorded actions, each `run` in a scratch directory of its own.

A `run` action's scratch directory mirrors the project root but holds only the
action's declared inputs (copied, so an action cannot change them); the command runs
there, with a minimal environment, and only its declared outputs are taken back.
A command that reads a file it did not declare finds nothing there, as it would on a
remote worker. (Absolute paths outside the project, such as the toolchain under
/usr/lib/llvm-22, stay reachable: there is no OS-level sandbox.)

Actions run on a thread pool; dynamic_output callbacks run on the calling thread
(Starlark evaluation is not shared across threads) as soon as their `dynamic`
inputs exist. Only what the requested outputs need is run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

from .cmdline import render_content, render_json
from .graph import Action, Dynamic, Graph, GraphError

SANDBOX_PATH = "/usr/bin:/bin"


class ActionFailed(Exception):
    """An action failed: exited non-zero, or did not produce a declared output."""

    def __init__(self, action: Action, message: str, stderr: str = "") -> None:
        super().__init__(f"action {action.describe()} failed: {message}")
        self.action = action
        self.stderr = stderr


class Store:
    """Where artifacts live: sources in the project, outputs under `out_root`."""

    def __init__(self, graph: Graph, project_root: Path, out_root: Path) -> None:
        self.graph = graph
        self.project_root = project_root
        self.out_root = out_root

    def path(self, key: str) -> Path:
        decl, _ = self.graph.owner(key)
        return (self.out_root if decl is not None else self.project_root) / key


class Executor:
    def __init__(
        self, graph: Graph, store: Store, jobs: int, env: dict[str, str] | None = None
    ) -> None:
        self.graph = graph
        self.store = store
        self.jobs = max(1, jobs)
        self.base_env = env or {}
        self._sandbox_ids = iter(range(1 << 62))
        self._lock = threading.Lock()

    # --- scheduling -------------------------------------------------------------

    def build(self, roots: list[str], on_dynamic: Callable[[Dynamic], None]) -> None:
        """Run whatever `roots` need, in dependency order, `jobs` at a time."""
        running: dict[Future[None], Action] = {}
        started: set[int] = set()
        failure: BaseException | None = None
        with ThreadPoolExecutor(self.jobs) as pool:
            while True:
                if failure is None:
                    missing = [k for k in roots if not self._done(k)]
                    if not missing and not running:
                        return
                    progressed = False
                    for node in self._ready(missing, started):
                        if isinstance(node, Dynamic):
                            on_dynamic(node)
                            node.done = True
                            progressed = True
                        elif node.kind != "run":
                            self._run_in_process(node)
                            progressed = True
                        else:
                            started.add(node.id)
                            running[pool.submit(self._run_sandboxed, node)] = node
                    if progressed:
                        continue
                    if not running:
                        raise GraphError(
                            f"nothing can run, but {missing[0]} is not built (a cycle?)"
                        )
                elif not running:
                    raise failure
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in finished:
                    running.pop(fut)
                    err = fut.exception()
                    if err is not None and failure is None:
                        failure = err

    def _done(self, key: str) -> bool:
        decl, _ = self.graph.owner(key)
        if decl is None:
            return True
        if decl.producer is None:
            raise GraphError(f"`{key}` is needed but no action binds it")
        return isinstance(decl.producer, Action) and decl.producer.done

    def _ready(self, keys: list[str], started: set[int]) -> list[Action | Dynamic]:
        """Not-yet-started nodes that `keys` need and whose inputs are all built."""
        ready: list[Action | Dynamic] = []
        chosen: set[int] = set()
        seen: set[str] = set()
        stack = list(keys)
        while stack:
            key = stack.pop()
            if key in seen:
                continue
            seen.add(key)
            decl, _ = self.graph.owner(key)
            if decl is None or decl.producer is None:
                continue
            node = decl.producer
            if node.done or (isinstance(node, Action) and node.id in started):
                continue
            inputs = node.dynamic if isinstance(node, Dynamic) else node.inputs
            pending = [k for k in inputs if not self._done(k)]
            if pending:
                stack.extend(pending)
            elif id(node) not in chosen:
                chosen.add(id(node))
                ready.append(node)
        return ready

    # --- in-process actions ---------------------------------------------------------

    def _run_in_process(self, action: Action) -> None:
        start = time.monotonic()
        spec = action.spec
        out = action.outputs[0]
        dest = self.store.out_root / out.key
        _clear(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if action.kind == "write":
            dest.write_text(render_content(spec["content"]))
            if spec.get("is_executable"):
                dest.chmod(0o755)
        elif action.kind == "write_json":
            value = render_json(spec["content"], [])
            if spec.get("pretty"):
                text = json.dumps(value, indent=2, ensure_ascii=False)
            else:
                text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
            dest.write_text(text)
        elif action.kind == "copy":
            _copy(self.store.path(action.inputs[0]), dest)
        elif action.kind == "symlinked_dir":
            dest.mkdir()
            for name, node in spec["srcs"].items():
                link = dest / name
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(self.store.path(node["a"]))
        elif action.kind == "copied_dir":
            dest.mkdir()
            for name, node in spec["srcs"].items():
                _copy(self.store.path(node["a"]), dest / name)
        else:
            raise GraphError(f"unknown action kind {action.kind}")
        action.seconds = time.monotonic() - start
        action.done = True

    # --- sandboxed actions ------------------------------------------------------------

    def _run_sandboxed(self, action: Action) -> None:
        with self._lock:
            n = next(self._sandbox_ids)
        sandbox = self.store.out_root / "buck-out" / "v2" / "sandbox" / str(n)
        _clear(sandbox)
        sandbox.mkdir(parents=True)
        try:
            materialized: set[str] = set()
            for key in action.inputs:
                self._materialize(key, sandbox, materialized)
            for ref in action.outputs:
                target = sandbox / ref.key
                if target.exists() or target.is_symlink():
                    raise ActionFailed(action, f"output `{ref.key}` is also an input")
                target.parent.mkdir(parents=True, exist_ok=True)
            scratch = f"buck-out/v2/tmp/{n}"
            (sandbox / scratch).mkdir(parents=True)
            env = {
                "PATH": SANDBOX_PATH,
                "LC_ALL": "C.UTF-8",
                "BUCK_SCRATCH_PATH": scratch,
                "TMPDIR": str(sandbox / scratch),
                **self.base_env,
                **action.env,
            }
            start = time.monotonic()
            try:
                proc = subprocess.run(
                    action.argv, cwd=sandbox, env=env, capture_output=True, text=True
                )
            except OSError as err:
                raise ActionFailed(
                    action, f"cannot run `{action.argv[0]}`: {err.strerror}"
                ) from None
            action.seconds = time.monotonic() - start
            if proc.returncode != 0:
                raise ActionFailed(
                    action,
                    f"exit status {proc.returncode}\n  command: {' '.join(action.argv)}\n"
                    + proc.stderr.rstrip(),
                    proc.stderr,
                )
            for ref in action.outputs:
                produced = sandbox / ref.key
                if not produced.exists():
                    raise ActionFailed(
                        action, f"did not produce its declared output `{ref.key}`\n{proc.stderr}"
                    )
                if produced.is_dir() != ref.is_dir:
                    kind = "a directory" if ref.is_dir else "a file"
                    raise ActionFailed(action, f"declared output `{ref.key}` should be {kind}")
            for ref in action.outputs:
                dest = self.store.out_root / ref.key
                _clear(dest)
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(sandbox / ref.key, dest)
            action.done = True
        finally:
            if not os.environ.get("HARNESS_KEEP_SANDBOX"):
                shutil.rmtree(sandbox, ignore_errors=True)

    def _materialize(self, key: str, sandbox: Path, done: set[str]) -> None:
        """Put input `key` (and, for a symlinked dir, what its links point to) in `sandbox`."""
        if key in done:
            return
        done.add(key)
        decl, sub = self.graph.owner(key)
        dest = sandbox / key
        producer = decl.producer if decl is not None else None
        if isinstance(producer, Action) and producer.kind == "symlinked_dir":
            srcs = {name: node["a"] for name, node in producer.spec["srcs"].items()}
            names = [sub] if sub else sorted(srcs)
            if sub and sub not in srcs:
                raise GraphError(f"`{key}`: no entry `{sub}` in the symlinked dir")
            dest_dir = sandbox / decl.key if decl is not None else dest
            for name in names:
                self._materialize(srcs[name], sandbox, done)
                link = dest_dir / name
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(os.path.relpath(sandbox / srcs[name], link.parent))
            dest_dir.mkdir(parents=True, exist_ok=True)
            return
        src = self.store.path(key)
        if not src.exists():
            raise GraphError(f"input `{key}` does not exist")
        dest.parent.mkdir(parents=True, exist_ok=True)
        _copy(src, dest)


def _copy(src: Path, dest: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
    else:
        shutil.copy2(src, dest)


def _clear(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
