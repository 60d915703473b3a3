"""The QPS meter: arrivals per second over the window that the caller's tick closes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadeserve.policy import QpsMeter


def test_rate_over_one_window() -> None:
    meter = QpsMeter()
    assert meter.window_s == 0.1
    for _ in range(5):
        meter.record()
    assert meter.tick(0.1) == pytest.approx(50.0)


def test_each_tick_starts_a_new_window() -> None:
    meter = QpsMeter(0.1)
    meter.record(3)
    assert meter.tick(0.1) == pytest.approx(30.0)
    assert meter.tick(0.2) == 0.0  # nothing arrived in (0.1, 0.2]
    meter.record(2)
    meter.record()
    assert meter.tick(0.3) == pytest.approx(30.0)


def test_rate_uses_the_real_elapsed_time_not_the_nominal_window() -> None:
    meter = QpsMeter(0.1, start=10.0)
    meter.record(4)
    assert meter.tick(10.5) == pytest.approx(8.0)  # a late tick: 4 arrivals over 0.5 s
    meter.record(1)
    assert meter.tick(10.75) == pytest.approx(4.0)


def test_zero_elapsed_time_gives_zero_and_resets() -> None:
    meter = QpsMeter(start=1.0)
    meter.record(7)
    assert meter.tick(1.0) == 0.0
    assert meter.tick(2.0) == 0.0  # the count was reset by the first tick


def test_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        QpsMeter(0.0)
    with pytest.raises(ValueError, match="positive"):
        QpsMeter(-0.1)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1000), st.floats(0.001, 10.0)), min_size=1, max_size=20))
def test_rates_integrate_back_to_the_arrival_count(windows: list[tuple[int, float]]) -> None:
    meter = QpsMeter()
    now = 0.0
    total = 0.0
    for count, dt in windows:
        meter.record(count)
        now += dt
        rate = meter.tick(now)
        assert rate >= 0.0
        total += rate * dt
    assert total == pytest.approx(sum(c for c, _ in windows), rel=1e-6)
