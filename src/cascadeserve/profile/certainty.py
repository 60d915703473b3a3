"""Certainty functions: how sure a model is of its answer, from its raw scores.

A cascade stage answers when its certainty reaches the stage's threshold, so certainty must be comparable
across samples and lie in [0, 1] (higher = surer). The paper's default (appendix B) is the *margin*: the top
score minus the runner-up. Scores that are not probabilities (logits) are turned into probabilities with a
softmax first, so that every function here lands in [0, 1].

A user may pass any callable ``f(scores[n, classes]) -> certainty[n]`` instead of a name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

import numpy as np

__all__ = [
    "CERTAINTY_FUNCTIONS",
    "CertaintyFn",
    "certainty_function",
    "margin",
    "max_probability",
    "negative_entropy",
    "to_probabilities",
]

CertaintyFn: TypeAlias = Callable[[np.ndarray], np.ndarray]


def to_probabilities(scores: np.ndarray) -> np.ndarray:
    """Rows that already are probability vectors are kept; anything else goes through a stable softmax."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or s.shape[1] < 2:
        raise ValueError(f"scores must have shape [n, classes>=2], got {s.shape}")
    if not len(s):
        return s
    # np.allclose(sums, 1, atol=1e-6)'s own bound (atol + rtol x 1), without its ~15 µs of wrapping: this runs on
    # every batch, on the event loop for a cheap model (a NaN fails both tests, as it failed allclose)
    if s.min() >= 0.0 and float(np.abs(s.sum(axis=1) - 1.0).max()) <= 1e-6 + 1e-5:
        return s
    z = s - s.max(axis=1, keepdims=True)
    e = np.exp(z)
    return np.asarray(e / e.sum(axis=1, keepdims=True))


def margin(scores: np.ndarray) -> np.ndarray:
    """Top-1 minus top-2 probability (paper appendix B)."""
    p = to_probabilities(scores)
    if p.shape[1] == 2:  # the same difference as below, without a partition
        return np.asarray(np.clip(np.abs(p[:, 0] - p[:, 1]), 0.0, 1.0))
    top2 = np.partition(p, -2, axis=1)[:, -2:]
    return np.asarray(np.clip(top2[:, 1] - top2[:, 0], 0.0, 1.0))


def max_probability(scores: np.ndarray) -> np.ndarray:
    """The largest probability, rescaled from [1/C, 1] to [0, 1] so that thresholds mean the same for any C."""
    p = to_probabilities(scores)
    c = p.shape[1]
    return np.asarray(np.clip((p.max(axis=1) - 1.0 / c) / (1.0 - 1.0 / c), 0.0, 1.0))


def negative_entropy(scores: np.ndarray) -> np.ndarray:
    """One minus the normalised entropy: 1 for a one-hot distribution, 0 for a uniform one."""
    p = to_probabilities(scores)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.where(p > 0, p * np.log(p), 0.0).sum(axis=1)
    return np.asarray(np.clip(1.0 - h / np.log(p.shape[1]), 0.0, 1.0))


CERTAINTY_FUNCTIONS: dict[str, CertaintyFn] = {
    "margin": margin,
    "max-probability": max_probability,
    "negative-entropy": negative_entropy,
    # the same functions under the names of an LLM's scoring signals (scores = option probabilities; see
    # profile.llm_certainty, where the generation signals live: those need token log-probs, not scores)
    "option-margin": margin,
    "option-max-probability": max_probability,
    "option-entropy": negative_entropy,
}


def certainty_function(spec: str | CertaintyFn = "margin") -> CertaintyFn:
    """Resolve a certainty function by name, or pass a callable through."""
    if callable(spec):
        return spec
    try:
        return CERTAINTY_FUNCTIONS[spec]
    except KeyError:
        raise ValueError(
            f"unknown certainty function {spec!r}; choose one of {', '.join(CERTAINTY_FUNCTIONS)} or pass a callable"
        ) from None
