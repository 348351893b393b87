"""Reading and writing our versioned JSON formats, with errors that name file and field.

Written output is deterministic: keys sorted, two-space indent, trailing
newline, written atomically. Validation errors carry a JSON pointer
(`/groups/3/linkables/0/path`) so a hand-written file can be fixed from the
message alone.

Reading uses the standard library's C scanner (`loads`), held to what orjson
accepts; writing uses orjson, imported only by writers. `dist-lto distribute` reads
a job file on every link, and importing orjson costs more than parsing: it loads
`dataclasses` (with `inspect`), `uuid`, `datetime` and `json` itself, where `json`
alone is cheap once `re` is loaded (the console script loads it), and a large job
file parses as fast with either. No `typing` at run time either.
"""

import json

from dist_lto import TYPE_CHECKING
from dist_lto.errors import BadInput
from dist_lto.fsutil import read_input, write_atomic

if TYPE_CHECKING:
    from typing import Any, NoReturn, TypeVar

    T = TypeVar("T")

_TYPE_NAMES: dict[type, str] = {
    dict: "object",
    list: "array",
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


def dumps(value: "Any") -> bytes:
    """Canonical bytes for `value`: sorted keys, indented, newline-terminated."""
    import orjson  # writers only: see the module docstring

    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def write_json(path: str, value: "Any") -> None:
    """Write `value` to `path` canonically and atomically."""
    write_atomic(path, dumps(value))


# orjson's rules, which our readers have always applied: UTF-8 without a byte order
# mark, no NaN or Infinity, no number beyond a double, no lone surrogate (`"\ud800"`),
# and integers outside 64 bits read as floats. `json` alone accepts all of these.
_INT_MIN = -(1 << 63)
_INT_END = 1 << 64
_INFINITY = float("inf")


def _float(text: str) -> float:
    value = float(text)
    if value in (_INFINITY, -_INFINITY):
        raise ValueError(f"number {text[:20]} is beyond a double")
    return value


def _int(text: str) -> "int | float":
    value = int(text)
    return value if _INT_MIN <= value < _INT_END else _float(text)


def _constant(text: str) -> "NoReturn":
    raise ValueError(f"{text} is not JSON")


_DECODER = json.JSONDecoder(parse_float=_float, parse_int=_int, parse_constant=_constant)


def loads(data: bytes) -> "Any":
    """Parse a JSON document; ValueError (a message without newlines) if it is not one."""
    text = data.decode()  # strict UTF-8
    if text.startswith("\ufeff"):
        raise ValueError("a byte order mark (U+FEFF) precedes the document")
    try:
        doc = _DECODER.decode(text)
    except RecursionError:
        raise ValueError("arrays or objects nested too deeply") from None
    if "\\" in text and ("\\ud" in text or "\\uD" in text):  # memchr first: the scan is rare
        _reject_lone_surrogates(doc)
    return doc


def _reject_lone_surrogates(doc: object) -> None:
    """A `\\udXXX` escape without its pair decodes to a string no file name can hold."""
    stack = [doc]
    while stack:
        node = stack.pop()
        if type(node) is dict:
            stack += node
            stack += node.values()
        elif type(node) is list:
            stack += node
        elif type(node) is str:
            try:
                node.encode()
            except UnicodeEncodeError as err:
                raise ValueError(
                    f"a string holds a lone surrogate \\u{ord(node[err.start]):04x}"
                ) from None


def read_json(path: str, what: str = "JSON") -> "Any":
    """Parse the JSON file at `path`; a missing or malformed file is bad input naming it."""
    data = read_input(path, what)
    try:
        return loads(data)
    except ValueError as err:
        raise BadInput(f"{path}: not valid JSON: {err}") from None


def type_name(value: object) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


class Fields:
    """Typed access to a JSON document's fields, failing with file and JSON pointer.

    `Fields(path).get(obj, "key", str, "/groups/0")` returns `obj["key"]` if it is a
    string and raises `BadInput("path: /groups/0/key: expected string, got integer")`
    otherwise. Booleans are never accepted as integers.
    """

    def __init__(self, file: str) -> None:
        self.file = file

    def fail(self, pointer: str, problem: str) -> "NoReturn":
        raise BadInput(f"{self.file}: {pointer or '/'}: {problem}")

    def expect(self, value: object, kind: "type[T]", pointer: str) -> "T":
        if type(value) is not kind and not (kind is float and type(value) is int):
            self.fail(
                pointer, f"expected {_TYPE_NAMES.get(kind, kind.__name__)}, got {type_name(value)}"
            )
        return value  # type: ignore[return-value]

    def get(self, obj: "dict[str, Any]", key: str, kind: "type[T]", pointer: str) -> "T":
        if key not in obj:
            self.fail(f"{pointer}/{key}", "missing required field")
        return self.expect(obj[key], kind, f"{pointer}/{key}")

    def optional(
        self, obj: "dict[str, Any]", key: str, kind: "type[T]", pointer: str, default: "T"
    ) -> "T":
        if key not in obj:
            return default
        return self.expect(obj[key], kind, f"{pointer}/{key}")

    def strings(
        self, obj: "dict[str, Any]", key: str, pointer: str, default: list[str] | None = None
    ) -> list[str]:
        if key not in obj and default is not None:
            return default
        items = self.get(obj, key, list, pointer)
        if not all(type(item) is str for item in items):  # the loop names the first that is not
            for i, item in enumerate(items):
                self.expect(item, str, f"{pointer}/{key}/{i}")
        return items

    def only_keys(self, obj: "dict[str, Any]", allowed: set[str], pointer: str) -> None:
        unknown = sorted(set(obj) - allowed)
        if unknown:
            self.fail(f"{pointer}/{unknown[0]}", "unknown field")

    def version(self, doc: object, supported: int) -> "dict[str, Any]":
        """Check that `doc` is an object with `"version": supported` and return it."""
        obj = self.expect(doc, dict, "")
        version = self.get(obj, "version", int, "")
        if version != supported:
            self.fail(
                "/version", f"unsupported version {version} (this tool reads version {supported})"
            )
        return obj
