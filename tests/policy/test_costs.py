"""The cost-drift decision: exact outcomes on small batch streams, and invariants over random ones."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadeserve.policy.costs import (
    CostDrift,
    CostSettings,
    CostWatch,
    trimmed_mean,
)

S = CostSettings(tolerance=0.25, window_s=10.0, sustain_s=5.0, min_batches=5, cooldown_s=30.0, min_excess_ms=1.0)


def _run(w: CostWatch, streams: list[tuple[int, float, float, float, float]], until: float) -> dict[float, object]:
    """Feed batches in time order (every 0.5 s: ``(row, from, to, seconds, profiled)``), checking after each step."""
    out: dict[float, object] = {}
    for k in range(int(until * 2) + 1):
        t = k / 2
        for row, t0, t1, seconds, profiled in streams:
            if t0 <= t <= t1:
                w.observe(row, t, seconds, profiled)
        out[t] = w.check(t)
    return out


def test_a_model_twice_as_slow_is_named_after_the_sustain_time() -> None:
    w = CostWatch(("small", "big"), S)
    small = (0, 0.0, 30.0, 0.010, 0.010)  # as profiled
    big_ok, big_slow = (1, 0.0, 4.0, 0.020, 0.020), (1, 4.5, 30.0, 0.040, 0.020)  # twice as slow from t=4.5
    got = _run(w, [small, big_ok, big_slow], 30.0)
    decided = {t: d for t, d in got.items() if d is not None}
    # at t=8.5 the window holds 9 batches at x1 and 9 at x2: median x1.5, departed from then, decided 5 s later
    assert list(decided) == [13.5]
    d = decided[13.5]
    assert isinstance(d, CostDrift)
    assert [(c.model, c.factor) for c in d.departed] == [("big", 2.0)]  # by then, every batch in the window
    assert d.departed[0].excess_ms == pytest.approx(20.0)
    assert "big x2.00" in d.describe()  # and nothing more until the 30 s cooldown ends (t=43.5)


def test_too_few_batches_or_too_small_an_excess_say_nothing() -> None:
    w = CostWatch(("tiny", "few"), S)
    tiny = (0, 0.0, 30.0, 0.0006, 0.0003)  # x2, but 0.3 ms per batch: under the 1 ms floor
    got = _run(w, [tiny], 30.0)
    for k in range(7):  # x5, but 2 batches per window
        w.observe(1, 31.0 + 5 * k, 0.050, 0.010)
        got[31.0 + 5 * k] = w.check(31.0 + 5 * k)
    assert all(d is None for d in got.values())


def test_faster_than_profiled_is_a_drift_too_and_reset_forgets() -> None:
    w = CostWatch(("m",), S)
    got = _run(w, [(0, 0.0, 10.0, 0.005, 0.010)], 10.0)
    decided = {t: d for t, d in got.items() if d is not None}
    assert list(decided) == [7.0]  # 5 batches by t=2 (departed), sustained 5 s
    assert decided[7.0].departed[0].factor == 0.5  # type: ignore[attr-defined]
    w.reset(10.0)
    assert w.factors(10.0) == ()
    for k in range(101):  # t = 10.5 .. 60.5: the cooldown from reset (30 s) holds it until t=40
        t = 10.5 + k / 2
        w.observe(0, t, 0.005, 0.010)
        d = w.check(t)
        assert (d is not None) == (t == 40.0)


def test_one_stalled_batch_does_not_move_the_median() -> None:
    w = CostWatch(("m",), S)
    _run(w, [(0, 0.0, 10.0, 0.010, 0.010)], 10.0)
    w.observe(0, 10.0, 5.0, 0.010)
    (c,) = w.factors(10.0)
    assert c.factor == 1.0 and c.batches == 22


def test_trimmed_mean_and_bad_settings() -> None:
    assert trimmed_mean([1.0] * 99 + [1000.0]) == 1.0 and trimmed_mean([2.0, 4.0, 5.0]) == 3.0
    for bad in ({"tolerance": 0.0}, {"window_s": 0.0}, {"min_batches": 0}, {"sustain_s": -1.0}):
        with pytest.raises(ValueError):
            CostSettings(**bad)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(min_value=0.81, max_value=1.24), min_size=1, max_size=200),
    st.floats(min_value=0.001, max_value=0.5),
)
def test_batches_within_the_tolerance_never_drift(ratios: list[float], profiled: float) -> None:
    w = CostWatch(("m",), CostSettings(tolerance=0.25, window_s=5.0, sustain_s=0.0, min_batches=1, min_excess_ms=0))
    for i, r in enumerate(ratios):
        w.observe(0, i * 0.1, r * profiled, profiled)
        assert w.check(i * 0.1) is None


@settings(max_examples=60, deadline=None)
@given(st.floats(min_value=1.3, max_value=10.0), st.integers(min_value=1, max_value=40))
def test_a_steady_departure_is_decided_exactly_once_per_cooldown(factor: float, n: int) -> None:
    w = CostWatch(("m",), CostSettings(window_s=100.0, sustain_s=0.0, min_batches=1, cooldown_s=1000.0))
    decisions = []
    for i in range(n):
        w.observe(0, float(i), 0.1 * factor, 0.1)
        d = w.check(float(i))
        if d is not None:
            decisions.append(d)
    assert len(decisions) == 1
    assert decisions[0].departed[0].factor == pytest.approx(factor)
