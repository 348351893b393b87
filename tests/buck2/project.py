"""A Buck2 project on disk: `.buckconfig`, cells, labels, packages and globs.

Only what our rules and examples need, with Buck2's meaning: cells from `[cells]`
(or the older `[repositories]`), build files named `BUCK`, labels `cell//pkg:name`,
`//pkg:name` and `:name`, target patterns `//pkg:name`, `//pkg:` and `//pkg/...`,
and `-c section.key=value` overrides.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path

BUILD_FILE = "BUCK"


class ProjectError(Exception):
    """A malformed project: bad config, label, pattern or path."""


@dataclass(frozen=True, order=True)
class Label:
    cell: str
    package: str
    name: str

    def __str__(self) -> str:
        return f"{self.cell}//{self.package}:{self.name}"


def parse_buckconfig(text: str, path: str) -> dict[str, dict[str, str]]:
    """Parse the INI-like `.buckconfig` (sections, `key = value`, `#`/`;` comments)."""
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1].strip(), {})
            continue
        if current is None or "=" not in line:
            raise ProjectError(f"{path}:{lineno}: expected `[section]` or `key = value`")
        key, value = line.split("=", 1)
        current[key.strip()] = value.strip()
    return sections


class Project:
    """The cells of a project rooted at `root`, and its configuration."""

    def __init__(self, root: Path, overrides: dict[str, str] | None = None) -> None:
        self.root = root.resolve()
        config_path = self.root / ".buckconfig"
        if not config_path.is_file():
            raise ProjectError(f"{config_path}: missing (not a Buck2 project root)")
        self.config = parse_buckconfig(config_path.read_text(), str(config_path))
        local = self.root / ".buckconfig.local"
        if local.is_file():
            for section, values in parse_buckconfig(local.read_text(), str(local)).items():
                self.config.setdefault(section, {}).update(values)
        for dotted, value in (overrides or {}).items():
            section, _, key = dotted.partition(".")
            if not section or not key:
                raise ProjectError(f"config override {dotted!r}: expected SECTION.KEY")
            self.config.setdefault(section, {})[key] = value
        cells = self.config.get("cells") or self.config.get("repositories") or {"root": "."}
        self.cells: dict[str, str] = {}
        for name, rel in cells.items():
            path = os.path.normpath(rel)
            if path.startswith("..") or os.path.isabs(path):
                raise ProjectError(f".buckconfig: cell {name} = {rel}: must be inside the project")
            self.cells[name] = "" if path == "." else path
        self.root_cell = next((n for n, p in self.cells.items() if p == ""), None)
        if self.root_cell is None:
            raise ProjectError(".buckconfig: no cell at `.`")
        for alias, target in self.config.get("cell_aliases", {}).items():
            if target in self.cells:
                self.cells.setdefault(alias, self.cells[target])

    def read_config(self, section: str, key: str) -> str | None:
        return self.config.get(section, {}).get(key)

    # --- paths ---------------------------------------------------------------

    def package_path(self, cell: str, package: str) -> str:
        """The project-relative directory of `cell//package`."""
        if cell not in self.cells:
            raise ProjectError(f"unknown cell `{cell}` (cells: {', '.join(sorted(self.cells))})")
        return "/".join(p for p in (self.cells[cell], package) if p)

    def cell_of(self, path: str) -> tuple[str, str]:
        """(cell, path within the cell) of a project-relative path: the deepest cell wins."""
        best = (self.root_cell or "root", path)
        depth = -1
        for name, cell_path in self.cells.items():
            if cell_path == "":
                continue
            inside = path == cell_path or path.startswith(cell_path + "/")
            if inside and len(cell_path) > depth:
                depth = len(cell_path)
                best = (name, path[len(cell_path) + 1 :])
        return best

    # --- labels and load paths -----------------------------------------------

    def parse_label(self, text: str, cell: str, package: str) -> Label:
        """Resolve a target label relative to `cell//package`."""
        if text.startswith(":"):
            name = text[1:]
            target_cell, target_package = cell, package
        else:
            target_cell, rest = self._split_cell(text, cell)
            if ":" in rest:
                target_package, name = rest.split(":", 1)
            else:
                target_package, name = rest, rest.rsplit("/", 1)[-1]
        if not name or not re.fullmatch(r"[A-Za-z0-9_.+=,@~-][A-Za-z0-9_.+=,@~/-]*", name):
            raise ProjectError(f"invalid target label `{text}`")
        self._check_package(target_package, text)
        if target_cell not in self.cells:
            raise ProjectError(f"invalid target label `{text}`: unknown cell `{target_cell}`")
        return Label(target_cell, target_package, name)

    def load_path(self, text: str, cell: str, package: str) -> str:
        """The project-relative file of a `load()` path (`cell//pkg:f.bzl`, `:f.bzl`, ...)."""
        if text.startswith(":"):
            file_cell, rel = cell, f"{package}/{text[1:]}" if package else text[1:]
        else:
            file_cell, rest = self._split_cell(text, cell)
            package, _, file = rest.rpartition(":") if ":" in rest else ("", "", rest)
            rel = f"{package}/{file}" if package else file
        if not rel.endswith(".bzl"):
            raise ProjectError(f"load(`{text}`): only .bzl files can be loaded")
        self._check_package(os.path.dirname(rel), text)
        return self.package_path(file_cell, rel)

    def _split_cell(self, text: str, cell: str) -> tuple[str, str]:
        body = text[1:] if text.startswith("@") else text
        if "//" not in body:
            raise ProjectError(f"invalid label `{text}`: expected `//`")
        target_cell, rest = body.split("//", 1)
        return (target_cell or cell), rest

    @staticmethod
    def _check_package(package: str, text: str) -> None:
        parts = package.split("/") if package else []
        if any(p in ("", ".", "..") for p in parts):
            raise ProjectError(f"invalid label `{text}`: bad package path")

    # --- packages and globs --------------------------------------------------

    def packages_under(self, cell: str, package: str) -> list[str]:
        """Every package (directory with a BUCK file) at or below `cell//package`."""
        base = self.root / self.package_path(cell, package)
        cell_root = self.root / self.package_path(cell, "")
        other_cells = {self.root / p for n, p in self.cells.items() if n != cell and p}
        ignored = {  # `[project] ignore`, as Buck2 reads it: comma-separated paths
            self.root / p.strip()
            for p in self.config.get("project", {}).get("ignore", "").split(",")
            if p.strip()
        }
        found = []
        for dirpath, dirnames, filenames in os.walk(base):
            here = Path(dirpath)
            dirnames[:] = sorted(
                d
                for d in dirnames
                if here / d not in other_cells
                and here / d not in ignored
                and d not in ("buck-out", ".git")
                and not d.startswith(".")
            )
            if BUILD_FILE in filenames:
                rel = here.relative_to(cell_root).as_posix()
                found.append("" if rel == "." else rel)
        return sorted(found)

    def glob(self, cell: str, package: str, include: list[str], exclude: list[str]) -> list[str]:
        """Files under the package matching `include` and not `exclude`; not in subpackages."""
        base = self.root / self.package_path(cell, package)
        matches: list[str] = []
        for dirpath, dirnames, filenames in os.walk(base):
            here = Path(dirpath)
            dirnames[:] = sorted(
                d
                for d in dirnames
                if not (here / d / BUILD_FILE).exists() and d not in ("buck-out", ".git")
            )
            for name in filenames:
                rel = (here / name).relative_to(base).as_posix()
                if any(_glob_match(rel, p) for p in include) and not any(
                    _glob_match(rel, p) for p in exclude
                ):
                    matches.append(rel)
        return sorted(matches)


def _glob_match(path: str, pattern: str) -> bool:
    """Buck2 glob: `*` within one path component, `**` across any number of them."""
    return _match_parts(path.split("/"), pattern.split("/"))


def _match_parts(parts: list[str], pats: list[str]) -> bool:
    if not pats:
        return not parts
    if pats[0] == "**":
        return any(_match_parts(parts[i:], pats[1:]) for i in range(len(parts) + 1))
    if not parts:
        return False
    return fnmatch.fnmatchcase(parts[0], pats[0]) and _match_parts(parts[1:], pats[1:])
