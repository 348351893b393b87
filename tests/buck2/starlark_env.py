"""Evaluating `.bzl` and `BUCK` files with starlark-rust in Buck2's dialect.

Every file gets the Buck2 builtins through a preamble (`load` of the names api.bzl
exports) evaluated into its module before the file itself, so the builtins and the
types they define come from one frozen module, as in Buck2 (a type from a second
evaluation would not match). BUCK files also see the names `prelude//prelude.bzl`
defines, as Buck2 gives them. Type annotations are checked at run time.

Rules are found by name: Buck2 requires a rule to be assigned to a top-level name,
and the harness relies on it (`NAME = rule(...)`), to load the rule again when it
analyses a target.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import starlark as sl

from .project import Project, ProjectError

BUILTINS = "@buck2_builtins"
GENERATED = "@harness//"
API_FILE = Path(__file__).with_name("api.bzl")

PUBLIC_BUILTINS = [
    "Artifact",
    "OutputArtifact",
    "AnalysisActions",
    "AnalysisContext",
    "ArtifactValue",
    "Dependency",
    "Label",
    "Provider",
    "DefaultInfo",
    "RunInfo",
    "attrs",
    "cmd_args",
    "glob",
    "package_name",
    "provider",
    "provider_field",
    "read_config",
    "read_root_config",
    "rule",
]
"""The Buck2 globals api.bzl implements, visible to every .bzl and BUCK file."""

_RULE_ASSIGN = re.compile(r"^([A-Za-z_]\w*)\s*=\s*rule\s*\(", re.M)
_TOP_NAME = re.compile(r"^(?:def\s+([A-Za-z]\w*)\s*\(|([A-Za-z]\w*)\s*=(?!=))", re.M)


class StarlarkFailure(Exception):
    """A Starlark error (traceback with file:line included) or a loading error."""


def dialect() -> sl.Dialect:
    d = sl.Dialect.extended()
    d.enable_f_strings = True
    d.enable_positional_only_arguments = True
    d.enable_keyword_only_arguments = True
    d.enable_types = sl.DialectTypes.ENABLE
    d.enable_load_reexport = False
    return d


def globals_() -> sl.Globals:
    ext = sl.LibraryExtension
    return sl.Globals.extended_by(
        [
            ext.StructType,
            ext.RecordType,
            ext.EnumType,
            ext.Typing,
            ext.Json,
            ext.Map,
            ext.Filter,
            ext.Partial,
            ext.Print,
            ext.CallStack,
        ]
    )


@dataclass(frozen=True)
class RuleRef:
    """Where a rule lives: the load path of its file and its top-level name."""

    load: str
    name: str


class Modules:
    """Loads, evaluates and caches every module of one harness run."""

    def __init__(self, project: Project, hooks: dict[str, Callable[..., object]]) -> None:
        self.project = project
        self.dialect = dialect()
        self.globals = globals_()
        self.loader = sl.FileLoader(self._load)
        self.frozen: dict[str, sl.FrozenModule] = {}
        self.rules: dict[int, RuleRef] = {}
        self._stack: list[str] = []
        self._privileged = False
        self._rules_created: list[int] = []
        self._next_rule_id = 0
        builtins = sl.Module()
        for name, fn in hooks.items():
            builtins.add_callable(name, fn)
        self._eval(builtins, "tests/buck2/api.bzl", API_FILE.read_text(), privileged=True)
        self.frozen[BUILTINS] = builtins.freeze()
        self._prelude_names = self._implicit_prelude_names()

    # --- loading ------------------------------------------------------------

    @property
    def current_file(self) -> str:
        return self._stack[-1] if self._stack else ""

    def _load(self, module_id: str) -> sl.FrozenModule:
        if module_id == BUILTINS or module_id.startswith(GENERATED):
            if not self._privileged:
                raise StarlarkFailure(f"load(`{module_id}`): not a loadable Buck2 module")
            return self.frozen[module_id]
        cell, package = self.project.cell_of(
            self.current_file.rsplit("/", 1)[0] if "/" in self.current_file else ""
        )
        try:
            path = self.project.load_path(module_id, cell, package)
        except ProjectError as err:
            raise StarlarkFailure(str(err)) from None
        return self.load_bzl(path)

    def load_path_of(self, path: str) -> str:
        """The absolute load path (`cell//dir/file.bzl`) of a project-relative file."""
        cell, rel = self.project.cell_of(path)
        return f"{cell}//{rel}"

    def load_bzl(self, path: str) -> sl.FrozenModule:
        if path in self.frozen:
            return self.frozen[path]
        if path in self._stack:
            raise StarlarkFailure(f"load cycle: {' -> '.join([*self._stack, path])}")
        file = self.project.root / path
        if not file.is_file():
            raise StarlarkFailure(f"load: {path}: no such file")
        source = file.read_text()
        module = sl.Module()
        outer_rules = self._rules_created
        self._rules_created = []
        try:
            self._eval_preamble(module, path, [])
            self._eval(module, path, source)
            names = _RULE_ASSIGN.findall(source)
            if len(names) != len(self._rules_created):
                raise StarlarkFailure(
                    f"{path}: every rule() must be assigned to its own top-level name"
                    " (`NAME = rule(...)`)"
                )
            for rule_id, name in zip(self._rules_created, names, strict=True):
                self.rules[rule_id] = RuleRef(self.load_path_of(path), name)
        finally:
            self._rules_created = outer_rules
        self.frozen[path] = module.freeze()
        return self.frozen[path]

    def note_rule_created(self) -> tuple[int, str]:
        """Called by `rule()`: a new rule id, and the cell of the file defining it."""
        rule_id = self._next_rule_id
        self._next_rule_id += 1
        self._rules_created.append(rule_id)
        cell, _ = self.project.cell_of(self.current_file)
        return rule_id, cell

    # --- evaluation -----------------------------------------------------------

    def _eval(self, module: sl.Module, name: str, source: str, *, privileged: bool = False) -> None:
        self._stack.append(name)
        saved = self._privileged
        self._privileged = privileged
        try:
            ast = sl.parse(name, source, self.dialect)
            sl.eval(module, ast, self.globals, self.loader)
        except sl.StarlarkError as err:
            raise StarlarkFailure(str(err)) from None
        finally:
            self._privileged = saved
            self._stack.pop()

    def _eval_preamble(self, module: sl.Module, path: str, extra: list[str]) -> None:
        names = ", ".join(f'"{n}"' for n in PUBLIC_BUILTINS)
        lines = [f'load("{BUILTINS}", {names})', *extra]
        self._stack.append(path)
        try:
            self._eval(module, f"<builtins for {path}>", "\n".join(lines) + "\n", privileged=True)
        finally:
            self._stack.pop()

    def _implicit_prelude_names(self) -> list[str]:
        cell_path = self.project.cells.get("prelude")
        if cell_path is None:
            return []
        file = self.project.root / cell_path / "prelude.bzl"
        if not file.is_file():
            return []
        found = {a or b for a, b in _TOP_NAME.findall(file.read_text())}
        return sorted(n for n in found if not n.startswith("_"))

    def eval_buck(self, path: str) -> None:
        """Evaluate a BUCK file; the rule calls in it register targets through the hooks."""
        module = sl.Module()
        extra = []
        if self._prelude_names:
            names = ", ".join(f'"{n}"' for n in self._prelude_names)
            extra.append(f'load("prelude//prelude.bzl", {names})')
        self._eval_preamble(module, path, extra)
        self._eval(module, path, (self.project.root / path).read_text())

    def eval_generated(self, module_id: str, source: str, read: list[str]) -> list[object]:
        """Evaluate generated code as module `module_id`, return the values of `read`, freeze."""
        module = sl.Module()
        self._eval(module, module_id, source, privileged=True)
        values = [module[name] for name in read]
        self.frozen[module_id] = module.freeze()
        return values
