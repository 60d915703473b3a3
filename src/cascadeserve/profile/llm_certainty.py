"""Certainty for LLM answers: signals, their logistic calibration, and how well each one predicts "right".

A cascade stage lets an answer exit when its certainty reaches the stage's threshold, so a certainty signal must
rank right answers above wrong ones. For an LLM there are two kinds of answer and several signals, each in
[0, 1] (higher = surer):

* **scoring** (an option is picked by the options' probabilities, ``scores[n, options]``): the registered
  certainty functions of :mod:`cascadeserve.profile.certainty` applied to the option probabilities:
  ``option-margin`` (top-1 minus top-2 option probability, the default), ``option-max-probability``,
  ``option-entropy``.
* **generation** (free text, from each decode step's log-probability of the chosen token and the first step's
  top-1 minus top-2 probability): ``mean-logprob`` = exp(mean token log-prob), the geometric-mean token
  probability; ``min-logprob`` = exp(min), the least likely token's probability; ``q10-logprob`` = exp(10 %
  quantile, linear interpolation), a low quantile that one odd token does not decide; ``first-token-margin``.
  Taking exp keeps each in [0, 1] and keeps its order, so thresholds and AUROC mean the same as for the log.

Any signal can be **calibrated** on the validation set: :class:`LogisticCalibration` fits
``P(right | s) = 1 / (1 + exp(-(a·s + b)))`` by Newton's method (a tiny ridge keeps it finite when the set is
separable or one-sided), so a threshold reads as "the probability that this stage is right". The parameters are
stored with the profile (``llm/calibration.json``, :mod:`cascadeserve.profile.llm_side`); with ``a > 0`` the
calibrated signal keeps the raw one's order and its AUROC. :func:`auroc` is the area under the ROC curve of a
signal for the event "the stage is right" (Mann-Whitney, ties counted half): 0.5 is no better than chance.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

from cascadeserve.profile.certainty import margin, max_probability, negative_entropy

__all__ = [
    "GENERATION_SIGNALS",
    "LLM_SIGNALS",
    "SCORING_SIGNALS",
    "GenerationSignal",
    "LogisticCalibration",
    "auroc",
    "first_token_margin",
    "generation_signals",
    "mean_logprob",
    "min_logprob",
    "q10_logprob",
    "scoring_signals",
]

# f(token log-probs per answer, first-token margins [n]) -> certainty [n] in [0, 1]
GenerationSignal: TypeAlias = Callable[[Sequence[Sequence[float]], np.ndarray], np.ndarray]


def _per_answer(logprobs: Sequence[Sequence[float]], stat: Callable[[np.ndarray], float]) -> np.ndarray:
    out = np.zeros(len(logprobs), dtype=np.float64)
    for i, lp in enumerate(logprobs):
        arr = np.asarray(lp, dtype=np.float64)
        out[i] = math.exp(min(stat(arr), 0.0)) if arr.size else 0.0  # an empty answer is no evidence
    return out


def mean_logprob(logprobs: Sequence[Sequence[float]], margins: np.ndarray) -> np.ndarray:
    """exp(mean token log-prob): the geometric mean of the chosen tokens' probabilities."""
    return _per_answer(logprobs, lambda a: float(a.mean()))


def min_logprob(logprobs: Sequence[Sequence[float]], margins: np.ndarray) -> np.ndarray:
    """exp(min token log-prob): the probability of the least likely chosen token."""
    return _per_answer(logprobs, lambda a: float(a.min()))


def q10_logprob(logprobs: Sequence[Sequence[float]], margins: np.ndarray) -> np.ndarray:
    """exp(10 % quantile of the token log-probs), linear interpolation between order statistics."""
    return _per_answer(logprobs, lambda a: float(np.quantile(a, 0.1)))


def first_token_margin(logprobs: Sequence[Sequence[float]], margins: np.ndarray) -> np.ndarray:
    """Top-1 minus top-2 probability at the first decode step."""
    return np.clip(np.asarray(margins, dtype=np.float64), 0.0, 1.0)


GENERATION_SIGNALS: dict[str, GenerationSignal] = {
    "mean-logprob": mean_logprob,
    "min-logprob": min_logprob,
    "q10-logprob": q10_logprob,
    "first-token-margin": first_token_margin,
}

SCORING_SIGNALS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "option-margin": margin,
    "option-max-probability": max_probability,
    "option-entropy": negative_entropy,
}

LLM_SIGNALS: tuple[str, ...] = (*SCORING_SIGNALS, *GENERATION_SIGNALS)


def scoring_signals(scores: np.ndarray) -> dict[str, np.ndarray]:
    """Every scoring signal of option probabilities ``scores[n, options]``."""
    return {name: np.asarray(f(scores), dtype=np.float64) for name, f in SCORING_SIGNALS.items()}


def generation_signals(logprobs: Sequence[Sequence[float]], margins: Sequence[float]) -> dict[str, np.ndarray]:
    """Every generation signal of the answers' token log-probs and first-token margins."""
    m = np.asarray(margins, dtype=np.float64)
    if len(m) != len(logprobs):
        raise ValueError(f"{len(logprobs)} answers but {len(m)} first-token margins")
    return {name: f(logprobs, m) for name, f in GENERATION_SIGNALS.items()}


def auroc(signal: np.ndarray, correct: np.ndarray) -> float:
    """Area under the ROC curve of ``signal`` for ``correct`` (NaN when all are right or all wrong)."""
    s = np.asarray(signal, dtype=np.float64)
    y = np.asarray(correct, dtype=bool)
    pos, neg = int(y.sum()), int((~y).sum())
    if pos == 0 or neg == 0:
        return math.nan
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), dtype=np.float64)
    sorted_s = s[order]
    # average ranks over ties, so a tie between a right and a wrong answer counts one half
    starts = np.flatnonzero(np.r_[True, sorted_s[1:] != sorted_s[:-1]])
    ends = np.r_[starts[1:], len(s)]
    for a, b in zip(starts, ends, strict=True):
        ranks[order[a:b]] = (a + b + 1) / 2.0
    return float((ranks[y].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


@dataclass(frozen=True)
class LogisticCalibration:
    """``P(right | s) = sigmoid(a·s + b)``, fitted on a validation set."""

    a: float
    b: float
    n: int = 0  # samples it was fitted on

    def __call__(self, signal: np.ndarray) -> np.ndarray:
        z = self.a * np.asarray(signal, dtype=np.float64) + self.b
        return np.asarray(1.0 / (1.0 + np.exp(-np.clip(z, -500, 500))))

    @classmethod
    def fit(
        cls, signal: np.ndarray, correct: np.ndarray, *, ridge: float = 1e-3, steps: int = 50
    ) -> LogisticCalibration:
        """Maximum likelihood by Newton's method, with a small ridge on both parameters."""
        x = np.asarray(signal, dtype=np.float64)
        y = np.asarray(correct, dtype=np.float64)
        if x.shape != y.shape or x.ndim != 1 or len(x) == 0:
            raise ValueError(f"signal and correct must be equal-length 1-D arrays, got {x.shape} and {y.shape}")
        X = np.column_stack([x, np.ones_like(x)])
        w = np.zeros(2)
        for _ in range(steps):
            p = 1.0 / (1.0 + np.exp(-np.clip(X @ w, -500, 500)))
            grad = X.T @ (p - y) + ridge * w
            hess = (X * (p * (1 - p))[:, None]).T @ X + ridge * np.eye(2)
            step = np.linalg.solve(hess, grad)
            w -= step
            if np.abs(step).max() < 1e-10:
                break
        return cls(float(w[0]), float(w[1]), len(x))

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "n": self.n}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> LogisticCalibration:
        a, b = float(doc["a"]), float(doc["b"])
        if not (math.isfinite(a) and math.isfinite(b)):
            raise ValueError(f"calibration parameters must be finite, got a={a}, b={b}")
        return cls(a, b, int(doc.get("n", 0)))
