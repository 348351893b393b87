# The Buck2 builtins our rules use, written in Starlark for the harness.
#
# Evaluated once per harness with Python hooks (`_py_*`, bound by harness.py) that
# keep the registries: targets, declared artifacts, bindings and actions. The hooks
# raise on anything Buck2 rejects, so the error carries the Starlark call stack of
# the rule code at fault (file:line). Values cross to Python as one JSON string.
#
# Nothing here may be more permissive than Buck2: a rule that works only under the
# harness is a harness bug.

# --- Artifacts ---------------------------------------------------------------

# An artifact: a source file or a declared output. `_key` is its project-relative
# path (its identity); `_unit` is the analysis unit (rule analysis or dynamic
# callback) allowed to bind it, "" for sources and projections.
Artifact = record(
    _key = str,
    _is_dir = bool,
    _unit = str,
    basename = str,
    extension = str,
    short_path = str,
    is_source = bool,
    as_output = typing.Callable,
    project = typing.Callable,
)

# An artifact marked as written by the action it is passed to.
OutputArtifact = record(
    _artifact = Artifact,
)

def _split_ext(basename: str) -> str:
    i = basename.rfind(".")
    return basename[i:] if i > 0 else ""

def _make_artifact(key: str, short_path: str, is_dir: bool, unit: str, is_source: bool) -> Artifact:
    cell = []
    basename = key.rsplit("/", 1)[-1]
    a = Artifact(
        _key = key,
        _is_dir = is_dir,
        _unit = unit,
        basename = basename,
        extension = _split_ext(basename),
        short_path = short_path,
        is_source = is_source,
        as_output = lambda: _as_output(cell[0]),
        project = lambda path, hide_prefix = False: _project(cell[0], path, hide_prefix),
    )
    cell.append(a)
    return a

def _as_output(a: Artifact) -> OutputArtifact:
    if a.is_source:
        fail("cannot use source artifact `{}` as an output".format(a._key))
    return OutputArtifact(_artifact = a)

def _project(a: Artifact, path: str, hide_prefix: bool) -> Artifact:
    _py_check_relpath(path)
    short = path if hide_prefix else a.short_path + "/" + path
    return _make_artifact(a._key + "/" + path, short, False, "", a.is_source)

def source_artifact(path: str, short_path: str) -> Artifact:
    return _make_artifact(path, short_path, False, "", True)

# --- Command lines -------------------------------------------------------------

# A mutable command line (frozen with its module, as in Buck2).
CmdArgs = record(
    _items = list,
    _hidden = list,
    _opts = dict,
    add = typing.Callable,
)

_CMD_OPTIONS = ["delimiter", "format", "prepend", "quote", "ignore_artifacts"]

def _check_arg(x, what: str):
    """Fail unless `x` can be part of a command line (checked when added, as Buck2 does)."""
    stack = [x]
    for _ in range(1000000):
        if not stack:
            return
        v = stack.pop()
        if type(v) == "string" or isinstance(v, Artifact) or isinstance(v, OutputArtifact) or isinstance(v, CmdArgs):
            continue
        if isinstance(v, RunInfo):
            continue
        if type(v) == "list" or type(v) == "tuple":
            stack.extend(v)
            continue
        fail("{}: a command line takes strings, artifacts, cmd_args, RunInfo and lists of those; got {} `{}`".format(what, type(v), v))

def cmd_args(
        *args,
        hidden = [],
        delimiter = None,
        format = None,
        prepend = None,
        quote = None,
        ignore_artifacts = False,
        absolute_prefix = None,
        absolute_suffix = None,
        parent = 0,
        relative_to = None,
        replace_regex = None):
    for name, v in [("absolute_prefix", absolute_prefix), ("absolute_suffix", absolute_suffix), ("relative_to", relative_to), ("replace_regex", replace_regex)]:
        if v != None:
            fail("cmd_args({}=...) is not implemented by the test harness".format(name))
    if parent != 0:
        fail("cmd_args(parent=...) is not implemented by the test harness")
    if format != None and type(format) != "string":
        fail("cmd_args(format=) must be a string")
    if quote != None and quote != "shell":
        fail("cmd_args(quote=) accepts only \"shell\", got `{}`".format(quote))
    _check_arg(list(args), "cmd_args()")
    _check_arg(hidden, "cmd_args(hidden=)")
    items = list(args)
    opts = {
        "delimiter": delimiter,
        "format": format,
        "prepend": prepend,
        "quote": quote,
        "ignore_artifacts": ignore_artifacts,
    }

    def add(*more):
        _check_arg(list(more), "cmd_args.add()")
        items.extend(more)
        return cmd

    cmd = CmdArgs(_items = items, _hidden = list(hidden) if type(hidden) == "list" else [hidden], _opts = opts, add = add)
    return cmd

def _node(x, unit: str):
    """The JSON tree of a command-line value (see harness/cmdline.py for the format)."""
    if type(x) == "string":
        return x
    if isinstance(x, Artifact):
        return {"a": x._key, "dir": x._is_dir}
    if isinstance(x, OutputArtifact):
        return {"o": x._artifact._key, "dir": x._artifact._is_dir, "unit": x._artifact._unit}
    if isinstance(x, RunInfo):
        return _node(x.args, unit)
    if type(x) == "list" or type(x) == "tuple":
        return {"c": [_node(v, unit) for v in x]}
    if isinstance(x, CmdArgs):
        n = {"c": [_node(v, unit) for v in x._items], "h": [_node(v, unit) for v in x._hidden]}
        for k in _CMD_OPTIONS:
            if x._opts[k]:
                n[k] = x._opts[k]
        return n
    fail("not a command-line value: {} `{}`".format(type(x), x))

# --- Providers -----------------------------------------------------------------

_NO_DEFAULT = struct(harness_no_default = True)

ProviderField = record(type = typing.Any, default = typing.Any)

def provider_field(ty, default = _NO_DEFAULT):
    return ProviderField(type = ty, default = default)

def provider(fields = [], doc = ""):
    """A provider type: a record type whose instances know their type (for `dep[Info]`)."""
    _ = doc
    cell = []
    spec = {}
    if type(fields) == "list":
        for f in fields:
            spec[f] = field(typing.Any, None)
    elif type(fields) == "dict":
        for f, pf in fields.items():
            if isinstance(pf, ProviderField):
                if type(pf.default) in ["list", "dict"]:
                    # The provider type is a dict key (`dep[Info]`), so its defaults must be hashable.
                    fail("provider field `{}`: the test harness needs a hashable default (use None)".format(f))
                spec[f] = field(pf.type) if pf.default == _NO_DEFAULT else field(pf.type, pf.default)
            else:
                spec[f] = field(pf)
    else:
        fail("provider(fields=) must be a list of names or a dict of provider_field()")
    ty = record(_provider = field(typing.Callable, lambda: cell[0]), **spec)
    cell.append(ty)
    return ty

DefaultInfo = provider(fields = {
    "default_output": provider_field(typing.Any, None),
    "default_outputs": provider_field(typing.Any, None),
    "other_outputs": provider_field(typing.Any, None),
    "sub_targets": provider_field(typing.Any, None),
})

RunInfo = provider(fields = {"args": provider_field(typing.Any, None)})

Provider = typing.Any
Dependency = dict[typing.Any, typing.Any]

def _is_provider(x) -> bool:
    return type(x) == "record" and hasattr(x, "_provider")

# --- Labels --------------------------------------------------------------------

Label = record(cell = str, package = str, name = str)

def _label_str(l: Label) -> str:
    return "{}//{}:{}".format(l.cell, l.package, l.name)

# --- Attributes ----------------------------------------------------------------

# An attribute type. `kind` is one of the constructors of `attrs` below.
Attr = record(
    kind = str,
    default = typing.Any,
    inner = list,
    values = list,
    providers = list,
)

def _attr(kind, default = _NO_DEFAULT, inner = [], values = [], providers = []):
    return Attr(kind = kind, default = default, inner = inner, values = values, providers = providers)

attrs = struct(
    string = lambda default = _NO_DEFAULT, doc = "": _attr("string", default),
    bool = lambda default = _NO_DEFAULT, doc = "": _attr("bool", default),
    int = lambda default = _NO_DEFAULT, doc = "": _attr("int", default),
    arg = lambda default = _NO_DEFAULT, doc = "": _attr("string", default),
    any = lambda default = _NO_DEFAULT, doc = "": _attr("any", default),
    source = lambda default = _NO_DEFAULT, doc = "", allow_directory = False: _attr("source", default),
    list = lambda inner, default = _NO_DEFAULT, doc = "": _attr("list", default, [inner]),
    dict = lambda key, value, default = _NO_DEFAULT, doc = "", sorted = False: _attr("dict", default, [key, value]),
    tuple = lambda *inner, default = _NO_DEFAULT, doc = "": _attr("tuple", default, list(inner)),
    one_of = lambda *inner, default = _NO_DEFAULT, doc = "": _attr("one_of", default, list(inner)),
    option = lambda inner, default = None, doc = "": _attr("option", default, [inner]),
    enum = lambda values, default = _NO_DEFAULT, doc = "": _attr("enum", default, [], list(values)),
    dep = lambda providers = [], default = _NO_DEFAULT, doc = "": _attr("dep", default, [], [], providers),
    exec_dep = lambda providers = [], default = _NO_DEFAULT, doc = "": _attr("dep", default, [], [], providers),
    toolchain_dep = lambda providers = [], default = _NO_DEFAULT, doc = "": _attr("toolchain_dep", default, [], [], providers),
)

def _coerce(a: Attr, v, where: str, cell: str):
    """Check a BUCK-file value against its attribute type; return (JSON value, error)."""
    k = a.kind
    if k == "any":
        return (v, "")
    if k == "string":
        return (v, "") if type(v) == "string" else (None, "{}: expected a string, got {} `{}`".format(where, type(v), v))
    if k == "bool":
        return (v, "") if type(v) == "bool" else (None, "{}: expected a bool, got {} `{}`".format(where, type(v), v))
    if k == "int":
        return (v, "") if type(v) == "int" else (None, "{}: expected an int, got {} `{}`".format(where, type(v), v))
    if k == "source":
        if type(v) != "string":
            return (None, "{}: expected a source path, got {} `{}`".format(where, type(v), v))
        if v.startswith(":") or "//" in v:
            # A target: its default output is the source (Buck2's `attrs.source()` accepts both).
            return ({"target": _py_label(v, cell)}, "")
        return (_py_check_source(v), "")
    if k == "enum":
        if v in a.values:
            return (v, "")
        return (None, "{}: `{}` is not one of {}".format(where, v, a.values))
    if k == "dep" or k == "toolchain_dep":
        if type(v) != "string":
            return (None, "{}: expected a target label, got {} `{}`".format(where, type(v), v))
        return (_py_label(v, cell), "")
    if k == "option":
        if v == None:
            return (None, "")
        return _coerce(a.inner[0], v, where, cell)
    if k == "list":
        if type(v) != "list" and type(v) != "tuple":
            return (None, "{}: expected a list, got {} `{}`".format(where, type(v), v))
        out = []
        for i, x in enumerate(v):
            c, err = _coerce(a.inner[0], x, "{}[{}]".format(where, i), cell)
            if err:
                return (None, err)
            out.append(c)
        return (out, "")
    if k == "tuple":
        if (type(v) != "list" and type(v) != "tuple") or len(v) != len(a.inner):
            return (None, "{}: expected a tuple of {} values, got {} `{}`".format(where, len(a.inner), type(v), v))
        out = []
        for i, x in enumerate(v):
            c, err = _coerce(a.inner[i], x, "{}[{}]".format(where, i), cell)
            if err:
                return (None, err)
            out.append(c)
        return (out, "")
    if k == "dict":
        if type(v) != "dict":
            return (None, "{}: expected a dict, got {} `{}`".format(where, type(v), v))
        out = {}
        for key, x in v.items():
            ck, err = _coerce(a.inner[0], key, "{} key".format(where), cell)
            if err:
                return (None, err)
            cv, err = _coerce(a.inner[1], x, "{}[{}]".format(where, key), cell)
            if err:
                return (None, err)
            out[ck] = cv
        return (out, "")
    if k == "one_of":
        errors = []
        for i, alt in enumerate(a.inner):
            c, err = _coerce(alt, v, where, cell)
            if not err:
                return ({"one_of": i, "value": c}, "")
            errors.append(err)
        return (None, "{}: matches none of the allowed types ({})".format(where, "; ".join(errors)))
    fail("harness: unknown attribute kind " + k)

def _to_analysis(a: Attr, v, deps: dict, package: str):
    """Turn a coerced attribute value into what the rule sees: artifacts, dependencies."""
    k = a.kind
    if v == None:
        return None
    if k == "source":
        if type(v) == "dict":
            return _only_default_output(deps[v["target"]], v["target"])
        return source_artifact(package + "/" + v if package else v, v)
    if k == "dep" or k == "toolchain_dep":
        return deps[v]
    if k == "option":
        return _to_analysis(a.inner[0], v, deps, package)
    if k == "list":
        return [_to_analysis(a.inner[0], x, deps, package) for x in v]
    if k == "tuple":
        return tuple([_to_analysis(a.inner[i], x, deps, package) for i, x in enumerate(v)])
    if k == "dict":
        return {_to_analysis(a.inner[0], key, deps, package): _to_analysis(a.inner[1], x, deps, package) for key, x in v.items()}
    if k == "one_of":
        return _to_analysis(a.inner[v["one_of"]], v["value"], deps, package)
    return v

def _dep_labels(a: Attr, v, out: list):
    """Collect (label, required providers) for every dependency in a coerced value."""
    k = a.kind
    if v == None:
        return
    if k == "dep" or k == "toolchain_dep":
        out.append((v, a.providers))
    elif k == "source" and type(v) == "dict":
        out.append((v["target"], []))
    elif k == "option":
        _dep_labels(a.inner[0], v, out)
    elif k == "list":
        for x in v:
            _dep_labels(a.inner[0], x, out)
    elif k == "tuple":
        for i, x in enumerate(v):
            _dep_labels(a.inner[i], x, out)
    elif k == "dict":
        for key, x in v.items():
            _dep_labels(a.inner[0], key, out)
            _dep_labels(a.inner[1], x, out)
    elif k == "one_of":
        _dep_labels(a.inner[v["one_of"]], v["value"], out)

def _only_default_output(dep: dict, label: str) -> Artifact:
    outs = _result_outputs(dep.values())
    if len(outs) != 1:
        fail("{} is used as a source, so it must have exactly one default output, not {}".format(label, len(outs)))
    return outs[0]

# --- Rules ---------------------------------------------------------------------

RuleSpec = record(
    id = int,
    cell = str,
    impl = typing.Callable,
    attrs = dict,
    is_toolchain_rule = bool,
)

_PROBE = struct(harness_rule_probe = True)
_IMPLICIT_ATTRS = ["name", "visibility", "labels"]

def rule(impl, attrs = {}, doc = "", is_toolchain_rule = False, **kwargs):
    if kwargs:
        fail("rule(): unsupported arguments {}".format(sorted(kwargs.keys())))
    created = json.decode(_py_created("rule"))
    for name in attrs:
        if name in _IMPLICIT_ATTRS:
            fail("rule(): attribute `{}` is implicit and cannot be declared".format(name))
    spec = RuleSpec(id = created["id"], cell = created["cell"], impl = impl, attrs = attrs, is_toolchain_rule = is_toolchain_rule)

    def instantiate(*args, **kwargs):
        if len(args) == 1 and args[0] == _PROBE and not kwargs:
            return spec
        if args:
            fail("rules take keyword arguments only")
        return _instantiate(spec, kwargs)

    return instantiate

def _instantiate(spec: RuleSpec, kwargs: dict):
    name = kwargs.get("name")
    if type(name) != "string" or not name:
        fail("a target needs a `name` string")
    pkg = json.decode(_py_package())
    visibility = kwargs.get("visibility", [])
    if type(visibility) != "list":
        fail("{}: `visibility` must be a list of patterns".format(name))
    values = {}
    for key, v in kwargs.items():
        if key in _IMPLICIT_ATTRS:
            continue
        if key not in spec.attrs or key.startswith("_"):
            fail("target `{}`: unknown attribute `{}` (the rule has: {})".format(
                name,
                key,
                ", ".join(sorted([k for k in spec.attrs if not k.startswith("_")])),
            ))
        c, err = _coerce(spec.attrs[key], v, "target `{}` attribute `{}`".format(name, key), pkg["cell"])
        if err:
            fail(err)
        values[key] = c
    for key, a in spec.attrs.items():
        if key in values:
            continue
        if a.default == _NO_DEFAULT:
            fail("target `{}`: missing required attribute `{}`".format(name, key))
        c, err = _coerce(a, a.default, "rule default of attribute `{}`".format(key), spec.cell)
        if err:
            fail(err)
        values[key] = c
    deps = []
    for key, a in spec.attrs.items():
        _dep_labels(a, values[key], deps)
    deps = [label for label, _ in deps]
    _py_register(json.encode({
        "name": name,
        "rule": spec.id,
        "attrs": values,
        "deps": deps,
        "visibility": visibility,
        "toolchain": spec.is_toolchain_rule,
        "toolchain_deps": [values[k] for k, a in spec.attrs.items() if a.kind == "toolchain_dep" and values[k] != None],
    }))

# --- Analysis ------------------------------------------------------------------

# One analysis unit: a rule's analysis or one run of a dynamic_output callback.
_Unit = record(key = str, label = Label, callbacks = list)

# A dynamic_output waiting for its inputs: the callback and what it may see.
_Callback = record(f = typing.Callable, dynamic = list, outputs = list, attrs = typing.Any, label = Label)

AnalysisActions = record(
    declare_output = typing.Callable,
    run = typing.Callable,
    write = typing.Callable,
    write_json = typing.Callable,
    copy_file = typing.Callable,
    symlinked_dir = typing.Callable,
    copied_dir = typing.Callable,
    dynamic_output = typing.Callable,
)

AnalysisContext = record(attrs = typing.Any, actions = AnalysisActions, label = Label)

ArtifactValue = record(
    read_string = typing.Callable,
    read_lines = typing.Callable,
    read_json = typing.Callable,
)

def _declare(unit: _Unit, prefix: str, filename = None, dir = False) -> Artifact:
    path = prefix if filename == None else prefix + "/" + filename
    key = _py_declare(unit.key, path, dir)
    return _make_artifact(key, path, dir, unit.key, False)

def _output_of(unit: _Unit, output, dir: bool, what: str) -> OutputArtifact:
    """An action's `output` argument: a name to declare, a declared artifact or an output."""
    if type(output) == "string":
        return _declare(unit, output, None, dir).as_output()
    if isinstance(output, Artifact):
        return output.as_output()
    if isinstance(output, OutputArtifact):
        return output
    fail("{}: output must be a string, an artifact or an output artifact, got {}".format(what, type(output)))

def _run(unit: _Unit, arguments, *, category: str, identifier = None, env = {}, local_only = False, prefer_local = False, prefer_remote = False, weight = 1, always_print_stderr = False, allow_cache_upload = False, exe = None, **kwargs):
    if kwargs:
        fail("ctx.actions.run(): unsupported arguments {} in the test harness".format(sorted(kwargs.keys())))
    if exe != None:
        fail("ctx.actions.run(exe=) is not implemented by the test harness")
    _check_arg(arguments, "ctx.actions.run()")
    for k, v in env.items():
        _check_arg(v, "ctx.actions.run(env[{}])".format(k))
    _py_action(unit.key, json.encode({
        "kind": "run",
        "category": category,
        "identifier": identifier,
        "cmd": _node(arguments, unit.key),
        "env": {k: _node(v, unit.key) for k, v in env.items()},
        "local_only": local_only,
        "weight": weight,
    }))

def _write(unit: _Unit, output, content, *, is_executable = False, allow_args = False, with_inputs = False, absolute = False):
    if allow_args or with_inputs or absolute:
        fail("ctx.actions.write(allow_args/with_inputs/absolute) is not implemented by the test harness")
    _check_arg(content, "ctx.actions.write()")
    out = _output_of(unit, output, False, "ctx.actions.write()")
    _py_action(unit.key, json.encode({
        "kind": "write",
        "category": "write",
        "identifier": out._artifact.short_path,
        "out": _node(out, unit.key),
        "content": _node(content, unit.key),
        "is_executable": is_executable,
    }))
    return out._artifact

def _json_value(v, unit: str):
    """`v` with artifacts and command lines turned into markers Python renders as paths."""
    t = type(v)
    if t == "string" or t == "int" or t == "bool" or t == "NoneType" or t == "float":
        return v
    if t == "list" or t == "tuple":
        return [_json_value(x, unit) for x in v]
    if t == "dict":
        out = {}
        for k, x in v.items():
            if type(k) != "string":
                fail("ctx.actions.write_json(): dict keys must be strings, got {}".format(type(k)))
            out[k] = _json_value(x, unit)
        return out
    if t == "struct":
        return _json_value(json.decode(json.encode(v)), unit)
    if isinstance(v, Artifact) or isinstance(v, OutputArtifact) or isinstance(v, CmdArgs):
        return {"\u0000cmd": _node(v, unit)}
    if t == "record":
        fail("ctx.actions.write_json(): records are not implemented by the test harness")
    if t == "enum":
        return v.value
    fail("ctx.actions.write_json(): cannot write {} `{}`".format(t, v))

def _write_json(unit: _Unit, output, content, *, with_inputs = False, pretty = False, absolute = False):
    if absolute:
        fail("ctx.actions.write_json(absolute=True) is not implemented by the test harness")
    out = _output_of(unit, output, False, "ctx.actions.write_json()")
    value = _json_value(content, unit.key)
    _py_action(unit.key, json.encode({
        "kind": "write_json",
        "category": "write_json",
        "identifier": out._artifact.short_path,
        "out": _node(out, unit.key),
        "content": value,
        "pretty": pretty,
    }))
    if with_inputs:
        return cmd_args(out._artifact, hidden = _known_inputs(content))
    return out._artifact

def _known_inputs(content) -> list:
    """The artifacts inside `content` (for write_json(with_inputs = True))."""
    found = []
    stack = [content]
    for _ in range(1000000):
        if not stack:
            break
        v = stack.pop()
        t = type(v)
        if isinstance(v, Artifact) or isinstance(v, CmdArgs):
            found.append(v)
        elif t == "list" or t == "tuple":
            stack.extend(v)
        elif t == "dict":
            stack.extend(v.values())
    return found

def _copy_file(unit: _Unit, dest, src):
    if not isinstance(src, Artifact):
        fail("ctx.actions.copy_file(): src must be an artifact")
    out = _output_of(unit, dest, src._is_dir, "ctx.actions.copy_file()")
    _py_action(unit.key, json.encode({
        "kind": "copy",
        "category": "copy",
        "identifier": out._artifact.short_path,
        "out": _node(out, unit.key),
        "src": _node(src, unit.key),
    }))
    return out._artifact

def _dir_action(unit: _Unit, kind: str, output, srcs):
    if type(srcs) != "dict":
        fail("ctx.actions.{}(): srcs must be a dict of path to artifact".format(kind))
    for name, a in srcs.items():
        if type(name) != "string" or not isinstance(a, Artifact):
            fail("ctx.actions.{}(): srcs must map path strings to artifacts, got `{}`: {}".format(kind, name, type(a)))
    out = _output_of(unit, output, True, "ctx.actions." + kind + "()")
    _py_action(unit.key, json.encode({
        "kind": kind,
        "category": kind,
        "identifier": out._artifact.short_path,
        "out": _node(out, unit.key),
        "srcs": {name: _node(a, unit.key) for name, a in srcs.items()},
    }))
    return out._artifact

def _dynamic_output(unit: _Unit, attrs_value, *, dynamic, outputs, f, inputs = []):
    _ = inputs  # Buck2 ignores it
    for a in dynamic:
        if not isinstance(a, Artifact):
            fail("dynamic_output(dynamic=) takes artifacts, got {}".format(type(a)))
    for o in outputs:
        if not isinstance(o, OutputArtifact):
            fail("dynamic_output(outputs=) takes output artifacts (`artifact.as_output()`), got {}".format(type(o)))
    if not outputs:
        fail("dynamic_output(): outputs must not be empty")
    index = len(unit.callbacks)
    _py_action(unit.key, json.encode({
        "kind": "dynamic",
        "category": "dynamic",
        "identifier": str(index),
        "index": index,
        "dynamic": [_node(a, unit.key) for a in dynamic],
        "outputs": [_node(o, unit.key) for o in outputs],
    }))
    unit.callbacks.append(_Callback(
        f = f,
        dynamic = list(dynamic),
        outputs = [o._artifact for o in outputs],
        attrs = attrs_value,
        label = unit.label,
    ))

def _actions(unit: _Unit, attrs_value) -> AnalysisActions:
    return AnalysisActions(
        declare_output = lambda prefix, filename = None, dir = False: _declare(unit, prefix, filename, dir),
        run = lambda arguments, **kwargs: _run(unit, arguments, **kwargs),
        write = lambda output, content, **kwargs: _write(unit, output, content, **kwargs),
        write_json = lambda output, content, **kwargs: _write_json(unit, output, content, **kwargs),
        copy_file = lambda dest, src: _copy_file(unit, dest, src),
        symlinked_dir = lambda output, srcs: _dir_action(unit, "symlinked_dir", output, srcs),
        copied_dir = lambda output, srcs: _dir_action(unit, "copied_dir", output, srcs),
        dynamic_output = lambda **kwargs: _dynamic_output(unit, attrs_value, **kwargs),
    )

def _artifact_list(v) -> list:
    if v == None:
        return []
    if isinstance(v, Artifact):
        return [v]
    if type(v) == "list" or type(v) == "tuple":
        for a in v:
            if not isinstance(a, Artifact):
                fail("DefaultInfo: expected artifacts, got {}".format(type(a)))
        return list(v)
    fail("DefaultInfo: expected artifacts, got {}".format(type(v)))

def _summary(providers: list) -> str:
    """What Python needs from the providers: default outputs and how to run the target."""
    default = None
    run = None
    for p in providers:
        if isinstance(p, DefaultInfo):
            default = p
        elif isinstance(p, RunInfo):
            run = p
    outs = _artifact_list(default.default_output) + _artifact_list(default.default_outputs)
    others = []
    for o in _artifact_list(default.other_outputs):
        others.append(o)
    subs = {}
    for name, sub in (default.sub_targets or {}).items():
        subs[name] = [_node(a, "") for a in _result_outputs(sub)]
    return json.encode({
        "default_outputs": [_node(a, "") for a in outs],
        "other_outputs": [_node(a, "") for a in others],
        "sub_targets": subs,
        "run": _node(run.args, "") if run != None else None,
    })

def _result_outputs(providers) -> list:
    for p in providers:
        if isinstance(p, DefaultInfo):
            return _artifact_list(p.default_output) + _artifact_list(p.default_outputs)
    return []

AnalysisResult = record(providers = dict, callbacks = list, summary = str)

def _finish(unit: _Unit, providers) -> AnalysisResult:
    if type(providers) != "list":
        fail("{}: a rule must return a list of providers, got {}".format(_label_str(unit.label), type(providers)))
    by_type = {}
    for p in providers:
        if not _is_provider(p):
            fail("{}: a rule must return providers, got {} `{}`".format(_label_str(unit.label), type(p), p))
        ty = p._provider()
        if ty in by_type:
            fail("{}: provider {} returned twice".format(_label_str(unit.label), ty))
        by_type[ty] = p
    if DefaultInfo not in by_type:
        fail("{}: a rule must return DefaultInfo".format(_label_str(unit.label)))
    return AnalysisResult(providers = by_type, callbacks = unit.callbacks, summary = _summary(providers))

def analyze(rule_fn, target_json: str, deps: dict) -> AnalysisResult:
    """Run a rule's analysis. Called from a module the harness generates per target."""
    spec = rule_fn(_PROBE)
    t = json.decode(target_json)
    label = Label(cell = t["cell"], package = t["package"], name = t["name"])
    unit = _Unit(key = t["unit"], label = label, callbacks = [])
    values = {"name": t["name"]}
    for key, a in spec.attrs.items():
        required = []
        _dep_labels(a, t["attrs"][key], required)
        for dep_label, providers in required:
            for p in providers:
                if p not in deps[dep_label]:
                    fail("{}: attribute `{}`: dependency {} does not provide {}".format(_label_str(label), key, dep_label, p))
        values[key] = _to_analysis(a, t["attrs"][key], deps, t["package_path"])
    attrs_value = struct(**values)
    ctx = AnalysisContext(attrs = attrs_value, actions = _actions(unit, attrs_value), label = label)
    return _finish(unit, spec.impl(ctx))

def _artifact_value(a: Artifact, content) -> ArtifactValue:
    def read_string():
        if content == None:
            fail("artifact `{}` is a directory: it cannot be read".format(a.short_path))
        return content

    return ArtifactValue(
        read_string = read_string,
        read_lines = lambda: read_string().splitlines(),
        read_json = lambda: json.decode(read_string()),
    )

DynamicResult = record(callbacks = list)

def run_dynamic(cb: _Callback, info_json: str) -> DynamicResult:
    """Run one dynamic_output callback. Called from a module the harness generates."""
    info = json.decode(info_json)
    unit = _Unit(key = info["unit"], label = cb.label, callbacks = [])
    values = {a: _artifact_value(a, info["values"][a._key]) for a in cb.dynamic}
    outputs = {a: _make_artifact(a._key, a.short_path, a._is_dir, unit.key, False) for a in cb.outputs}
    ctx = AnalysisContext(attrs = cb.attrs, actions = _actions(unit, cb.attrs), label = cb.label)
    r = cb.f(ctx, values, outputs)
    if r != None:
        fail("a dynamic_output callback must return None, got {}".format(type(r)))
    return DynamicResult(callbacks = unit.callbacks)

# --- Loading-phase functions ---------------------------------------------------

def glob(include, exclude = []):
    return json.decode(_py_glob(json.encode({"include": include, "exclude": exclude})))

def package_name() -> str:
    return json.decode(_py_package())["package"]

def read_config(section: str, key: str, default = None):
    v = _py_config(section, key)
    return default if v == None else v

read_root_config = read_config
