"""Certainty functions: exact values on small score matrices, softmax for logits, range, user callables."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from cascadeserve.profile import (
    CERTAINTY_FUNCTIONS,
    ModelProfile,
    Profile,
    RuntimeCurve,
    certainty_function,
    margin,
    max_probability,
    negative_entropy,
)
from cascadeserve.profile.certainty import to_probabilities

PROBS = np.array(
    [
        [0.7, 0.2, 0.1],
        [0.5, 0.5, 0.0],
        [0.0, 1.0, 0.0],
        [1 / 3, 1 / 3, 1 / 3],
        [0.1, 0.3, 0.6],
    ]
)


def test_margin_is_top1_minus_top2() -> None:
    np.testing.assert_allclose(margin(PROBS), [0.5, 0.0, 1.0, 0.0, 0.3], atol=1e-12)


def test_max_probability_is_rescaled_to_unit_interval() -> None:
    # (p_max - 1/C) / (1 - 1/C) with C = 3
    np.testing.assert_allclose(max_probability(PROBS), [0.55, 0.25, 1.0, 0.0, 0.4], atol=1e-12)


def test_negative_entropy_is_one_minus_normalised_entropy() -> None:
    def expected(row: list[float]) -> float:
        return 1.0 - -sum(p * math.log(p) for p in row if p > 0) / math.log(3)

    want = [expected(r) for r in PROBS.tolist()]
    np.testing.assert_allclose(negative_entropy(PROBS), want, atol=1e-12)
    assert negative_entropy(PROBS)[2] == 1.0
    assert negative_entropy(PROBS)[3] == pytest.approx(0.0, abs=1e-12)
    assert negative_entropy(PROBS)[1] == pytest.approx(1.0 - math.log(2) / math.log(3))


def test_two_class_values() -> None:
    p = np.array([[0.9, 0.1], [0.25, 0.75]])
    np.testing.assert_allclose(margin(p), [0.8, 0.5])
    np.testing.assert_allclose(max_probability(p), [0.8, 0.5])  # (p - 1/2) / (1/2) is the margin for C = 2


def test_logits_go_through_a_softmax() -> None:
    # two classes: softmax margin = tanh(|a - b| / 2)
    logits = np.array([[2.0, 0.0], [-1.0, -3.0], [0.0, 4.0], [0.0, 0.0]])
    np.testing.assert_allclose(margin(logits), [math.tanh(1.0), math.tanh(1.0), math.tanh(2.0), 0.0], atol=1e-12)
    p = 1.0 / (1.0 + math.exp(-2.0))
    np.testing.assert_allclose(to_probabilities(logits)[0], [p, 1 - p])
    np.testing.assert_allclose(max_probability(logits)[0], 2 * p - 1)


def test_softmax_is_numerically_stable() -> None:
    logits = np.array([[1000.0, 0.0, -1000.0], [-1000.0, -1000.0, -1000.0]])
    np.testing.assert_allclose(margin(logits), [1.0, 0.0])
    np.testing.assert_allclose(max_probability(logits), [1.0, 0.0])
    np.testing.assert_allclose(negative_entropy(logits), [1.0, 0.0], atol=1e-12)


def test_probability_rows_are_kept_as_they_are() -> None:
    np.testing.assert_array_equal(to_probabilities(PROBS), PROBS)


@pytest.mark.parametrize("bad", [np.zeros(3), np.zeros((2, 1)), np.zeros((2, 2, 2))])
def test_scores_need_two_dimensions_and_two_classes(bad: np.ndarray) -> None:
    with pytest.raises(ValueError, match="shape"):
        margin(bad)


@settings(max_examples=100, deadline=None)
@given(
    arrays(
        np.float64,
        st.tuples(st.integers(1, 20), st.integers(2, 6)),
        elements=st.floats(-60.0, 60.0, allow_nan=False),
    ),
    st.sampled_from(sorted(CERTAINTY_FUNCTIONS)),
)
def test_every_builtin_lands_in_unit_interval(scores: np.ndarray, name: str) -> None:
    c = certainty_function(name)(scores)
    assert c.shape == (scores.shape[0],)
    assert np.all(np.isfinite(c))
    assert np.all((c >= 0.0) & (c <= 1.0))


@settings(max_examples=60, deadline=None)
@given(
    arrays(np.float64, st.tuples(st.integers(1, 10), st.integers(2, 5)), elements=st.floats(-20.0, 20.0)),
    st.sampled_from(sorted(CERTAINTY_FUNCTIONS)),
)
def test_certainty_ignores_class_order(scores: np.ndarray, name: str) -> None:
    fn = certainty_function(name)
    np.testing.assert_allclose(fn(scores), fn(scores[:, ::-1]), atol=1e-12)


def test_certainty_function_by_name_and_callable() -> None:
    assert certainty_function() is margin
    assert certainty_function("margin") is margin
    assert certainty_function("max-probability") is max_probability
    assert certainty_function("negative-entropy") is negative_entropy

    def mine(s: np.ndarray) -> np.ndarray:
        return np.full(len(s), 0.25)

    assert certainty_function(mine) is mine
    with pytest.raises(ValueError, match=r"unknown certainty function 'top1'.*margin, max-probability"):
        certainty_function("top1")


def _models() -> list[ModelProfile]:
    return [ModelProfile("a", 1.0, RuntimeCurve((1,), (1.0,))), ModelProfile("b", 2.0, RuntimeCurve((1,), (2.0,)))]


def test_profile_from_scores_uses_argmax_and_the_chosen_certainty() -> None:
    labels = np.array([0, 1, 2])
    scores = {"a": PROBS[:3], "b": np.array([[0.0, 4.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])}
    prof = Profile.from_scores("s", _models(), labels, scores)
    np.testing.assert_array_equal(prof.predictions, [[0, 0, 1], [1, 0, 0]])
    np.testing.assert_allclose(prof.certainties[0], [0.5, 0.0, 1.0], atol=1e-12)
    np.testing.assert_array_equal(prof.sample_ids, [0, 1, 2])
    by_entropy = Profile.from_scores("s", _models(), labels, scores, certainty="negative-entropy")
    np.testing.assert_allclose(by_entropy.certainties[0], negative_entropy(PROBS[:3]))


def test_profile_from_scores_accepts_a_user_callable_and_clips_it() -> None:
    labels = np.array([0, 1, 1])
    scores = {"a": PROBS[:3], "b": PROBS[2:5]}

    def spread(s: np.ndarray) -> np.ndarray:
        return s[:, 0] * 4 - 1  # lands outside [0, 1] on purpose

    prof = Profile.from_scores("s", _models(), labels, scores, certainty=spread)
    np.testing.assert_allclose(prof.certainties[0], [1.0, 1.0, 0.0])
    np.testing.assert_allclose(prof.certainties[1], [0.0, 1 / 3, 0.0])


def test_profile_from_scores_checks_row_counts() -> None:
    with pytest.raises(ValueError, match="model 'b': 2 score rows for 3 samples"):
        Profile.from_scores("s", _models(), np.array([0, 1, 2]), {"a": PROBS[:3], "b": PROBS[:2]})
