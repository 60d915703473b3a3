"""The p99-fit batch limit: the fit on hand-computed points, exploration, and the cap following a slowdown."""

from __future__ import annotations

import numpy as np
import pytest

from cascadeserve.policy.quantile import QuantileBatchLimit, QuantileFit, fit_p99


def test_fit_on_a_line_is_the_line() -> None:
    sizes = np.array([1, 2, 4, 8, 16], dtype=float)
    fit = fit_p99(sizes, 0.001 + 0.0005 * sizes)
    assert fit is not None
    assert fit.slope == pytest.approx(0.0005) and fit.intercept == pytest.approx(0.001)
    assert fit.largest_within(0.005) == 8  # 1 ms + 8 * 0.5 ms = 5 ms
    assert fit_p99(np.array([4.0, 4.0]), np.array([0.1, 0.2])) is None  # one size: no slope


def test_the_intercept_covers_the_99th_percentile_of_the_residuals() -> None:
    sizes = np.tile(np.array([1.0, 2.0, 3.0, 4.0]), 50)
    noise = np.zeros(200)
    noise[::50] = 0.004  # 4 of 200 batches (2 %) ran 4 ms long
    fit = fit_p99(sizes, 0.001 * sizes + noise)
    assert fit is not None
    assert fit.intercept > 0.0035  # the p99 line sits above the stragglers' level, not the mean
    assert QuantileFit(0.002, 0.0).largest_within(0.001) == 0


def test_explores_additively_then_takes_the_fitted_size() -> None:
    q = QuantileBatchLimit(0.005, min_points=4, step=2, grow=2.0)
    assert q.limit(0) == 1
    for _ in range(3):  # below min_points: +step after a batch within the target
        size = q.limit(0)
        q.observe(0, 0.001 + 0.0005 * size, size)
    assert q.limit(0) == 7
    for _ in range(10):
        size = q.limit(0)
        d = q.observe(0, 0.001 + 0.0005 * size, size)
    assert d.fit is not None
    assert q.limit(0) == 8  # the largest batch whose p99 fits 5 ms
    assert q.limit(1) == 1  # per replica


def test_the_cap_falls_when_the_device_slows_down() -> None:
    q = QuantileBatchLimit(0.005, window=32, min_points=4)
    for _ in range(40):
        size = q.limit(0)
        q.observe(0, 0.001 + 0.0005 * size, size)
    assert q.limit(0) == 8
    for _ in range(3):  # the device now takes twice as long
        size = q.limit(0)
        q.observe(0, 2 * (0.001 + 0.0005 * size), size)
    assert q.limit(0) < 8
    for _ in range(40):
        size = q.limit(0)
        q.observe(0, 2 * (0.001 + 0.0005 * size), size)
    assert q.limit(0) == 3  # 2 ms + 3 * 1 ms = 5 ms


def test_rejects_bad_settings() -> None:
    with pytest.raises(ValueError):
        QuantileBatchLimit(0.0)
    with pytest.raises(ValueError):
        QuantileBatchLimit(0.01, quantile=1.0)
