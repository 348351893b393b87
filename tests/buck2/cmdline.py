"""Expanding the command-line trees that api.bzl sends for `cmd_args` values.

A node is a string (one argument), `{"a": KEY, "dir": bool}` (an input artifact,
rendered as its project-relative path), `{"o": KEY, "dir": bool, "unit": UNIT}` (an
output artifact) or `{"c": [node], "h": [node], OPTIONS}` for a `cmd_args` (or a
list, which has no `h` or options). OPTIONS follow Buck2's `cmd_args`: `format`
replaces `{}` in the format string with each argument, `quote: "shell"` shell-quotes
each, `delimiter` joins them all into one argument, `prepend` puts a separate argument
before each, `ignore_artifacts` keeps paths but drops the dependencies. Options apply
to everything nested inside, innermost first.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class OutputRef:
    """An artifact an action promises to write, and the analysis unit that bound it."""

    key: str
    is_dir: bool
    unit: str


@dataclass
class Expanded:
    """A command line with the artifacts it reads and writes, in first-seen order."""

    argv: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    outputs: list[OutputRef] = field(default_factory=list)


def expand(node: Any) -> Expanded:
    """Expand `node` into arguments, input keys and outputs."""
    out = Expanded()
    seen_inputs: set[str] = set()
    out.argv = _args(node, out, seen_inputs, ignore=False)
    return out


def _args(node: Any, out: Expanded, seen: set[str], *, ignore: bool) -> list[str]:
    if isinstance(node, str):
        return [node]
    if not isinstance(node, dict):
        raise TypeError(f"not a command-line node: {node!r}")
    if "a" in node:
        if not ignore and node["a"] not in seen:
            seen.add(node["a"])
            out.inputs.append(node["a"])
        return [node["a"]]
    if "o" in node:
        out.outputs.append(OutputRef(node["o"], bool(node.get("dir")), node.get("unit", "")))
        return [node["o"]]
    ignore = ignore or bool(node.get("ignore_artifacts"))
    items: list[str] = []
    for child in node.get("c", []):
        items.extend(_args(child, out, seen, ignore=ignore))
    for hidden in node.get("h", []):
        _args(hidden, out, seen, ignore=ignore)
    return apply_options(items, node)


def apply_options(items: list[str], opts: dict[str, Any]) -> list[str]:
    """Buck2's per-`cmd_args` formatting, in its order: format, quote, delimiter, prepend."""
    fmt = opts.get("format")
    if fmt is not None:
        items = [fmt.replace("{}", item) for item in items]
    if opts.get("quote") == "shell":
        items = [shlex.quote(item) for item in items]
    delimiter = opts.get("delimiter")
    if delimiter is not None and items:
        items = [delimiter.join(items)]
    prepend = opts.get("prepend")
    if prepend is not None:
        items = [x for item in items for x in (prepend, item)]
    return items


def render_content(node: Any) -> str:
    """The text `ctx.actions.write` writes: a string as is, a command line one argument a line."""
    if isinstance(node, str):
        return node
    return "\n".join(expand(node).argv)


def render_json(value: Any, inputs: list[str]) -> Any:
    """Replace write_json's artifact/command-line markers by their paths, collecting inputs."""
    if isinstance(value, dict):
        if set(value) == {"\u0000cmd"}:
            exp = expand(value["\u0000cmd"])
            inputs.extend(exp.inputs)
            inner = value["\u0000cmd"]
            single = isinstance(inner, dict) and ("a" in inner or "o" in inner)
            return exp.argv[0] if single else exp.argv
        return {k: render_json(v, inputs) for k, v in value.items()}
    if isinstance(value, list):
        return [render_json(v, inputs) for v in value]
    return value
