"""SP2's QPS ranges and distributions."""

from __future__ import annotations

import numpy as np
import pytest

from cascadeserve.errors import CascadeServeError
from cascadeserve.planner import ZIPF_EXPONENT, QpsDistribution, qps_ranges, qps_scale_for


def test_ranges_are_equal_and_cover_zero_to_max() -> None:
    r = qps_ranges(1000, 4)
    assert r == [(0.0, 250.0), (250.0, 500.0), (500.0, 750.0), (750.0, 1000.0)]
    with pytest.raises(CascadeServeError):
        qps_ranges(0, 4)


def test_zipf_weights_fall_with_qps() -> None:
    w = QpsDistribution.parse("zipf").weights(100, 5)
    assert ZIPF_EXPONENT == 1.1
    assert w.sum() == pytest.approx(1.0)
    assert np.all(np.diff(w) < 0)
    assert w[0] / w[1] == pytest.approx(2**1.1)
    flat = QpsDistribution.parse("zipf:0").weights(100, 5)
    assert np.allclose(flat, 0.2)


def test_empirical_weights_come_from_the_trace() -> None:
    d = QpsDistribution.parse("trace:synthetic:step:low=10,high=90,at=6,duration=10")
    w = d.weights(100, 10)
    assert w.sum() == pytest.approx(1.0)
    # 100 ms windows are noisy, but the 6 s low step sits in the lowest ranges and the 4 s high step near the top
    assert w[:3].sum() > 0.4
    assert w[7:].sum() > 0.25
    assert w[3:7].sum() < 0.2


@pytest.mark.parametrize("bad", ["uniform", "zipf:x", "zipf:-1", "trace:"])
def test_bad_specs_are_rejected(bad: str) -> None:
    with pytest.raises(CascadeServeError):
        QpsDistribution.parse(bad)


def test_qps_scale_keeps_accuracy_when_load_is_heavier_than_planned() -> None:
    highs, accs = [100.0, 200.0], [0.9, 0.7]
    assert qps_scale_for(highs, accs, np.array([50.0, 50.0, 150.0]), 0.8) == 1.0
    heavy = np.array([150.0] * 3 + [50.0])
    s = qps_scale_for(highs, accs, heavy, 0.8)
    assert 0 < s < 1
    g = np.minimum(np.searchsorted(highs, heavy * s, side="right"), 1)
    assert np.asarray(accs)[g].mean() >= 0.8
