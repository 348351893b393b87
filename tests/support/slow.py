"""What makes a test `slow` (left out of the inner loop, `pytest -m "not slow"`).

A test is slow when it carries the marker itself (`pytestmark = pytest.mark.slow` for a
module whose every test drives real Buck2 or a whole pipeline) or when it uses a fixture
declared slow with `@slow_fixture` (it compiles a real program from Debian's sources,
starts the BuildBarn engine or a browser), directly or through another fixture: the
fixture says so where it is defined, so no list elsewhere can go stale.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

F = TypeVar("F", bound=Callable[..., object])


def slow_fixture(func: F) -> F:
    """Declare a fixture function slow: every test that uses it is marked `slow`."""
    func.slow = True  # type: ignore[attr-defined]
    return func


def uses_slow_fixture(item: pytest.Item) -> bool:
    """Whether `item` uses a fixture declared with `slow_fixture` (in its closure)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    for definitions in info.name2fixturedefs.values():
        if any(getattr(d.func, "slow", False) for d in definitions):
            return True
    return False
