"""Synthetic load patterns: exact counts, randomness where promised, repeatable seeds."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadeserve.errors import TraceError
from cascadeserve.traces import Trace, constant, piecewise, poisson, spike, step, zipf


def assert_valid(trace: Trace) -> None:
    arrivals = trace.arrivals
    assert (np.diff(arrivals) >= 0).all()
    if arrivals.size:
        assert arrivals[0] >= 0
        assert arrivals[-1] < trace.duration_s


def test_constant_rate_has_the_same_count_every_second() -> None:
    trace = constant(200, 60)
    assert len(trace) == 12_000
    assert trace.duration_s == 60
    assert set(trace.per_second_counts().tolist()) == {200}
    assert_valid(trace)


def test_constant_uniform_arrivals_are_evenly_spaced() -> None:
    trace = constant(4, 2, arrival="uniform")
    np.testing.assert_allclose(trace.arrivals, [0.125, 0.375, 0.625, 0.875, 1.125, 1.375, 1.625, 1.875])


def test_a_fractional_rate_accumulates_exactly() -> None:
    trace = constant(0.5, 10, arrival="uniform")
    np.testing.assert_array_equal(trace.per_second_counts(), [0, 1] * 5)
    assert len(constant(2.5, 3.5)) == 8


def test_poisson_process_has_the_right_rate_and_exponential_gaps() -> None:
    trace = poisson(500, 100, seed=4)
    assert_valid(trace)
    assert len(trace) == pytest.approx(50_000, rel=0.02)
    gaps = np.diff(trace.arrivals)
    assert gaps.mean() == pytest.approx(1 / 500, rel=0.02)
    assert gaps.std() == pytest.approx(1 / 500, rel=0.03)  # exponential: std == mean
    counts = trace.per_second_counts()
    assert counts.var() == pytest.approx(counts.mean(), rel=0.3)  # Poisson counts: variance == mean


def test_poisson_repeats_with_its_seed_and_allows_zero_rate() -> None:
    np.testing.assert_array_equal(poisson(50, 10, seed=1).arrivals, poisson(50, 10, seed=1).arrivals)
    assert not np.array_equal(poisson(50, 10, seed=1).arrivals, poisson(50, 10, seed=2).arrivals)
    assert len(poisson(0, 10)) == 0


def test_step_switches_rate_at_the_given_time() -> None:
    counts = step(100, 800, 30, 60).per_second_counts()
    np.testing.assert_array_equal(counts, [100] * 30 + [800] * 30)


def test_step_inside_a_second_splits_it() -> None:
    trace = step(10, 30, 1.5, 3, arrival="uniform")
    np.testing.assert_array_equal(trace.per_second_counts(), [10, 20, 30])
    second = trace.arrivals[(trace.arrivals >= 1) & (trace.arrivals < 2)]
    assert (second < 1.5).sum() == 5


def test_spike_is_a_burst_on_a_base_load() -> None:
    trace = spike(100, 1000, 20, 5, 60)
    counts = trace.per_second_counts()
    np.testing.assert_array_equal(counts, [100] * 20 + [1000] * 5 + [100] * 35)
    assert trace.max_qps == 1000
    assert_valid(trace)


def test_spike_at_the_start_or_running_off_the_end() -> None:
    np.testing.assert_array_equal(spike(1, 9, 0, 2, 4).per_second_counts(), [9, 9, 1, 1])
    np.testing.assert_array_equal(spike(1, 9, 3, 5, 4).per_second_counts(), [1, 1, 1, 9])


def test_zipf_levels_are_low_most_of_the_time() -> None:
    trace = zipf(1000, 2000, exponent=1.1, levels=10, seed=5)
    counts = trace.per_second_counts()
    levels, freq = np.unique(counts, return_counts=True)
    assert set(levels.tolist()) <= {100 * k for k in range(1, 11)}
    assert levels[0] == 100
    assert freq[0] == freq.max()
    assert freq[0] > 3 * freq[-1]
    assert counts.max() <= 1000
    assert_valid(trace)


def test_zipf_holds_each_level_for_a_period() -> None:
    counts = zipf(100, 40, levels=4, seconds_per_level=4, seed=2).per_second_counts()
    blocks = counts.reshape(10, 4)
    assert (blocks == blocks[:, :1]).all()


def test_zipf_repeats_with_its_seed() -> None:
    first = zipf(300, 30, seed=9)
    np.testing.assert_array_equal(first.arrivals, zipf(300, 30, seed=9).arrivals)
    assert not np.array_equal(first.arrivals, zipf(300, 30, seed=10).arrivals)


@settings(max_examples=40, deadline=None)
@given(
    base=st.floats(0, 300),
    peak=st.floats(0, 2000),
    at=st.floats(0, 9.9),
    width=st.floats(0.01, 20),
    duration=st.floats(10, 20),
    arrival=st.sampled_from(["poisson", "uniform"]),
    seed=st.integers(0, 100),
)
def test_spike_invariants(
    base: float, peak: float, at: float, width: float, duration: float, arrival: str, seed: int
) -> None:
    trace = spike(base, peak, at, width, duration, arrival=arrival, seed=seed)
    assert_valid(trace)
    burst = min(width, duration - at)
    expected = base * (duration - burst) + peak * burst
    assert abs(len(trace) - expected) <= 1.0 + 1e-6 * expected


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: constant(-1, 10), "qps must be a finite number >= 0, got -1"),
        (lambda: constant(10, 0), "duration_s must be a finite number > 0"),
        (lambda: constant(10, 5, arrival="bursty"), "unknown arrival process 'bursty'"),
        (lambda: step(1, 2, 10, 10), r"at_s must lie inside the trace"),
        (lambda: spike(1, 2, 3, 0, 10), "width_s must be a finite number > 0"),
        (lambda: zipf(100, 10, levels=0), "levels must be a whole number >= 1"),
        (lambda: zipf(0, 10), "max_qps must be a finite number > 0"),
        (lambda: piecewise([1.0], [5.0], 10), "breaks must start at 0"),
        (lambda: piecewise([0.0], [-5.0], 10), "rates must be finite and >= 0"),
    ],
)
def test_bad_parameters_are_named(make: Callable[[], Trace], message: str) -> None:
    with pytest.raises(TraceError, match=message):
        make()
