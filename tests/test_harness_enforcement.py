"""The harness enforces what Buck2 enforces, so rules cannot pass here and fail there.

Each test builds a tiny project whose rules break one rule of Buck2's, and checks
the build fails naming the problem (and, for Starlark errors, the file and line);
each has a passing twin, so the failure is the rule's and not the project's.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from buck2 import BuildError, BuildResult, Harness, Label

BUCKCONFIG = "[cells]\nroot = .\nprelude = prelude\n"


def project(tmp_path: Path, rules: str, buck: str, files: dict[str, str] | None = None) -> Path:
    root = tmp_path / "project"
    (root / "prelude").mkdir(parents=True)
    (root / ".buckconfig").write_text(BUCKCONFIG)
    (root / "prelude" / "prelude.bzl").write_text("")
    (root / "rules.bzl").write_text(textwrap.dedent(rules))
    (root / "pkg").mkdir()
    (root / "pkg" / "BUCK").write_text(textwrap.dedent(buck))
    for name, text in (files or {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def build(root: Path, *patterns: str, config: dict[str, str] | None = None) -> BuildResult:
    return Harness(root, root.parent / "out", config).build(list(patterns) or ["//pkg:"])


def fails(root: Path, *patterns: str) -> str:
    with pytest.raises(BuildError) as err:
        build(root, *patterns)
    return str(err.value)


def line_of(root: Path, file: str, needle: str) -> int:
    lines = (root / file).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if needle in line)


WRITE_TWICE = """
def _impl(ctx: AnalysisContext) -> list[Provider]:
    out = ctx.actions.declare_output("out.txt")
    ctx.actions.write(out, "first")
    if ctx.attrs.twice:
        cmd = cmd_args("sh", "-c", "echo second > $1", "--", out.as_output())
        ctx.actions.run(cmd, category = "again")
    return [DefaultInfo(default_output = out)]

twice = rule(impl = _impl, attrs = {"twice": attrs.bool()})
"""


def test_output_bound_by_two_actions_fails_at_the_second(tmp_path: Path) -> None:
    root = project(
        tmp_path, WRITE_TWICE, 'load("//:rules.bzl", "twice")\ntwice(name = "t", twice = True)\n'
    )
    message = fails(root)
    assert "`out.txt` is already bound by root//pkg:t (write out.txt)" in message
    line = line_of(root, "rules.bzl", 'category = "again"')
    assert f"rules.bzl:{line}" in message


def test_output_bound_once_builds(tmp_path: Path) -> None:
    root = project(
        tmp_path, WRITE_TWICE, 'load("//:rules.bzl", "twice")\ntwice(name = "t", twice = False)\n'
    )
    result = build(root)
    assert result.outputs(Label("root", "pkg", "t"))[0].read_text() == "first"


UNBOUND = """
def _impl(ctx: AnalysisContext) -> list[Provider]:
    out = ctx.actions.declare_output("out.txt")
    extra = ctx.actions.declare_output("forgotten.txt")
    ctx.actions.write(out, "x")
    if ctx.attrs.bind:
        ctx.actions.write(extra, "y")
    return [DefaultInfo(default_output = out)]

maybe = rule(impl = _impl, attrs = {"bind": attrs.bool()})
"""


@pytest.mark.parametrize("bind", [False, True])
def test_declared_output_left_unbound_fails_the_analysis(tmp_path: Path, bind: bool) -> None:
    buck = f'load("//:rules.bzl", "maybe")\nmaybe(name = "m", bind = {bind})\n'
    root = project(tmp_path, UNBOUND, buck)
    if bind:
        build(root)
    else:
        assert "`forgotten.txt` was declared but never bound to an action" in fails(root)


READER = """
def _impl(ctx: AnalysisContext) -> list[Provider]:
    out = ctx.actions.declare_output("copy.txt")
    script = 'cat pkg/data.txt > "$1"'
    cmd = cmd_args("sh", "-c", script, "--", out.as_output(), hidden = ctx.attrs.srcs)
    ctx.actions.run(cmd, category = "read")
    return [DefaultInfo(default_output = out)]

reader = rule(impl = _impl, attrs = {"srcs": attrs.list(attrs.source())})
"""


@pytest.mark.parametrize("declared", [False, True])
def test_action_reading_an_undeclared_file_fails_in_its_scratch_directory(
    tmp_path: Path, declared: bool
) -> None:
    srcs = '["data.txt"]' if declared else "[]"
    buck = f'load("//:rules.bzl", "reader")\nreader(name = "r", srcs = {srcs})\n'
    root = project(tmp_path, READER, buck, {"pkg/data.txt": "payload\n"})
    if declared:
        assert build(root).outputs(Label("root", "pkg", "r"))[0].read_text() == "payload\n"
    else:
        message = fails(root)
        assert "root//pkg:r (read) failed: exit status 1" in message
        assert "pkg/data.txt: No such file or directory" in message


def test_action_that_does_not_write_its_declared_output_fails(tmp_path: Path) -> None:
    rules = """
    def _impl(ctx: AnalysisContext) -> list[Provider]:
        out = ctx.actions.declare_output("never.txt")
        ctx.actions.run(cmd_args("true", hidden = [out.as_output()]), category = "lazy")
        return [DefaultInfo(default_output = out)]

    lazy = rule(impl = _impl, attrs = {})
    """
    root = project(tmp_path, rules, 'load("//:rules.bzl", "lazy")\nlazy(name = "l")\n')
    assert "did not produce its declared output" in fails(root)


DYNAMIC = """
def _impl(ctx: AnalysisContext) -> list[Provider]:
    listing = ctx.actions.write("listing.txt", "a\\nb\\n")
    out = ctx.actions.declare_output("out.txt")
    other = ctx.actions.write("other.txt", "bound outside")
    mode = ctx.attrs.mode
    seen = []

    def f(ctx: AnalysisContext, artifacts, outputs):
        names = artifacts[listing].read_lines()
        if mode == "captured":
            ctx.actions.write(out.as_output(), "x")
        elif mode == "not_given":
            ctx.actions.write(outputs[out], "x")
            ctx.actions.write(other.as_output(), "y")
        elif mode == "forget":
            ctx.actions.write(ctx.actions.declare_output("unrelated.txt"), "z")
        elif mode == "mutate":
            seen.append(names)
        elif mode == "read_undeclared":
            artifacts[other].read_string()
        else:
            ctx.actions.write(outputs[out], cmd_args(names + ["done"]))

    ctx.actions.dynamic_output(dynamic = [listing], outputs = [out.as_output()], f = f)
    return [DefaultInfo(default_output = out, other_outputs = [other])]

dyn = rule(impl = _impl, attrs = {"mode": attrs.string()})
"""


def dynamic_project(tmp_path: Path, mode: str) -> Path:
    return project(
        tmp_path, DYNAMIC, f'load("//:rules.bzl", "dyn")\ndyn(name = "d", mode = "{mode}")\n'
    )


def test_dynamic_callback_binding_through_outputs_builds(tmp_path: Path) -> None:
    root = dynamic_project(tmp_path, "ok")
    assert build(root).outputs(Label("root", "pkg", "d"))[0].read_text() == "a\nb\ndone"


@pytest.mark.parametrize(
    ("mode", "problem", "needle"),
    [
        (
            "captured",
            "must bind it through its `outputs` argument",
            "ctx.actions.write(out.as_output()",
        ),
        (
            "not_given",
            "`other.txt` was declared by another analysis",
            "ctx.actions.write(other.as_output()",
        ),
        ("mutate", "Immutable", "seen.append(names)"),
        ("read_undeclared", "not found", "artifacts[other].read_string()"),
    ],
)
def test_dynamic_callback_breaking_buck2s_rules_fails_at_the_line(
    tmp_path: Path, mode: str, problem: str, needle: str
) -> None:
    root = dynamic_project(tmp_path, mode)
    message = fails(root)
    assert problem in message
    assert f"rules.bzl:{line_of(root, 'rules.bzl', needle)}" in message


def test_dynamic_callback_that_does_not_bind_its_output_fails(tmp_path: Path) -> None:
    message = fails(dynamic_project(tmp_path, "forget"))
    assert "the dynamic_output callback did not bind its output `out.txt`" in message


PROVIDERS = """
Info = provider(fields = {"items": provider_field(list[int])})

def _lib(ctx: AnalysisContext) -> list[Provider]:
    return [DefaultInfo(), Info(items = [1, 2])]

def _bin(ctx: AnalysisContext) -> list[Provider]:
    items = ctx.attrs.dep[Info].items
    if ctx.attrs.mutate:
        items.append(3)
    out = ctx.actions.write("items.txt", cmd_args([str(i) for i in items]))
    return [DefaultInfo(default_output = out)]

lib = rule(impl = _lib, attrs = {})
bin = rule(impl = _bin, attrs = {"dep": attrs.dep(providers = [Info]), "mutate": attrs.bool()})

def takes_info(x: Info) -> int:
    return len(x.items)
"""


@pytest.mark.parametrize("mutate", [False, True])
def test_providers_from_a_dependency_are_frozen(tmp_path: Path, mutate: bool) -> None:
    buck = (
        'load("//:rules.bzl", "lib", "bin")\nlib(name = "l")\n'
        f'bin(name = "b", dep = ":l", mutate = {mutate})\n'
    )
    root = project(tmp_path, PROVIDERS, buck)
    if not mutate:
        assert build(root, "//pkg:b").outputs(Label("root", "pkg", "b"))[0].read_text() == "1\n2"
        return
    message = fails(root, "//pkg:b")
    assert "Immutable" in message
    assert f"rules.bzl:{line_of(root, 'rules.bzl', 'items.append(3)')}" in message


def test_type_error_names_the_file_and_line(tmp_path: Path) -> None:
    rules = (
        PROVIDERS
        + """
def _typed(ctx: AnalysisContext) -> list[Provider]:
    takes_info(DefaultInfo())
    return [DefaultInfo()]

typed = rule(impl = _typed, attrs = {})
"""
    )
    root = project(tmp_path, rules, 'load("//:rules.bzl", "typed")\ntyped(name = "t")\n')
    message = fails(root)
    assert "does not match the type annotation `Info` for argument `x`" in message
    assert f"rules.bzl:{line_of(root, 'rules.bzl', 'takes_info(DefaultInfo())')}" in message


def test_fail_names_the_file_and_line(tmp_path: Path) -> None:
    rules = """
    def _impl(ctx: AnalysisContext) -> list[Provider]:
        fail("no way:", ctx.attrs.why)

    nope = rule(impl = _impl, attrs = {"why": attrs.string()})
    """
    root = project(
        tmp_path, rules, 'load("//:rules.bzl", "nope")\nnope(name = "n", why = "because")\n'
    )
    message = fails(root)
    assert "fail: no way: because" in message
    assert f"rules.bzl:{line_of(root, 'rules.bzl', 'fail(')}" in message


def test_attribute_of_the_wrong_type_fails_at_the_buck_file_line(tmp_path: Path) -> None:
    buck = 'load("//:rules.bzl", "twice")\n\ntwice(\n    name = "t",\n    twice = "yes",\n)\n'
    root = project(tmp_path, WRITE_TWICE, buck)
    message = fails(root)
    assert "attribute `twice`: expected a bool, got string `yes`" in message
    assert "pkg/BUCK:3" in message


def test_unknown_attribute_fails_naming_the_known_ones(tmp_path: Path) -> None:
    root = project(
        tmp_path, WRITE_TWICE, 'load("//:rules.bzl", "twice")\ntwice(name = "t", thrice = 1)\n'
    )
    assert "unknown attribute `thrice` (the rule has: twice)" in fails(root)


SAME_NAME = """
def _impl(ctx: AnalysisContext) -> list[Provider]:
    a = ctx.actions.declare_output("a.txt")
    b = ctx.actions.declare_output("b.txt")
    ctx.actions.run(cmd_args("touch", a.as_output()), category = "touch", identifier = "x")
    second = ctx.attrs.second
    ctx.actions.run(cmd_args("touch", b.as_output()), category = "touch", identifier = second)
    return [DefaultInfo(default_outputs = [a, b])]

touch = rule(impl = _impl, attrs = {"second": attrs.string()})
"""


@pytest.mark.parametrize("second", ["x", "y"])
def test_category_and_identifier_must_be_unique_in_a_target(tmp_path: Path, second: str) -> None:
    root = project(
        tmp_path,
        SAME_NAME,
        f'load("//:rules.bzl", "touch")\ntouch(name = "t", second = "{second}")\n',
    )
    if second == "y":
        build(root)
    else:
        assert "two actions with category `touch` and identifier `x`" in fails(root)


def test_dependency_must_be_visible(tmp_path: Path) -> None:
    root = project(tmp_path, PROVIDERS, 'load("//:rules.bzl", "lib")\nlib(name = "l")\n')
    (root / "other").mkdir()
    (root / "other" / "BUCK").write_text(
        'load("//:rules.bzl", "bin")\nbin(name = "b", dep = "//pkg:l", mutate = False)\n'
    )
    assert "root//pkg:l is not visible to root//other:b" in fails(root, "//other:b")
    (root / "pkg" / "BUCK").write_text(
        'load("//:rules.bzl", "lib")\nlib(name = "l", visibility = ["PUBLIC"])\n'
    )
    build(root, "//other:b")


def test_missing_source_file_fails_at_the_buck_file_line(tmp_path: Path) -> None:
    root = project(
        tmp_path,
        READER,
        'load("//:rules.bzl", "reader")\nreader(name = "r", srcs = ["nope.txt"])\n',
    )
    message = fails(root)
    assert "source file `nope.txt` does not exist in package root//pkg" in message
    assert "pkg/BUCK:2" in message


def test_rules_cannot_load_the_harness_internals(tmp_path: Path) -> None:
    rules = 'load("@buck2_builtins", "run_dynamic")\n' + WRITE_TWICE
    root = project(
        tmp_path, rules, 'load("//:rules.bzl", "twice")\ntwice(name = "t", twice = False)\n'
    )
    assert "not a loadable Buck2 module" in fails(root)


def test_config_comes_from_buckconfig_local_and_overrides(tmp_path: Path) -> None:
    rules = """
    def _impl(ctx: AnalysisContext) -> list[Provider]:
        return [DefaultInfo(default_output = ctx.actions.write("v.txt", ctx.attrs.value))]

    show = rule(impl = _impl, attrs = {"value": attrs.string()})
    """
    buck = (
        'load("//:rules.bzl", "show")\n'
        'show(name = "s", value = read_config("demo", "value", "default"))\n'
    )
    root = project(tmp_path, rules, buck)
    label = Label("root", "pkg", "s")
    assert build(root).outputs(label)[0].read_text() == "default"
    (root / ".buckconfig.local").write_text("[demo]\nvalue = local\n")
    assert build(root).outputs(label)[0].read_text() == "local"
    result = Harness(root, root.parent / "out2", {"demo.value": "cli"}).build(["//pkg:s"])
    assert result.outputs(label)[0].read_text() == "cli"


def test_error_output_never_shows_a_python_traceback(tmp_path: Path) -> None:
    root = dynamic_project(tmp_path, "captured")
    message = fails(root)
    assert 'Traceback (most recent call last):\n  File "' not in message
    assert re.search(r"\* rules\.bzl:\d+, in f", message)


ORDER = """
def _impl(ctx: AnalysisContext) -> list[Provider]:
    first = ctx.actions.declare_output("first.txt")
    second = ctx.actions.declare_output("second.txt")
    if ctx.attrs.bind_first_early:
        ctx.actions.write(first, "1")
    ctx.actions.run(cmd_args("cp", first, second.as_output()), category = ctx.attrs.category)
    if not ctx.attrs.bind_first_early:
        ctx.actions.write(first, "1")
    return [DefaultInfo(default_output = second)]

order = rule(impl = _impl, attrs = {"bind_first_early": attrs.bool(), "category": attrs.string()})
"""


@pytest.mark.parametrize(
    ("early", "category", "problem"),
    [
        (True, "copy_it", None),
        (False, "copy_it", "`first.txt` is used as an input before an action binds it"),
        (True, "CopyIt", "action category `CopyIt` must be snake_case"),
    ],
)
def test_inputs_must_be_bound_first_and_categories_snake_case(
    tmp_path: Path, early: bool, category: str, problem: str | None
) -> None:
    buck = (
        'load("//:rules.bzl", "order")\n'
        f'order(name = "o", bind_first_early = {early}, category = "{category}")\n'
    )
    root = project(tmp_path, ORDER, buck)
    if problem is None:
        assert build(root).outputs(Label("root", "pkg", "o"))[0].read_text() == "1"
    else:
        assert problem in fails(root)


def test_action_writing_a_file_where_a_directory_was_declared_fails(tmp_path: Path) -> None:
    rules = """
    def _impl(ctx: AnalysisContext) -> list[Provider]:
        out = ctx.actions.declare_output("tree", dir = ctx.attrs.dir)
        ctx.actions.run(cmd_args("touch", out.as_output()), category = "touch")
        return [DefaultInfo(default_output = out)]

    tree = rule(impl = _impl, attrs = {"dir": attrs.bool()})
    """
    root = project(tmp_path, rules, 'load("//:rules.bzl", "tree")\ntree(name = "t", dir = True)\n')
    assert "declared output `buck-out/v2/gen/root/pkg/__t__/tree` should be a directory" in fails(
        root
    )
    (root / "pkg" / "BUCK").write_text(
        'load("//:rules.bzl", "tree")\ntree(name = "t", dir = False)\n'
    )
    build(root)
