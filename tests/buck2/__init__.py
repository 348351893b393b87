"""A test harness that runs our Buck2 rules with starlark-rust (no Buck2 binary needed).

See harness.py for the entry point and api.bzl for the Buck2 API it provides.
"""

from .harness import BuildError, BuildResult, Harness
from .project import Label

__all__ = ["BuildError", "BuildResult", "Harness", "Label"]
