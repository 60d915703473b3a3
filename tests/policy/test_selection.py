"""exp3 and exp4: the weight updates on hand-computed cases, the pick, the ensemble vote."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadeserve.policy.selection import (
    SelectionState,
    exp3_pick,
    exp3_probabilities,
    exp3_update,
    exp4_combine,
    exp4_update,
)


def test_exp3_update_by_hand() -> None:
    # two alternatives, weights 1 and 1; gamma 0: p = (0.5, 0.5). Alternative 0 answers wrongly (loss 1), eta 0.1:
    # s_0 = 1 * exp(-0.1 * 1 / 0.5) = exp(-0.2) = 0.81873; s_1 = 1. Normalised: 0.45017, 0.54983.
    st0 = SelectionState.uniform(2)
    p = exp3_probabilities(st0, gamma=0.0)
    assert p == (0.5, 0.5)
    st1 = exp3_update(st0, 0, 1.0, p[0], eta=0.1)
    assert st1.weights[0] == pytest.approx(math.exp(-0.2) / (1 + math.exp(-0.2)))
    assert st1.weights[0] == pytest.approx(0.450166, abs=1e-6)
    assert st1.updates == 1 and st1.best() == 1
    assert exp3_update(st1, 1, 0.0, 0.5, eta=0.1).weights == pytest.approx(st1.weights)  # no loss: unchanged


def test_exp3_pick_follows_the_cumulative_probabilities() -> None:
    st0 = SelectionState((0.0, math.log(3.0)))  # weights 1:3 -> with gamma 0: 0.25, 0.75
    assert exp3_pick(st0, 0.2, gamma=0.0).alternative == 0
    pick = exp3_pick(st0, 0.3, gamma=0.0)
    assert pick.alternative == 1 and pick.probability == pytest.approx(0.75)
    # gamma 0.2 mixes in uniform exploration: 0.8 * 0.25 + 0.1 = 0.3
    assert exp3_probabilities(st0, gamma=0.2) == pytest.approx((0.3, 0.7))


def test_exp4_vote_confidence_and_update_by_hand() -> None:
    st0 = SelectionState((0.0, math.log(2.0), 0.0))  # weights 0.25, 0.5, 0.25
    ens = exp4_combine(st0, [3, 5, 3])
    assert ens.label == 3 and ens.confidence == pytest.approx(0.5)  # a tie 0.5 vs 0.5 goes to the lower label
    assert exp4_combine(st0, [3, 5, None]).label == 5  # a straggler's vote is left out
    st1 = exp4_update(st0, [0.0, 1.0, 0.0], eta=math.log(2.0))  # the wrong one's weight halves: 1, 1, 1
    assert st1.weights == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    with pytest.raises(ValueError, match="no alternative"):
        exp4_combine(st0, [None, None, None])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.booleans(), st.floats(0.05, 1.0)), max_size=300))
def test_weights_stay_finite_and_normalised(steps: list[tuple[int, bool, float]]) -> None:
    s = SelectionState.uniform(3)
    for alt, wrong, p in steps:
        s = exp3_update(s, alt, float(wrong), p, eta=0.5)
    w = s.weights
    assert all(math.isfinite(x) and x >= 0 for x in w) and sum(w) == pytest.approx(1.0)
    assert max(s.log_weights) == 0.0
