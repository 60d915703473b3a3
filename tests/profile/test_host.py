"""Host contention: the rule, who counts as busy at an instant, and the fit that measures a model's busy factor."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.property import property_settings

from cascadeserve.profile.host import (
    busy_at,
    contended,
    fit_contention,
    host_groups,
    host_peers,
    host_share,
    size_factors,
)


def test_the_rule_slows_a_batch_by_the_share_of_busy_devices() -> None:
    assert contended(0.010, 3.0, host_share(1, 2)) == pytest.approx(0.020)  # half the others busy: 1 + 2 x 0.5
    assert contended(0.010, 3.0, host_share(2, 2)) == pytest.approx(0.030)
    assert contended(0.010, 3.0, host_share(0, 2)) == 0.010
    assert contended(0.010, 1.0, 1.0) == 0.010  # no contention recorded: unchanged
    assert host_share(0, 0) == 0.0  # a one-device host has no others


def test_busy_means_started_before_and_ending_after_the_instant() -> None:
    busy = np.array([True, True, True, False])
    starts = np.array([0.0, 1.0, 0.5, 0.0])
    ends = np.array([2.0, 3.0, 1.0, 9.0])
    # at t=1: device 0 counts; device 1 starts at t (an engine may apply the two starts in any order), device 2
    # ends at t, device 3 is idle, and device 0 is asking about the others
    one = np.zeros(4, dtype=np.int64)  # all four on this host
    assert busy_at(1.0, busy, starts, ends, 3, one) == 1
    assert busy_at(1.0, busy, starts, ends, 0, one) == 0
    assert busy_at(1.5, busy, starts, ends, 3, one) == 2


def test_an_upstream_stages_device_is_a_host_of_its_own() -> None:
    group = host_groups([False, True, False, True])
    assert group.tolist() == [0, 1, 0, 2]
    assert [host_peers(group, d) for d in range(4)] == [1, 0, 1, 0]
    busy = np.array([True, True, True, True])
    starts, ends = np.zeros(4), np.full(4, 9.0)
    # at t=1 every device runs a batch: device 0 sees only device 2 (its one peer), the upstream ones see none
    assert [busy_at(1.0, busy, starts, ends, d, group) for d in range(4)] == [1, 0, 1, 0]


@property_settings(max_examples=40, deadline=None)
@given(st.floats(0.5, 3.0), st.floats(1.0, 3.0), st.integers(0, 2**16))
def test_the_fit_recovers_the_factors_from_batches_at_several_loads(alone: float, busy: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    shares = rng.choice([0.0, 0.5, 1.0], size=60)
    ratios = alone * (1.0 + (busy - 1.0) * shares)
    fit = fit_contention(ratios, shares)
    assert fit is not None
    assert fit.alone == pytest.approx(alone) and fit.busy_factor == pytest.approx(busy)
    assert fit.batches == 60 and fit.share == pytest.approx(shares.mean())


def test_no_fit_without_a_spread_of_loads_or_enough_batches() -> None:
    assert fit_contention(np.full(50, 1.3), np.full(50, 1.0)) is None  # always busy: only the mean is known
    assert fit_contention(np.array([1.0, 2.0]), np.array([0.0, 1.0])) is None  # too few batches
    # faster when busy (larger batches at load amortising a fixed cost) is no contention: the mean, busy factor 1
    fit = fit_contention(np.array([2.0, 1.0] * 10), np.array([0.0, 1.0] * 10))
    assert fit is not None and (fit.alone, fit.busy_factor) == (1.5, 1.0)


@property_settings(max_examples=40, deadline=None)
@given(st.floats(0.5, 2.0), st.floats(1.0, 2.0), st.floats(1.0, 1.6), st.integers(0, 2**16))
def test_the_fit_by_size_keeps_the_sizes_cost_apart_from_the_hosts_load(
    alone: float, busy: float, big: float, seed: int
) -> None:
    """Batches of 2 cost ``big`` times more (against the profile) than batches of 1 and form when the host is
    busier, as under load: the fit by size recovers both factors and the busy factor."""
    rng = np.random.default_rng(seed)
    sizes = rng.choice([1, 2], size=80)
    shares = np.where(sizes == 1, rng.choice([0.0, 0.5, 1.0], size=80), rng.choice([0.5, 1.0], size=80))
    ratios = np.where(sizes == 1, alone, alone * big) * (1.0 + (busy - 1.0) * shares)
    fit = fit_contention(ratios, shares, sizes)
    assert fit is not None
    assert fit.busy_factor == pytest.approx(busy, rel=1e-6)
    assert fit.by_size == {1: pytest.approx(alone, rel=1e-6), 2: pytest.approx(alone * big, rel=1e-6)}


def test_a_fit_blind_to_sizes_blames_the_hosts_load_for_what_larger_batches_cost() -> None:
    sizes = np.array([1] * 20 + [2] * 20)
    shares = np.array([0.0] * 10 + [1.0] * 10 + [1.0] * 20)  # the batches of 2 all formed with the host busy
    ratios = np.where(sizes == 1, 1.0, 1.3) * (1.0 + 0.1 * shares)  # busy factor 1.1, batches of 2 cost x1.3
    blind = fit_contention(ratios, shares)
    by_size = fit_contention(ratios, shares, sizes)
    assert blind is not None and by_size is not None
    assert blind.busy_factor > 1.3  # the size's cost read as contention
    assert by_size.busy_factor == pytest.approx(1.1)
    assert by_size.by_size == {1: pytest.approx(1.0), 2: pytest.approx(1.3)}


def test_a_size_needs_ten_batches_for_a_factor_of_its_own() -> None:
    sizes = np.array([1] * 10 + [2] * 9)
    assert size_factors(np.array([1.2] * 10 + [1.5] * 9), sizes) == {1: pytest.approx(1.2)}
    assert size_factors(np.array([2.4] * 10 + [1.5] * 9), sizes, 2.0) == {1: pytest.approx(1.2)}


def test_one_stalled_batch_is_not_its_sizes_cost() -> None:
    """Nine batches of 4 at x1.3 and one stalled at x60: the size's factor is x1.3, as the model's own factor
    leaves out its top 1 % (the plain mean read x7.2)."""
    got = size_factors(np.array([1.3] * 9 + [60.0]), np.array([4] * 10))
    assert got == {4: pytest.approx(1.3)}
