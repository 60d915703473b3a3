"""Smooth weighted round-robin: nginx's exact sequence, pick_many == repeated pick, bounded drift from the shares."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cascadeserve.policy import SmoothWeightedRoundRobin, swrr_sequence


def test_nginx_sequence_for_weights_5_1_1() -> None:
    # nginx's documented example: a a b a c a a
    assert "".join("abc"[i] for i in swrr_sequence([5, 1, 1])) == "aabacaa"
    router = SmoothWeightedRoundRobin([5 / 7, 1 / 7, 1 / 7], resolution=7)
    assert "".join("abc"[router.pick()] for _ in range(14)) == "aabacaa" * 2


def test_small_sequences() -> None:
    assert swrr_sequence([1]).tolist() == [0]
    assert swrr_sequence([1, 1]).tolist() == [0, 1]  # ties go to the lower index
    assert swrr_sequence([2, 1]).tolist() == [0, 1, 0]
    assert swrr_sequence([0, 3]).tolist() == [1, 1, 1]
    assert swrr_sequence([1, 2, 3]).tolist() == [2, 1, 0, 2, 1, 2]


def test_shares_are_reduced_to_their_smallest_period() -> None:
    router = SmoothWeightedRoundRobin([0.5, 0.25, 0.25])  # 500:250:250 -> 2:1:1
    assert router.pick_many(8).tolist() == [0, 1, 2, 0] * 2
    assert SmoothWeightedRoundRobin([1.0]).pick_many(3).tolist() == [0, 0, 0]


def test_zero_share_replicas_are_never_picked() -> None:
    router = SmoothWeightedRoundRobin([0.5, 0.0, 0.5, 0.0])
    picks = router.pick_many(1000)
    assert set(picks.tolist()) == {0, 2}
    assert np.count_nonzero(picks == 0) == 500


def test_shares_too_small_to_round_fall_back_to_the_largest() -> None:
    router = SmoothWeightedRoundRobin([0.0001, 0.0003, 0.0002])
    assert router.pick_many(5).tolist() == [1] * 5


@pytest.mark.parametrize("shares", [[], [0.0, 0.0], [-1.0, 0.0]])
def test_no_positive_share_is_an_error(shares: list[float]) -> None:
    with pytest.raises(ValueError, match="positive"):
        SmoothWeightedRoundRobin(shares)


@pytest.mark.parametrize("weights", [[0, 0], [1, -1]])
def test_swrr_sequence_rejects_bad_weights(weights: list[int]) -> None:
    with pytest.raises(ValueError, match="non-negative"):
        swrr_sequence(weights)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6).filter(lambda s: sum(s) > 0.01),
    st.lists(st.integers(0, 40), min_size=1, max_size=10),
)
def test_pick_many_equals_repeated_pick(shares: list[float], chunks: list[int]) -> None:
    one, many = SmoothWeightedRoundRobin(shares), SmoothWeightedRoundRobin(shares)
    for n in chunks:
        expected = [one.pick() for _ in range(n)]
        got = many.pick_many(n)
        assert got.dtype == np.int64
        assert got.tolist() == expected


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=6).filter(lambda w: sum(w) > 0), st.integers(1, 300))
@example(weights=[1, 1, 1, 5, 5, 5], n=11)
def test_realised_counts_stay_within_two_of_share_times_n(weights: list[int], n: int) -> None:
    total = sum(weights)
    shares = [w / total for w in weights]
    picks = SmoothWeightedRoundRobin(shares, resolution=total).pick_many(n)
    counts = np.zeros(len(weights))
    for k, i in enumerate(picks.tolist(), start=1):  # every prefix
        counts[i] += 1
        # Within one request almost always, but not always: weights 1,1,1,5,5,5 drift by 1.06 after 11 picks
        # (hypothesis found it; an exhaustive search over weights up to 6 finds nothing worse).
        assert np.all(np.abs(counts - np.asarray(shares) * k) < 2.0)
    for i, w in enumerate(weights):
        if w == 0:
            assert counts[i] == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 20), min_size=1, max_size=6).filter(lambda w: sum(w) > 0))
def test_one_period_realises_the_weights_exactly(weights: list[int]) -> None:
    seq = swrr_sequence(weights)
    assert len(seq) == sum(weights)
    np.testing.assert_array_equal(np.bincount(seq, minlength=len(weights)), weights)
