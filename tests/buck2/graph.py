"""The action graph and the rules Buck2 enforces while it is built.

Artifacts are identified by their project-relative path (`key`): a source file, a
declared output under `buck-out/v2/gen/CELL/PACKAGE/__NAME__/`, or a projection
(`KEY/sub/path`) into a declared directory. Each analysis unit (one rule analysis,
or one run of a dynamic_output callback) declares outputs and binds them to
actions. Enforced, as Buck2 does:

- every action has at least one output, a snake_case category, and a
  (category, identifier) pair unique within its target;
- an output is bound by exactly one action, in the unit that declared it; outputs
  promised to a dynamic_output are bound by its callback, through the `outputs`
  mapping it is given, and by nothing else;
- inputs declared in the same unit must already be bound;
- when a unit ends, every artifact it declared (or was promised) is bound.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from .cmdline import OutputRef, expand, render_json

_CATEGORY = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")
GEN = "buck-out/v2/gen"


class GraphError(ValueError):
    """A violation of Buck2's rules for declaring and binding artifacts."""


@dataclass
class Declared:
    """An output artifact: where it goes, who declared it, who may bind it, who did."""

    key: str
    short_path: str
    target: str
    unit: str
    is_dir: bool
    bindable_by: str
    producer: Action | Dynamic | None = None


@dataclass
class Action:
    """A recorded action. `inputs` are artifact keys; `argv`/`env` only for `run`."""

    id: int
    kind: str
    target: str
    unit: str
    category: str
    identifier: str | None
    outputs: list[OutputRef]
    inputs: list[str]
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    spec: dict[str, Any] = field(default_factory=dict)
    done: bool = False
    seconds: float = 0.0

    def describe(self) -> str:
        ident = f" {self.identifier}" if self.identifier is not None else ""
        return f"{self.target} ({self.category}{ident})"


@dataclass
class Dynamic:
    """A dynamic_output: callback `index` of the unit whose frozen module is `module`."""

    id: int
    target: str
    unit: str
    module: str
    index: int
    dynamic: list[str]
    outputs: list[str]
    done: bool = False
    callback_unit: str = ""

    def describe(self) -> str:
        return f"{self.target} (dynamic_output {self.index} of {self.unit})"


@dataclass
class Unit:
    key: str
    target: str
    output_dir: str
    declared: list[str] = field(default_factory=list)
    promised: list[str] = field(default_factory=list)
    action_ids: list[int] = field(default_factory=list)


class Graph:
    """Every unit, declared artifact and action of one harness run."""

    def __init__(self) -> None:
        self.units: dict[str, Unit] = {}
        self.declared: dict[str, Declared] = {}
        self.actions: list[Action] = []
        self.dynamics: list[Dynamic] = []
        self._names: dict[tuple[str, str, str | None], Action] = {}
        self._paths_by_target: dict[str, set[str]] = {}

    # --- units ----------------------------------------------------------------

    def begin_unit(self, key: str, target: str, output_dir: str) -> Unit:
        if key in self.units:
            raise GraphError(f"analysis unit {key} started twice")
        unit = Unit(key, target, output_dir)
        self.units[key] = unit
        return unit

    def end_unit(self, key: str) -> None:
        """Check that the unit bound everything it declared and everything it was promised."""
        unit = self.units[key]
        for k in unit.declared:
            decl = self.declared[k]
            if decl.producer is None and decl.bindable_by == key:
                raise GraphError(
                    f"{unit.target}: output `{decl.short_path}` was declared"
                    " but never bound to an action"
                )
        for k in unit.promised:
            decl = self.declared[k]
            if isinstance(decl.producer, Dynamic):
                raise GraphError(
                    f"{unit.target}: the dynamic_output callback did not bind"
                    f" its output `{decl.short_path}`"
                )

    # --- artifacts --------------------------------------------------------------

    def declare(self, unit_key: str, path: str, is_dir: bool) -> str:
        unit = self.units[unit_key]
        check_relpath(path)
        paths = self._paths_by_target.setdefault(unit.target, set())
        if path in paths:
            raise GraphError(f"{unit.target}: output `{path}` is already declared")
        for other in paths:
            if other.startswith(path + "/") or path.startswith(other + "/"):
                raise GraphError(
                    f"{unit.target}: output `{path}` overlaps the declared output `{other}`"
                )
        paths.add(path)
        key = f"{unit.output_dir}/{path}"
        self.declared[key] = Declared(key, path, unit.target, unit_key, is_dir, unit_key)
        unit.declared.append(key)
        return key

    def owner(self, key: str) -> tuple[Declared | None, str]:
        """The declared artifact holding `key` and the path inside it ("" for itself).

        `(None, "")` for a source file.
        """
        if not key.startswith(GEN + "/"):
            return None, ""
        probe = key
        while probe:
            if probe in self.declared:
                return self.declared[probe], key[len(probe) + 1 :]
            probe = probe.rsplit("/", 1)[0] if "/" in probe else ""
        raise GraphError(f"artifact `{key}` was never declared")

    # --- actions ----------------------------------------------------------------

    def add(self, unit_key: str, spec: dict[str, Any]) -> Action | Dynamic:
        unit = self.units[unit_key]
        kind = spec["kind"]
        category, identifier = spec["category"], spec.get("identifier")
        if kind == "run" and not _CATEGORY.fullmatch(category):
            raise GraphError(
                f"action category `{category}` must be snake_case (e.g. `cxx_compile`)"
            )
        if identifier is not None and not isinstance(identifier, str):
            raise GraphError("action identifier must be a string")
        outputs, inputs, argv, env = self._parse(kind, spec)
        if not outputs:
            raise GraphError(
                f"{unit.target}: action `{category}` has no outputs (every action needs one)"
            )
        for ref in outputs:
            self._check_bindable(unit, ref)
        for key in inputs:
            decl, _ = self.owner(key)
            if decl is not None and decl.unit == unit_key and decl.producer is None:
                raise GraphError(
                    f"{unit.target}: `{decl.short_path}` is used as an input"
                    " before an action binds it"
                )
        name = (unit.target, category, identifier)
        if name in self._names and kind != "dynamic":
            raise GraphError(
                f"{unit.target}: two actions with category `{category}`"
                f" and identifier `{identifier}`"
                " (Buck2 requires the pair to be unique within a target)"
            )
        node: Action | Dynamic
        if kind == "dynamic":
            node = Dynamic(
                len(self.dynamics),
                unit.target,
                unit_key,
                "",
                spec["index"],
                inputs,
                [r.key for r in outputs],
            )
            self.dynamics.append(node)
        else:
            node = Action(
                len(self.actions),
                kind,
                unit.target,
                unit_key,
                category,
                identifier,
                outputs,
                inputs,
                argv,
                env,
                spec,
            )
            self.actions.append(node)
            self._names[name] = node
            unit.action_ids.append(node.id)
        for ref in outputs:
            self.declared[ref.key].producer = node
        return node

    def _check_bindable(self, unit: Unit, ref: OutputRef) -> None:
        decl = self.declared.get(ref.key)
        if decl is None:
            raise GraphError(
                f"{unit.target}: `{ref.key}` is not a declared output (projections cannot be bound)"
            )
        if ref.unit != unit.key or decl.bindable_by != unit.key:
            if decl.bindable_by != unit.key and isinstance(decl.producer, Dynamic):
                raise GraphError(
                    f"{unit.target}: output `{decl.short_path}` is promised to a"
                    " dynamic_output; only its callback may bind it"
                )
            raise GraphError(
                f"{unit.target}: output `{decl.short_path}` was declared by another analysis"
                f" ({decl.unit}); a dynamic_output callback must bind it through its"
                " `outputs` argument"
            )
        if decl.producer is not None and not (
            isinstance(decl.producer, Dynamic) and ref.key in unit.promised
        ):
            raise GraphError(
                f"{unit.target}: output `{decl.short_path}` is already bound by"
                f" {decl.producer.describe()}"
            )
        if decl.is_dir != ref.is_dir:
            raise GraphError(
                f"{unit.target}: output `{decl.short_path}` bound as the wrong kind (file vs dir)"
            )

    @staticmethod
    def _parse(
        kind: str, spec: dict[str, Any]
    ) -> tuple[list[OutputRef], list[str], list[str], dict[str, str]]:
        if kind == "run":
            exp = expand(spec["cmd"])
            env: dict[str, str] = {}
            inputs, outputs = list(exp.inputs), list(exp.outputs)
            for name, node in spec["env"].items():
                e = expand(node)
                env[name] = " ".join(e.argv)
                inputs += [k for k in e.inputs if k not in inputs]
                outputs += e.outputs
            return outputs, inputs, exp.argv, env
        if kind in ("write", "write_json"):
            # Writing a path does not read the file: Buck2's write actions have no inputs.
            if kind == "write_json":
                render_json(spec["content"], [])  # checks the markers
            return expand(spec["out"]).outputs, [], [], {}
        if kind == "copy":
            return expand(spec["out"]).outputs, expand(spec["src"]).inputs, [], {}
        if kind in ("symlinked_dir", "copied_dir"):
            srcs = [k for node in spec["srcs"].values() for k in expand(node).inputs]
            return expand(spec["out"]).outputs, srcs, [], {}
        if kind == "dynamic":
            dyn = [k for node in spec["dynamic"] for k in expand(node).inputs]
            outs = [r for node in spec["outputs"] for r in expand(node).outputs]
            return outs, dyn, [], {}
        raise GraphError(f"unknown action kind {kind}")

    def promise(self, dyn: Dynamic, callback_unit: str) -> None:
        """Let `callback_unit` (the run of `dyn`'s callback) bind `dyn`'s outputs."""
        unit = self.units[callback_unit]
        for key in dyn.outputs:
            self.declared[key].bindable_by = callback_unit
            unit.promised.append(key)
        dyn.callback_unit = callback_unit


def check_relpath(path: str) -> None:
    """A declared or projected path: relative, normalised, no `..`."""
    if (
        not path
        or path.startswith("/")
        or os.path.normpath(path) != path
        or path.split("/")[0] == ".."
    ):
        raise GraphError(f"`{path}` must be a normalised relative path without `..`")
