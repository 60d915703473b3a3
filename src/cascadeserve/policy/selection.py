"""Clipper's model-selection layer: exp3 picks one alternative per request, exp4 weighs an ensemble of them.

A deployment may declare *alternatives* for one task (models or whole cascades, e.g. the current version and a
candidate). Feedback (the true label of an answered request) tells the policy how each did, and the weights
follow (Crankshaw et al., NSDI 2017, §5):

* **exp3** keeps a weight ``s_i`` per alternative and picks alternative ``i`` with probability
  ``p_i = (1 - γ)·s_i / Σ s + γ / K`` (γ: exploration, so no alternative's probability reaches 0 and the policy
  notices when a neglected one becomes the best). Feedback on the chosen one updates
  ``s_i ← s_i · exp(−η · loss / p_i)``: importance-weighted, so the estimate of each loss stays unbiased though
  only the chosen alternative ran.
* **exp4** runs every alternative and answers with the label of largest total weight; its *confidence* is that
  label's weight share. Feedback updates every alternative: ``w_i ← w_i · exp(−η · loss_i)``.

The loss is 0/1 (wrong label). Weights are kept as logarithms and re-centred, so a long run neither underflows
nor overflows. State is one :class:`SelectionState` per *context* (a user or session id) plus a global one: a
request with an unknown or no context uses the global weights, and feedback updates the context's state (born
as a copy of the global state) and the global one. All of it is plain data and pure functions; where states are
kept (SQLite by default, :mod:`cascadeserve.store`) is not the policy's business, nor is the random draw, which
the caller passes in as ``u ∈ [0, 1)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

__all__ = [
    "Ensemble",
    "Pick",
    "SelectionPolicy",
    "SelectionState",
    "exp3_pick",
    "exp3_probabilities",
    "exp3_update",
    "exp4_combine",
    "exp4_update",
]

SelectionPolicy = Literal["exp3", "exp4"]


@dataclass(frozen=True, slots=True)
class SelectionState:
    """Log-weights of the alternatives (in the deployment's order) and how many feedbacks shaped them."""

    log_weights: tuple[float, ...]
    updates: int = 0

    @classmethod
    def uniform(cls, k: int) -> SelectionState:
        if k < 1:
            raise ValueError("a selection needs at least one alternative")
        return cls((0.0,) * k)

    @property
    def weights(self) -> tuple[float, ...]:
        """Normalised weights (summing to 1)."""
        top = max(self.log_weights)
        w = [math.exp(x - top) for x in self.log_weights]
        total = sum(w)
        return tuple(x / total for x in w)

    def best(self) -> int:
        """The alternative the policy currently prefers (largest weight; ties: the first)."""
        lw = self.log_weights
        return max(range(len(lw)), key=lambda i: (lw[i], -i))


def _recentre(log_weights: Sequence[float]) -> tuple[float, ...]:
    top = max(log_weights)
    return tuple(x - top for x in log_weights)


@dataclass(frozen=True, slots=True)
class Pick:
    """exp3's choice for one request: the alternative and the probability it had (feedback needs it)."""

    alternative: int
    probability: float


def exp3_probabilities(state: SelectionState, gamma: float = 0.05) -> tuple[float, ...]:
    k = len(state.log_weights)
    return tuple((1.0 - gamma) * w + gamma / k for w in state.weights)


def exp3_pick(state: SelectionState, u: float, gamma: float = 0.05) -> Pick:
    """The alternative whose cumulative probability interval holds ``u`` (the caller's uniform draw)."""
    probs = exp3_probabilities(state, gamma)
    acc = 0.0
    for i, p in enumerate(probs):
        acc += p
        if u < acc:
            return Pick(i, p)
    return Pick(len(probs) - 1, probs[-1])  # u at 1 - ε with rounding


def exp3_update(state: SelectionState, alternative: int, loss: float, probability: float, eta: float) -> SelectionState:
    """``s_i ← s_i · exp(−η · loss / p_i)`` for the alternative that answered."""
    if not 0.0 < probability <= 1.0:
        raise ValueError(f"probability must lie in (0, 1], got {probability}")
    lw = list(state.log_weights)
    lw[alternative] -= eta * loss / probability
    return replace(state, log_weights=_recentre(lw), updates=state.updates + 1)


@dataclass(frozen=True, slots=True)
class Ensemble:
    """exp4's answer: the label of largest total weight and its weight share."""

    label: int
    confidence: float


def exp4_combine(state: SelectionState, labels: Sequence[int | None]) -> Ensemble:
    """Weighted vote of the alternatives' labels (``None``: that alternative gave no answer, e.g. it straggled)."""
    votes: dict[int, float] = {}
    total = 0.0
    for w, label in zip(state.weights, labels, strict=True):
        if label is None:
            continue
        votes[label] = votes.get(label, 0.0) + w
        total += w
    if not votes:
        raise ValueError("no alternative answered")
    label = max(votes, key=lambda lab: (votes[lab], -lab))
    return Ensemble(label, votes[label] / total)


def exp4_update(state: SelectionState, losses: Sequence[float | None], eta: float) -> SelectionState:
    """``w_i ← w_i · exp(−η · loss_i)`` for every alternative that answered (``None``: no answer, unchanged)."""
    lw = [x - eta * loss if loss is not None else x for x, loss in zip(state.log_weights, losses, strict=True)]
    return replace(state, log_weights=_recentre(lw), updates=state.updates + 1)
