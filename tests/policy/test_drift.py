"""Load drift: range weights, the KS distance, appendix C.2's scale factor, and when the detector re-plans."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadeserve.policy.drift import LoadDriftDetector, ks_distance, range_weights, scale_factor


def test_range_weights_bin_measurements_into_the_plans_ranges() -> None:
    w = range_weights(np.array([0, 10, 24.9, 25, 60, 99, 100, 500]), 100, 4)
    assert w.tolist() == [3 / 8, 1 / 8, 1 / 8, 3 / 8]  # 100 and 500 count for the last range
    assert range_weights(np.array([]), 100, 4).tolist() == [0.25] * 4


def test_ks_distance_is_the_largest_cdf_gap() -> None:
    assert ks_distance(np.array([0.5, 0.5, 0, 0]), np.array([0, 0, 0.5, 0.5])) == pytest.approx(1.0)
    assert ks_distance(np.array([0.4, 0.3, 0.2, 0.1]), np.array([0.4, 0.3, 0.2, 0.1])) == 0.0
    assert ks_distance(np.array([0.7, 0.1, 0.1, 0.1]), np.array([0.4, 0.3, 0.2, 0.1])) == pytest.approx(0.3)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.1, 1e4), min_size=5, max_size=200), st.floats(0.01, 100))
def test_scale_factor_undoes_a_linear_scaling(qps: list[float], f: float) -> None:
    planned = np.array(qps)
    assert scale_factor(planned / f, planned) == pytest.approx(f, rel=1e-9)


def test_detector_waits_notifies_cools_down_and_follows_a_new_plan() -> None:
    zipf = np.array([0.6, 0.25, 0.1, 0.05])
    det = LoadDriftDetector(zipf, 100.0, mode="auto", window_ticks=100, min_ticks=50, threshold=0.3, cooldown_s=60)
    for _ in range(49):
        det.observe(90.0)  # all at the peak: far from the plan
    assert det.decide(0.0) is None  # 49 ticks: too few
    det.observe(90.0)
    d = det.decide(1.0)
    assert d is not None and d.action == "replan" and d.distance == pytest.approx(0.95)
    assert d.measured == (0.0, 0.0, 0.0, 1.0)
    assert det.decide(30.0) is None  # cooling down
    det.replanned(np.array(d.measured))
    assert det.decide(120.0) is None  # the new plan fits what is measured


def test_detector_stays_quiet_on_the_planned_load_and_when_off() -> None:
    planned = np.array([0.5, 0.3, 0.2])
    det = LoadDriftDetector(planned, 30.0, window_ticks=100, min_ticks=10, threshold=0.1)
    for q in [5.0] * 50 + [15.0] * 30 + [25.0] * 20:
        det.observe(q)
    assert det.decide(0.0) is None
    off = LoadDriftDetector(planned, 30.0, mode="off", window_ticks=10, min_ticks=1)
    off.observe(29.0)
    assert off.decide(0.0) is None
    with pytest.raises(ValueError, match="replan mode"):
        LoadDriftDetector(planned, 30.0, mode="sometimes")  # type: ignore[arg-type]


def test_min_ticks_counts_ticks_since_the_start_so_a_shorter_window_skips_the_start() -> None:
    # a uniform plan over 3 ranges of 10 QPS; the load starts at 0 (the start's transient), then holds 25 QPS
    planned = np.array([1 / 3, 1 / 3, 1 / 3])
    det = LoadDriftDetector(planned, 30.0, mode="auto", window_ticks=10, min_ticks=20, threshold=0.3)
    for _ in range(10):
        det.observe(0.0)
    for _ in range(9):
        det.observe(25.0)
    assert det.decide(1.9) is None  # 19 ticks seen: too early, even though the window is full
    det.observe(25.0)
    d = det.decide(2.0)
    # the window holds the last 10 ticks only: the zeros of the start are out of the weights re-planned for
    assert d is not None and d.measured == pytest.approx((0.0, 0.0, 1.0))
    with pytest.raises(ValueError, match="window_ticks >= 1"):
        LoadDriftDetector(planned, 30.0, window_ticks=0, min_ticks=1)
