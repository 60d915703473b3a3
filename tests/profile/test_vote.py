"""Vote stages (profile/vote.py): the vote rule on small exact cases and as a property, the stage's costs, and which
votes the planner is offered."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve, Vote, useful_votes, with_votes
from cascadeserve.profile.vote import vote_front, vote_records, vote_shares


def test_a_weighted_vote_sums_certainties_and_the_last_member_wins_ties() -> None:
    preds = np.array([[0, 0, 1, 2], [1, 1, 1, 0]])
    weights = np.array([[0.9, 0.5, 0.3, 0.0], [0.2, 0.5, 0.3, 0.0]])
    shares = vote_shares(preds, weights, 3)
    # sample 0: class 0 has 0.9 of 1.1; sample 1: a tie (0.5 each) goes to the last member's label 1;
    # sample 2: both vote 1; sample 3: nobody is sure, so heads are counted: a 1-1 tie, the last member's 0 wins
    assert shares.argmax(axis=1).tolist() == [0, 1, 1, 0]
    np.testing.assert_allclose(shares[0], [0.9 / 1.1, 0.2 / 1.1, 0.0], atol=1e-8)
    np.testing.assert_allclose(shares[2], [0.0, 1.0, 0.0], atol=1e-8)
    np.testing.assert_allclose(shares.sum(axis=1), 1.0, atol=1e-8)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda k: st.tuples(
            st.lists(st.lists(st.integers(0, 3), min_size=5, max_size=5), min_size=k, max_size=k),
            st.lists(st.lists(st.floats(0.0, 1.0), min_size=5, max_size=5), min_size=k, max_size=k),
        )
    )
)
def test_the_winner_has_the_most_weight_and_ties_go_to_the_last_member(
    case: tuple[list[list[int]], list[list[float]]],
) -> None:
    preds, weights = np.array(case[0]), np.array(case[1])
    shares = vote_shares(preds, weights, 4)
    for j in range(preds.shape[1]):
        w = weights[:, j] if weights[:, j].sum() > 0 else np.ones(len(preds))
        part = {c: float(w[preds[:, j] == c].sum() / w.sum()) for c in set(preds[:, j].tolist())}
        top = max(part.values())
        got = int(shares[j].argmax())
        assert part[got] >= top - 1e-9  # shares within the tie bonus of each other are a tie
        if part[int(preds[-1, j])] >= top - 1e-12:
            assert got == preds[-1, j]
    assert np.all(shares >= 0)
    np.testing.assert_allclose(shares.sum(axis=1), 1.0, atol=1e-6)


def _family() -> Profile:
    """Three models that err on different samples: two of them voting with the third beats each one alone."""
    labels = np.array([0, 1, 0, 1, 0, 1, 0, 1, 0, 1])
    right = {
        "a": [1, 1, 1, 1, 1, 1, 0, 0, 1, 1],
        "b": [0, 0, 1, 1, 1, 1, 1, 1, 1, 1],
        "c": [1, 1, 0, 0, 1, 1, 1, 1, 1, 0],
    }
    scores = {}
    for m, ok in right.items():
        pred = np.where(np.array(ok) == 1, labels, 1 - labels)
        s = np.full((10, 2), 0.2)
        s[np.arange(10), pred] = 0.8
        scores[m] = s
    models = [
        ModelProfile("a", 10.0, RuntimeCurve((1, 4), (1.0, 2.0))),
        ModelProfile("b", 20.0, RuntimeCurve((1, 8), (2.0, 6.0)), busy_factor=3.0),
        ModelProfile("c", 30.0, RuntimeCurve((1, 4), (3.0, 5.0))),
    ]
    return Profile.from_scores("votes", models, labels, scores)


def test_a_vote_stage_costs_its_members_together_and_answers_by_the_vote() -> None:
    prof = _family()
    vote = Vote.of(prof, ("c", "a", "b"), "majority")
    assert vote.name == "c+a+b:majority"  # least accurate first: ties go to b, the most accurate
    voted = with_votes(prof, [vote])
    m = voted.model(vote.name)
    assert m.memory_mb == 60.0
    assert m.runtime.batch_sizes == (1, 4, 8)
    # b interpolated at 4, a and c extrapolated along their last segment to 8
    np.testing.assert_allclose(m.runtime.ms, [6.0, 2.0 + (2.0 + 4 * 3 / 7) + 5.0, (2.0 + 4 / 3) + 6.0 + (5.0 + 8 / 3)])
    assert m.busy_factor == pytest.approx((1.0 * 1 + 2.0 * 3 + 3.0 * 1) / 6.0)
    # every sample has two of three right: the majority is always right
    assert voted.accuracies[voted.index(vote.name)] == 1.0
    assert prof.accuracies.max() == 0.8
    pred, cert = vote_records(prof, vote)
    assert (voted.predictions[-1] == pred).all() and (voted.certainties[-1] == cert).all()
    # the margin of the shares: 1 where all three agree (samples 4, 5, 8), 2/3 - 1/3 where one dissents
    unanimous = prof.correct.all(axis=0)
    assert np.flatnonzero(unanimous).tolist() == [4, 5, 8]
    np.testing.assert_allclose(cert, np.where(unanimous, 1.0, 1.0 / 3.0), atol=1e-8)
    assert with_votes(voted, [vote]) is voted  # a stage the profile has is kept as it is


def test_the_names_of_vote_stages_parse_back_and_plain_names_do_not() -> None:
    known = ("a", "b", "c", "x:weighted")
    assert Vote.parse("a+b:weighted", known) == Vote(("a", "b"), "weighted")
    assert Vote.parse("c+a+b:majority", known) == Vote(("c", "a", "b"), "majority")
    assert Vote.parse("a+d:weighted", known) is None  # d is not a model
    assert Vote.parse("a+b:mean", known) is None
    assert Vote.parse("a+a:weighted", known) is None
    assert Vote.parse("x:weighted", known) is None  # a model of that name is a model
    with pytest.raises(ValueError, match="unknown vote kind"):
        Vote(("a",), "mean")


def test_the_planner_is_offered_the_cheapest_vote_that_beats_every_model() -> None:
    prof = _family()
    votes = useful_votes(prof, limit=2)
    assert [v.name for v in votes] == ["c+a+b:majority", "c+a+b:weighted"][: len(votes)]
    assert votes[0].name == "c+a+b:majority"  # the only votes above 0.8 are the three-way ones
    assert useful_votes(prof, limit=0) == ()
    front = vote_front(prof)
    assert front[0][0].name == "a:majority"  # the cheapest single model starts the front
    costs = [c for _, _, c in front]
    assert costs == sorted(costs)
    # a family whose models always agree: no vote beats its best model, nothing is offered
    same = Profile.from_scores(
        "same", list(prof.models), prof.labels, {m: np.eye(2)[prof.predictions[0]] * 0.7 + 0.15 for m in "abc"}
    )
    assert useful_votes(same, limit=3) == ()
