"""Count series: checking, dropping zero bins, scaling, and placing arrivals inside bins."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadeserve.errors import TraceError
from cascadeserve.traces import arrivals_from_counts, as_counts, drop_zero_bins, scale_counts

counts_lists = st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=60)


def test_uniform_arrivals_are_evenly_spaced_inside_each_bin() -> None:
    arrivals = arrivals_from_counts([2, 0, 1], arrival="uniform")
    np.testing.assert_array_equal(arrivals, [0.25, 0.75, 2.5])


def test_uniform_arrivals_scale_with_the_bin_width() -> None:
    arrivals = arrivals_from_counts([1, 2], bin_s=60.0, arrival="uniform")
    np.testing.assert_array_equal(arrivals, [30.0, 75.0, 105.0])


def test_poisson_arrivals_stay_in_their_bins_and_repeat_with_the_seed() -> None:
    counts = [3, 0, 5, 1]
    first = arrivals_from_counts(counts, seed=7)
    np.testing.assert_array_equal(first, arrivals_from_counts(counts, seed=7))
    assert not np.array_equal(first, arrivals_from_counts(counts, seed=8))
    np.testing.assert_array_equal(np.bincount(np.floor(first).astype(int), minlength=4), counts)


def test_poisson_positions_look_uniform_within_the_bin() -> None:
    arrivals = arrivals_from_counts([100_000], arrival="poisson", seed=1)
    assert abs(arrivals.mean() - 0.5) < 0.01
    assert np.histogram(arrivals, bins=10, range=(0, 1))[0].min() > 9_500


def test_no_counts_give_no_arrivals() -> None:
    assert arrivals_from_counts([0, 0, 0]).size == 0
    assert arrivals_from_counts([]).size == 0


def test_millions_of_arrivals_are_vectorised() -> None:
    arrivals = arrivals_from_counts(np.full(1000, 2000), seed=3)
    assert arrivals.size == 2_000_000
    assert (np.diff(arrivals) >= 0).all()


@settings(max_examples=60, deadline=None)
@given(
    counts=counts_lists,
    bin_s=st.sampled_from([0.1, 0.5, 1.0, 60.0]),
    arrival=st.sampled_from(["poisson", "uniform"]),
    seed=st.integers(0, 2**32),
)
def test_arrivals_match_counts_sorted_and_inside_the_window(
    counts: list[int], bin_s: float, arrival: str, seed: int
) -> None:
    arrivals = arrivals_from_counts(counts, bin_s, arrival=arrival, seed=seed)
    assert arrivals.dtype == np.float64
    assert arrivals.size == sum(counts)
    assert (np.diff(arrivals) >= 0).all()
    if arrivals.size:
        assert arrivals[0] >= 0
        assert arrivals[-1] < len(counts) * bin_s
        bins = np.minimum(np.floor(arrivals / bin_s).astype(int), len(counts) - 1)
        assert np.abs(np.bincount(bins, minlength=len(counts)) - counts).sum() <= 2 * len(counts)


def test_unknown_arrival_process_is_named() -> None:
    with pytest.raises(TraceError, match=r"unknown arrival process 'gamma'; valid: poisson, uniform"):
        arrivals_from_counts([1], arrival="gamma")


def test_as_counts_accepts_integral_floats_and_rejects_the_rest() -> None:
    np.testing.assert_array_equal(as_counts([2.0, 0.0]), [2, 0])
    assert as_counts([2.0]).dtype == np.int64
    with pytest.raises(TraceError, match=r"count in bin 1 is negative: -3"):
        as_counts([1, -3, 2])
    with pytest.raises(TraceError, match=r"count in bin 0 is not a whole number: 1.5"):
        as_counts([1.5])
    with pytest.raises(TraceError, match="1-D"):
        as_counts([[1, 2]])
    with pytest.raises(TraceError, match="integers"):
        as_counts(["1"])


def test_scaling_puts_the_busiest_bin_exactly_at_max_qps() -> None:
    scaled = scale_counts([10, 40, 20, 0], 7600)
    np.testing.assert_array_equal(scaled, [1900, 7600, 3800, 0])
    assert scaled.dtype == np.int64


def test_scaling_rounds_to_the_nearest_integer() -> None:
    np.testing.assert_array_equal(scale_counts([1, 3, 2], 10), [3, 10, 7])


def test_scaling_per_minute_bins_targets_a_per_second_rate() -> None:
    np.testing.assert_array_equal(scale_counts([600, 1200], 60, bin_s=60.0), [1800, 3600])


def test_drop_zero_removes_empty_bins_before_scaling() -> None:
    np.testing.assert_array_equal(drop_zero_bins([0, 3, 0, 0, 6, 0]), [3, 6])
    np.testing.assert_array_equal(scale_counts([0, 3, 0, 0, 6, 0], 100, drop_zero=True), [50, 100])


@settings(max_examples=60, deadline=None)
@given(counts=counts_lists, max_qps=st.integers(1, 10_000))
def test_scaled_peak_always_equals_an_integer_max_qps(counts: list[int], max_qps: int) -> None:
    if max(counts) == 0:
        return
    scaled = scale_counts(counts, max_qps)
    assert scaled.max() == max_qps
    assert scaled.size == len(counts)
    assert (scaled >= 0).all()


def test_scaling_rejects_empty_traces_and_bad_targets() -> None:
    with pytest.raises(TraceError, match="no requests"):
        scale_counts([0, 0], 100)
    with pytest.raises(TraceError, match="no requests"):
        scale_counts([0, 0], 100, drop_zero=True)
    with pytest.raises(TraceError, match=r"max_qps must be a finite number > 0, got -5"):
        scale_counts([1], -5)
    with pytest.raises(TraceError, match="max_qps"):
        scale_counts([1], float("nan"))
