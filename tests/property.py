"""Hypothesis settings for the property tests: the same examples on every CI run, fresh ones when asked.

CI runs each property test on a fixed set of examples (``derandomize``), so that a red run is a regression and not a
lottery. To hunt for new disagreements (the compiled loop against the reference, the runtime against the
simulator), run with fresh random examples, as many as you like::

    CASCADESERVE_FRESH_EXAMPLES=1500 pytest --timeout 0 tests/simulate/test_compiled.py \
        tests/runtime/test_trajectory_property.py
    make fuzz                   # the parity tests, 1,500 fresh examples each

With the variable set, every test decorated with :func:`property_settings` draws new examples (Hypothesis prints
the seed of a failure, and ``@reproduce_failure`` pins it) and runs at least that many.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import settings

__all__ = ["FRESH_ENV", "fresh_examples", "property_settings"]

FRESH_ENV = "CASCADESERVE_FRESH_EXAMPLES"


def fresh_examples() -> int | None:
    """How many fresh examples a run asks for (``None``: the fixed CI examples)."""
    value = os.environ.get(FRESH_ENV, "").strip()
    if not value:
        return None
    n = int(value)
    if n < 1:
        raise ValueError(f"{FRESH_ENV}={value!r}: give a positive number of examples")
    return n


def property_settings(*, max_examples: int, **kwargs: Any) -> settings:
    """``hypothesis.settings`` with ``max_examples`` fixed examples in CI, or fresh ones when asked (module doc)."""
    fresh = fresh_examples()
    if fresh is None:
        return settings(max_examples=max_examples, derandomize=True, **kwargs)
    return settings(max_examples=max(fresh, max_examples), derandomize=False, database=None, **kwargs)
