"""A comparison of two simulation results that must be identical to the bit (the compiled and Python loops)."""

from __future__ import annotations

import numpy as np

from cascadeserve.simulate import SimResult

ARRAYS = (
    "arrivals",
    "finish",
    "answer_row",
    "answer_stage",
    "gear",
    "correct",
    "tick_times",
    "tick_qps",
    "tick_gear",
    "tick_q0",
    "tick_busy",
)


def assert_same_result(a: SimResult, b: SimResult) -> None:
    """Every per-request outcome, every tick and every batch equal (floats exactly, NaN/inf included)."""
    for name in ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.shape == y.shape and x.dtype == y.dtype, name
        assert np.array_equal(x, y), f"{name} differs at {np.flatnonzero(x != y)[:5].tolist()}"
    assert a.batches == b.batches
    assert (a.shed is None) == (b.shed is None)
    if a.shed is not None and b.shed is not None:
        assert np.array_equal(a.shed, b.shed)
    assert a.summary().keys() == b.summary().keys()
