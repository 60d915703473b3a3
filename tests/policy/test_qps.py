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


def test_a_stretched_window_reads_a_slow_steady_load() -> None:
    # 5 QPS (one arrival every 0.2 s): one 100 ms tick reads 0 or 10; a window of 20 arrivals reads 5
    one, stretched = QpsMeter(0.1), QpsMeter(0.1, min_arrivals=20)
    readings_one, readings_stretched = [], []
    for k in range(1, 101):
        if k % 2 == 0:
            one.record()
            stretched.record()
        readings_one.append(one.tick(k * 0.1))
        readings_stretched.append(stretched.tick(k * 0.1))
    assert {round(r, 6) for r in readings_one} == {0.0, 10.0}
    # 39 or 40 ticks back hold 20 arrivals: 20 / 3.9 s or 20 / 4.0 s
    assert all(r in (pytest.approx(20 / 3.9), pytest.approx(5.0)) for r in readings_stretched[40:])


def test_a_stretched_window_is_one_tick_at_high_rates_and_at_most_the_cap() -> None:
    meter = QpsMeter(0.1, min_arrivals=20)
    meter.record(30)
    assert meter.tick(0.1) == pytest.approx(300.0)  # one tick already holds 20
    meter.record(25)
    assert meter.tick(0.2) == pytest.approx(250.0)  # the last tick only, not the mean of both
    quiet = QpsMeter(0.1, min_arrivals=20)
    quiet.record(1)
    for k in range(1, 201):  # 20 s, one arrival at the start: the window stops at MAX_QPS_WINDOW_S back
        r = quiet.tick(k * 0.1)
    assert r == 0.0 and quiet.max_ticks == 50


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=80), st.integers(0, 30), st.integers(1, 60))
def test_the_compiled_twin_reads_what_the_meter_reads(counts: list[int], k: int, max_ticks: int) -> None:
    # the compiled simulator calls windowed_qps on its cumulative counts; the runtime's meter on its history
    import numpy as np

    from cascadeserve.policy.kernels import compiled, windowed_qps

    cum = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    times = 0.1 * np.arange(len(cum), dtype=np.float64)
    twin = compiled()["windowed_qps"]
    for w in range(1, len(cum)):
        assert twin(cum, times, w, k, max_ticks) == windowed_qps(cum, times, w, k, max_ticks)
