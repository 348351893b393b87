"""Reading and writing our versioned JSON formats, with errors that name file and field.

Written output is deterministic: keys sorted, two-space indent, trailing
newline, written atomically. Validation errors carry a JSON pointer
(`/groups/3/linkables/0/path`) so a hand-written file can be fixed from the
message alone.
"""

from typing import Any, NoReturn, TypeVar

import orjson

from dist_lto.errors import BadInput
from dist_lto.fsutil import write_atomic

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


def dumps(value: Any) -> bytes:
    """Canonical bytes for `value`: sorted keys, indented, newline-terminated."""
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def write_json(path: str, value: Any) -> None:
    """Write `value` to `path` canonically and atomically."""
    write_atomic(path, dumps(value))


def read_json(path: str, what: str = "JSON") -> Any:
    """Parse the JSON file at `path`; a missing or malformed file is bad input naming it."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise BadInput(f"{path}: cannot read {what}: {err.strerror}") from None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as err:
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

    def fail(self, pointer: str, problem: str) -> NoReturn:
        raise BadInput(f"{self.file}: {pointer or '/'}: {problem}")

    def expect(self, value: object, kind: type[T], pointer: str) -> T:
        if type(value) is not kind and not (kind is float and type(value) is int):
            self.fail(
                pointer, f"expected {_TYPE_NAMES.get(kind, kind.__name__)}, got {type_name(value)}"
            )
        return value  # type: ignore[return-value]

    def get(self, obj: dict[str, Any], key: str, kind: type[T], pointer: str) -> T:
        if key not in obj:
            self.fail(f"{pointer}/{key}", "missing required field")
        return self.expect(obj[key], kind, f"{pointer}/{key}")

    def optional(self, obj: dict[str, Any], key: str, kind: type[T], pointer: str, default: T) -> T:
        if key not in obj:
            return default
        return self.expect(obj[key], kind, f"{pointer}/{key}")

    def strings(
        self, obj: dict[str, Any], key: str, pointer: str, default: list[str] | None = None
    ) -> list[str]:
        if key not in obj and default is not None:
            return default
        items = self.get(obj, key, list, pointer)
        for i, item in enumerate(items):
            self.expect(item, str, f"{pointer}/{key}/{i}")
        return items

    def only_keys(self, obj: dict[str, Any], allowed: set[str], pointer: str) -> None:
        unknown = sorted(set(obj) - allowed)
        if unknown:
            self.fail(f"{pointer}/{unknown[0]}", "unknown field")

    def version(self, doc: object, supported: int) -> dict[str, Any]:
        """Check that `doc` is an object with `"version": supported` and return it."""
        obj = self.expect(doc, dict, "")
        version = self.get(obj, "version", int, "")
        if version != supported:
            self.fail(
                "/version", f"unsupported version {version} (this tool reads version {supported})"
            )
        return obj
