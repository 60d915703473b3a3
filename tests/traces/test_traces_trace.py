"""The Trace type: invariants, load statistics and windows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadeserve.errors import TraceError
from cascadeserve.traces import Trace


def test_statistics_of_a_small_trace() -> None:
    trace = Trace(np.array([0.1, 0.2, 0.9, 1.5, 3.99]), 4.0, "hand-made")
    assert len(trace) == 5
    assert trace.mean_qps == pytest.approx(1.25)
    assert trace.max_qps == 3
    np.testing.assert_array_equal(trace.per_second_counts(), [3, 1, 0, 1])
    assert trace.per_second_counts().dtype == np.int64


def test_per_second_counts_cover_a_partial_last_second() -> None:
    trace = Trace(np.array([0.5, 2.2]), 2.5)
    np.testing.assert_array_equal(trace.per_second_counts(), [1, 0, 1])


def test_qps_samples_measure_whole_windows_only() -> None:
    trace = Trace(np.array([0.05, 0.06, 0.15, 0.95, 1.0]), 1.05)
    samples = trace.qps_samples(0.1)
    assert samples.size == 10
    np.testing.assert_allclose(samples[:3], [20.0, 10.0, 0.0])
    assert samples[9] == pytest.approx(10.0)
    np.testing.assert_allclose(Trace(np.array([0.5]), 1.0).qps_samples(0.5), [0.0, 2.0])


def test_qps_samples_need_one_whole_window() -> None:
    with pytest.raises(TraceError, match="no whole 2 s window"):
        Trace(np.array([0.5]), 1.0).qps_samples(2.0)
    with pytest.raises(TraceError, match="window_s"):
        Trace(np.array([0.5]), 1.0).qps_samples(0)


def test_an_empty_trace_is_allowed() -> None:
    trace = Trace(np.zeros(0), 10.0)
    assert len(trace) == 0
    assert trace.max_qps == 0
    assert trace.mean_qps == 0
    assert trace.per_second_counts().tolist() == [0] * 10


def test_window_cuts_and_shifts() -> None:
    trace = Trace(np.array([0.5, 1.0, 1.5, 2.0, 2.5]), 3.0, "t")
    part = trace.window(1.0, 1.0)
    np.testing.assert_array_equal(part.arrivals, [0.0, 0.5])
    assert part.duration_s == 1.0
    assert part.source == "t, window 1:1 s"
    np.testing.assert_array_equal(trace.window(0, 3).arrivals, trace.arrivals)


def test_window_past_the_end_is_an_error() -> None:
    trace = Trace(np.array([0.5]), 3.0)
    with pytest.raises(TraceError, match=r"window 2:5 ends at 7 s, past the end of the trace \(3 s\)"):
        trace.window(2, 5)
    with pytest.raises(TraceError, match="window start"):
        trace.window(-1, 1)


@pytest.mark.parametrize(
    ("arrivals", "duration", "message"),
    [
        ([0.5, 0.2], 1.0, "sorted"),
        ([0.5, 1.0], 1.0, r"must lie in \[0, 1\)"),
        ([-0.1], 1.0, r"must lie in \[0, 1\)"),
        ([float("nan")], 1.0, "finite"),
        ([[0.1]], 1.0, "1-D"),
        ([0.1], 0.0, "duration_s must be a finite number > 0"),
    ],
)
def test_invalid_traces_are_rejected(arrivals: list[float], duration: float, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        Trace(np.array(arrivals), duration)


def test_arrivals_are_read_only_and_copied_from_the_caller() -> None:
    mine = np.array([0.1, 0.2])
    trace = Trace(mine, 1.0)
    mine[0] = 0.15
    assert trace.arrivals[0] == 0.1
    with pytest.raises(ValueError, match="read-only"):
        trace.arrivals[0] = 0.0


def test_from_counts_and_repr() -> None:
    trace = Trace.from_counts([2, 0, 1], arrival="uniform", source="demo")
    np.testing.assert_array_equal(trace.arrivals, [0.25, 0.75, 2.5])
    assert trace.duration_s == 3.0
    assert repr(trace) == "Trace(requests=3, duration_s=3, mean_qps=1, max_qps=2, source='demo')"
    with pytest.raises(TraceError, match="empty count series"):
        Trace.from_counts([])


@settings(max_examples=50, deadline=None)
@given(
    counts=st.lists(st.integers(0, 30), min_size=1, max_size=40),
    start=st.integers(0, 39),
    length=st.integers(1, 40),
    seed=st.integers(0, 1000),
)
def test_window_of_a_trace_from_counts_keeps_those_seconds(
    counts: list[int], start: int, length: int, seed: int
) -> None:
    trace = Trace.from_counts(counts, seed=seed)
    if start + length > len(counts):
        with pytest.raises(TraceError):
            trace.window(start, length)
        return
    part = trace.window(start, length)
    np.testing.assert_array_equal(part.per_second_counts(), counts[start : start + length])
    assert part.max_qps == max(counts[start : start + length])
    assert sum(part.qps_samples(1.0)) == len(part)
