"""RuntimeCurve: exact linear inter- and extrapolation, the single-point rule, and the simulator's table."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadeserve.profile import RuntimeCurve

# 1 -> 2 ms, 4 -> 5 ms, 8 -> 13 ms: slope 1 ms/sample on the first segment, 2 ms/sample on the last.
CURVE = RuntimeCurve((1, 4, 8), (2.0, 5.0, 13.0))


def test_measured_points_are_returned_exactly() -> None:
    assert float(CURVE.ms_at(1)) == 2.0
    assert float(CURVE.ms_at(4)) == 5.0
    assert float(CURVE.ms_at(8)) == 13.0


def test_interpolates_linearly_between_points() -> None:
    assert float(CURVE.ms_at(2)) == 3.0
    assert float(CURVE.ms_at(3)) == 4.0
    assert float(CURVE.ms_at(6)) == 9.0
    assert float(CURVE.ms_at(2.5)) == 3.5


def test_extrapolates_along_the_last_segment_past_the_largest() -> None:
    assert float(CURVE.ms_at(10)) == 17.0
    assert float(CURVE.ms_at(16)) == 29.0
    assert float(CURVE.ms_at(64)) == 125.0


def test_extrapolates_along_the_first_segment_below_the_smallest() -> None:
    curve = RuntimeCurve((2, 4), (4.0, 6.0))
    assert float(curve.ms_at(1)) == 3.0
    assert float(curve.ms_at(0)) == 2.0


def test_extrapolation_below_is_floored_at_a_small_positive_time() -> None:
    curve = RuntimeCurve((2, 4), (1.0, 10.0))  # slope 4.5: batch 1 would take -3.5 ms
    assert float(curve.ms_at(1)) == pytest.approx(1e-6)
    assert float(curve.ms_at(1)) > 0


def test_single_point_curve_scales_per_sample() -> None:
    curve = RuntimeCurve((4,), (8.0,))
    assert float(curve.ms_at(1)) == 2.0
    assert float(curve.ms_at(2)) == 4.0
    assert float(curve.ms_at(4)) == 8.0
    assert float(curve.ms_at(8)) == 16.0


def test_ms_at_is_vectorised() -> None:
    np.testing.assert_array_equal(CURVE.ms_at(np.array([1, 2, 4, 6, 8, 10])), [2.0, 3.0, 5.0, 9.0, 13.0, 17.0])


def test_scalar_helpers() -> None:
    assert CURVE.seconds(4) == 0.005
    assert CURVE.per_sample_ms(4) == 1.25
    assert CURVE.per_sample_ms(1) == 2.0
    assert CURVE.per_sample_ms(10) == 1.7


def test_table_is_seconds_indexed_by_batch_size_with_zero_at_zero() -> None:
    table = CURVE.table(10)
    assert isinstance(table, list)
    assert len(table) == 11
    assert table[0] == 0.0
    np.testing.assert_allclose(table[1:], [0.002, 0.003, 0.004, 0.005, 0.007, 0.009, 0.011, 0.013, 0.015, 0.017])
    assert CURVE.table(10) is table  # cached
    assert RuntimeCurve((4,), (8.0,)).table(2) == [0.0, 0.002, 0.004]


def test_mapping_round_trip_sorts_batch_sizes() -> None:
    curve = RuntimeCurve.from_mapping({8: 13.0, 1: 2.0, 4: 5.0})
    assert curve == CURVE
    assert curve.batch_sizes == (1, 4, 8)
    assert curve.as_mapping() == {1: 2.0, 4: 5.0, 8: 13.0}


@pytest.mark.parametrize(
    ("sizes", "ms", "match"),
    [
        ((), (), "at least one"),
        ((1, 2), (1.0,), "differ in length"),
        ((2, 1), (1.0, 2.0), "strictly increasing"),
        ((1, 1), (1.0, 2.0), "strictly increasing"),
        ((0, 2), (1.0, 2.0), "start at 1"),
        ((1, 2), (1.0, 0.0), "positive"),
        ((1, 2), (1.0, -1.0), "positive"),
        ((1, 2), (1.0, float("nan")), "positive"),
        ((1, 2), (1.0, float("inf")), "positive"),
    ],
)
def test_invalid_curves_are_rejected(sizes: tuple[int, ...], ms: tuple[float, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RuntimeCurve(sizes, ms)


@st.composite
def curves(draw: st.DrawFn) -> RuntimeCurve:
    sizes = sorted(draw(st.sets(st.integers(1, 256), min_size=1, max_size=6)))
    steps = draw(st.lists(st.floats(0.0, 50.0), min_size=len(sizes), max_size=len(sizes)))
    ms = np.cumsum(np.asarray(steps) + 0.01).tolist()  # strictly increasing, positive
    return RuntimeCurve(tuple(sizes), tuple(ms))


@settings(max_examples=100, deadline=None)
@given(curves())
def test_curve_passes_through_its_points_and_is_monotone(curve: RuntimeCurve) -> None:
    np.testing.assert_allclose(curve.ms_at(np.array(curve.batch_sizes)), curve.ms, rtol=1e-12)
    values = curve.ms_at(np.arange(1, 400))
    assert np.all(values > 0)
    assert np.all(np.diff(values) >= -1e-9)


@settings(max_examples=100, deadline=None)
@given(curves())
def test_curve_is_linear_between_adjacent_points(curve: RuntimeCurve) -> None:
    xs, ys = curve.batch_sizes, curve.ms
    for (x0, y0), (x1, y1) in zip(zip(xs, ys, strict=True), zip(xs[1:], ys[1:], strict=True), strict=False):
        mid = (x0 + x1) / 2
        assert float(curve.ms_at(mid)) == pytest.approx((y0 + y1) / 2, rel=1e-9)


@settings(max_examples=50, deadline=None)
@given(curves(), st.integers(0, 300))
def test_table_agrees_with_ms_at(curve: RuntimeCurve, max_batch: int) -> None:
    table = curve.table(max_batch)
    assert len(table) == max_batch + 1
    assert table[0] == 0.0
    if max_batch:
        np.testing.assert_allclose(table[1:], curve.ms_at(np.arange(1, max_batch + 1)) / 1000.0, rtol=1e-12)
