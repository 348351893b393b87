"""How many examples a property test tries: its full budget, scaled by the loaded
hypothesis profile (`tests/conftest.py` loads a smaller one for the inner loop)."""

from __future__ import annotations

from hypothesis import settings

HYPOTHESIS_DEFAULT = 100
"""hypothesis' own default `max_examples`, the scale budgets are written against."""


def examples(full: int) -> int:
    """`full` under a profile with hypothesis' default budget, proportionally fewer (at
    least a handful) under the inner loop's."""
    scaled = full * settings.default.max_examples // HYPOTHESIS_DEFAULT
    return max(min(full, 5), scaled)
