"""A small Buck2 for tests: load BUCK files, analyse targets, build them with real tools.

    h = Harness(repo_root, out_dir, config={"dist_lto.python": "/path/to/python"})
    result = h.build(["//examples/..."])
    result.run_args(Label("root", "examples/c", "hello"))

Analysis runs our rules in starlark-rust (Buck2's interpreter) against the Buck2 API
subset in api.bzl. Each rule analysis and each dynamic_output callback is a Starlark
module of its own, generated here, that loads the frozen modules it needs (the rule,
the providers of the dependencies, the callbacks of its parent), so every value
crossing from one to the next is frozen, as in Buck2. Errors come out as
`BuildError`, with the Starlark traceback (file:line) when the rules are at fault.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cmdline import expand
from .executor import ActionFailed, Executor, Store
from .graph import GEN, Action, Dynamic, Graph, GraphError, check_relpath
from .project import BUILD_FILE, Label, Project, ProjectError
from .starlark_env import BUILTINS, GENERATED, Modules, StarlarkFailure


class BuildError(Exception):
    """Loading, analysis or execution failed; the message says where and why."""


@dataclass
class Target:
    label: Label
    rule: int
    attrs: dict[str, Any]
    deps: list[str]
    visibility: list[str]
    buck_file: str


@dataclass
class Analysis:
    """What a target's analysis left behind: its module and the outputs its providers name."""

    module: str
    default_outputs: list[str]
    other_outputs: list[str]
    sub_targets: dict[str, list[str]]
    run: Any


@dataclass
class BuildResult:
    harness: Harness
    labels: list[Label]
    actions: list[Action] = field(default_factory=list)

    def path(self, key: str) -> Path:
        return self.harness.store.path(key)

    def outputs(self, label: Label) -> list[Path]:
        return [self.path(k) for k in self.harness.analyses[label].default_outputs]

    def run_args(self, label: Label) -> list[str]:
        """The target's RunInfo command line, artifacts as absolute paths."""
        run = self.harness.analyses[label].run
        if run is None:
            raise BuildError(f"{label} has no RunInfo")
        exp = expand(run)
        keys = set(exp.inputs)
        return [str(self.path(a)) if a in keys else a for a in exp.argv]


class Harness:
    def __init__(
        self,
        root: Path,
        out_dir: Path,
        config: dict[str, str] | None = None,
        jobs: int | None = None,
    ) -> None:
        try:
            self.project = Project(root, config)
        except ProjectError as err:
            raise BuildError(str(err)) from None
        self.graph = Graph()
        self.store = Store(self.graph, self.project.root, out_dir.resolve())
        self.executor = Executor(self.graph, self.store, jobs or os.cpu_count() or 2)
        self.targets: dict[Label, Target] = {}
        self.analyses: dict[Label, Analysis] = {}
        self._loaded: set[tuple[str, str]] = set()
        self._package: tuple[str, str] | None = None
        self._analysing: list[Label] = []
        self._dynamic_runs = 0
        hooks = {
            "_py_created": self._hook_created,
            "_py_check_relpath": self._hook_check_relpath,
            "_py_check_source": self._hook_check_source,
            "_py_label": self._hook_label,
            "_py_package": self._hook_package,
            "_py_register": self._hook_register,
            "_py_declare": self._hook_declare,
            "_py_action": self._hook_action,
            "_py_glob": self._hook_glob,
            "_py_config": self._hook_config,
        }
        try:
            self.modules = Modules(self.project, hooks)
        except StarlarkFailure as err:
            raise BuildError(f"loading the Buck2 builtins failed:\n{err}") from None

    # --- hooks called from api.bzl ---------------------------------------------------

    def _hook_created(self, kind: str) -> str:
        if kind != "rule":
            raise ValueError(f"unknown kind {kind}")
        rule_id, cell = self.modules.note_rule_created()
        return json.dumps({"id": rule_id, "cell": cell})

    @staticmethod
    def _hook_check_relpath(path: str) -> None:
        check_relpath(path)

    def _require_package(self, what: str) -> tuple[str, str]:
        if self._package is None:
            raise GraphError(f"{what} can only be called while a BUCK file is evaluated")
        return self._package

    def _hook_check_source(self, path: str) -> str:
        cell, package = self._require_package("a source attribute")
        check_relpath(path)
        full = self.project.root / self.project.package_path(cell, package) / path
        if not full.is_file():
            raise GraphError(f"source file `{path}` does not exist in package {cell}//{package}")
        parent = full.parent
        stop = self.project.root / self.project.package_path(cell, package)
        while parent != stop:
            if (parent / BUILD_FILE).exists():
                raise GraphError(
                    f"source file `{path}` belongs to the subpackage {parent.relative_to(stop)}"
                )
            parent = parent.parent
        return path

    def _hook_label(self, text: str, cell: str) -> str:
        package = self._package[1] if self._package and self._package[0] == cell else ""
        return str(self.project.parse_label(text, cell, package))

    def _hook_package(self) -> str:
        cell, package = self._require_package("package_name() / a rule")
        return json.dumps({"cell": cell, "package": package})

    def _hook_register(self, data: str) -> None:
        cell, package = self._require_package("a rule")
        t = json.loads(data)
        label = Label(cell, package, t["name"])
        if label in self.targets:
            raise GraphError(f"target {label} is defined twice")
        self.targets[label] = Target(
            label, t["rule"], t["attrs"], t["deps"], t["visibility"], self.modules.current_file
        )

    def _hook_declare(self, unit: str, path: str, is_dir: bool) -> str:
        return self.graph.declare(unit, path, is_dir)

    def _hook_action(self, unit: str, data: str) -> None:
        self.graph.add(unit, json.loads(data))

    def _hook_glob(self, data: str) -> str:
        cell, package = self._require_package("glob()")
        spec = json.loads(data)
        return json.dumps(self.project.glob(cell, package, spec["include"], spec["exclude"]))

    def _hook_config(self, section: str, key: str) -> str | None:
        return self.project.read_config(section, key)

    # --- loading --------------------------------------------------------------------

    def load_package(self, cell: str, package: str) -> None:
        if (cell, package) in self._loaded:
            return
        path = "/".join(p for p in (self.project.package_path(cell, package), BUILD_FILE) if p)
        if not (self.project.root / path).is_file():
            raise BuildError(f"no package {cell}//{package} ({path} does not exist)")
        self._package = (cell, package)
        try:
            self.modules.eval_buck(path)
        except StarlarkFailure as err:
            raise BuildError(f"evaluating {path} failed:\n{err}") from None
        finally:
            self._package = None
        self._loaded.add((cell, package))

    def resolve(self, patterns: list[str]) -> list[Label]:
        """Expand `//pkg:name`, `//pkg:` and `//pkg/...` patterns to target labels."""
        labels: list[Label] = []
        root = self.project.root_cell or "root"
        for pattern in patterns:
            try:
                if pattern.endswith("/...") or pattern.endswith("//..."):
                    cell, rest = self.project._split_cell(pattern, root)
                    base = rest[: -len("...")].rstrip("/")
                    packages = [(cell, p) for p in self.project.packages_under(cell, base)]
                    names = None
                elif pattern.endswith(":"):
                    cell, rest = self.project._split_cell(pattern, root)
                    packages, names = [(cell, rest[:-1])], None
                else:
                    label = self.project.parse_label(pattern, root, "")
                    packages, names = [(label.cell, label.package)], [label.name]
            except ProjectError as err:
                raise BuildError(str(err)) from None
            for cell, package in packages:
                self.load_package(cell, package)
                found = sorted(
                    lbl for lbl in self.targets if (lbl.cell, lbl.package) == (cell, package)
                )
                if names is not None:
                    want = Label(cell, package, names[0])
                    if want not in self.targets:
                        raise BuildError(f"unknown target {want}")
                    found = [want]
                labels += [lbl for lbl in found if lbl not in labels]
        return labels

    # --- analysis ---------------------------------------------------------------------

    def analyze(self, label: Label) -> Analysis:
        if label in self.analyses:
            return self.analyses[label]
        if label in self._analysing:
            chain = " -> ".join(str(lbl) for lbl in [*self._analysing, label])
            raise BuildError(f"dependency cycle: {chain}")
        self.load_package(label.cell, label.package)
        target = self.targets.get(label)
        if target is None:
            raise BuildError(f"unknown target {label}")
        self._analysing.append(label)
        try:
            deps = [self.project.parse_label(d, label.cell, label.package) for d in target.deps]
            for dep in deps:
                self.analyze(dep)
                self._check_visible(self.targets[dep], label)
        finally:
            self._analysing.pop()
        unit = str(label)
        pkg = "/".join(p for p in (label.cell, label.package) if p)
        self.graph.begin_unit(unit, unit, f"{GEN}/{pkg}/__{label.name}__")
        rule = self.modules.rules[target.rule]
        module_id = f"{GENERATED}analysis:{label}"
        target_json = json.dumps(
            {
                "cell": label.cell,
                "package": label.package,
                "package_path": self.project.package_path(label.cell, label.package),
                "name": label.name,
                "unit": unit,
                "attrs": target.attrs,
            }
        )
        unique_deps = sorted(set(deps))
        lines = [f'load("{BUILTINS}", "analyze")', f'load("{rule.load}", rule_fn = "{rule.name}")']
        lines += [
            f'load("{GENERATED}analysis:{d}", d{i} = "providers")'
            for i, d in enumerate(unique_deps)
        ]
        dep_map = ", ".join(f'"{d}": d{i}' for i, d in enumerate(unique_deps))
        lines += [
            f"r = analyze(rule_fn, {_literal(target_json)}, {{{dep_map}}})",
            "providers = r.providers",
            "callbacks = r.callbacks",
            "summary = r.summary",
        ]
        try:
            (summary,) = self.modules.eval_generated(
                module_id, "\n".join(lines) + "\n", ["summary"]
            )
            self.graph.end_unit(unit)
        except (StarlarkFailure, GraphError) as err:
            raise BuildError(f"analysis of {label} failed:\n{err}") from None
        self._adopt_dynamics(unit, module_id)
        s = json.loads(str(summary))
        analysis = Analysis(
            module_id,
            [k for n in s["default_outputs"] for k in expand(n).inputs],
            [k for n in s["other_outputs"] for k in expand(n).inputs],
            {
                name: [k for n in nodes for k in expand(n).inputs]
                for name, nodes in s["sub_targets"].items()
            },
            s["run"],
        )
        self.analyses[label] = analysis
        return analysis

    def _check_visible(self, dep: Target, user: Label) -> None:
        if (dep.label.cell, dep.label.package) == (user.cell, user.package):
            return
        for pattern in dep.visibility:
            if pattern == "PUBLIC":
                return
            cell, rest = self.project._split_cell(pattern, dep.label.cell)
            if cell != user.cell:
                continue
            if rest.endswith("..."):
                base = rest[:-3].rstrip("/")
                if not base or user.package == base or user.package.startswith(base + "/"):
                    return
            elif rest in (f"{user.package}:", f"{user.package}:{user.name}"):
                return
        raise BuildError(f"{dep.label} is not visible to {user} (add it to `visibility`)")

    def _adopt_dynamics(self, unit: str, module_id: str) -> None:
        for dyn in self.graph.dynamics:
            if dyn.unit == unit:
                dyn.module = module_id

    def _run_dynamic(self, dyn: Dynamic) -> None:
        self._dynamic_runs += 1
        unit = f"{dyn.target}#dynamic{self._dynamic_runs}"
        self.graph.begin_unit(unit, dyn.target, self.graph.units[dyn.unit].output_dir)
        self.graph.promise(dyn, unit)
        values: dict[str, str | None] = {}
        for key in dyn.dynamic:
            path = self.store.path(key)
            values[key] = None if path.is_dir() else path.read_text()
        info = json.dumps({"unit": unit, "values": values})
        module_id = f"{GENERATED}dynamic:{unit}"
        source = (
            "\n".join(
                [
                    f'load("{BUILTINS}", "run_dynamic")',
                    f'load("{dyn.module}", parent = "callbacks")',
                    f"r = run_dynamic(parent[{dyn.index}], {_literal(info)})",
                    "callbacks = r.callbacks",
                ]
            )
            + "\n"
        )
        try:
            self.modules.eval_generated(module_id, source, [])
            self.graph.end_unit(unit)
        except (StarlarkFailure, GraphError) as err:
            raise BuildError(f"dynamic_output callback of {dyn.target} failed:\n{err}") from None
        self._adopt_dynamics(unit, module_id)

    # --- building ---------------------------------------------------------------------

    def build(self, patterns: list[str]) -> BuildResult:
        labels = self.resolve(patterns)
        for label in labels:
            self.analyze(label)
        keys: list[str] = []
        for label in labels:
            a = self.analyses[label]
            keys += a.default_outputs + a.other_outputs
            if a.run is not None:
                keys += expand(a.run).inputs
        return self.build_keys(labels, keys)

    def build_keys(self, labels: list[Label], keys: list[str]) -> BuildResult:
        try:
            self.executor.build(list(dict.fromkeys(keys)), self._run_dynamic)
        except ActionFailed as err:
            raise BuildError(str(err)) from None
        except GraphError as err:
            raise BuildError(f"build failed: {err}") from None
        return BuildResult(self, labels, [a for a in self.graph.actions if a.done])


def _literal(text: str) -> str:
    """`text` as a Starlark string literal."""
    return json.dumps(text, ensure_ascii=False)
