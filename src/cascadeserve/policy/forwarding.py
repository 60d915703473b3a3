"""The exit decision: which samples of a finished batch are answered, and which move on to the next stage.

A stage answers a sample when its certainty is at least the stage's threshold. **The last stage answers every
sample, whatever its certainty, NaN included**: a model that returns a NaN score must not send a request past the
end of its cascade, where nothing would ever answer it. The last stage is encoded as threshold :data:`LAST_STAGE`
(``-inf``), and the rule tests for it explicitly rather than relying on ``certainty >= -inf`` (False for NaN).

Thresholds come per sample (each request keeps the cascade of the gear it was admitted under), so
:func:`sure_mask` takes an array of thresholds as readily as a scalar. :func:`is_sure` is the same rule for one
sample, and :func:`sure_list` for a short Python list (the engines' per-sample paths on small batches, where a
dozen numpy calls on 1-16 elements cost more than a loop); all three agree on every input, NaN included (a
property test checks it). Which replica each unsure sample goes to is
:meth:`~cascadeserve.policy.Routers.split`'s decision.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["LAST_STAGE", "is_sure", "sure_list", "sure_mask"]

LAST_STAGE = -math.inf


def sure_mask(certainty: np.ndarray, threshold: float | np.ndarray) -> np.ndarray:
    """Boolean mask of the samples this stage answers (``threshold`` a scalar, or one per sample)."""
    c = np.asarray(certainty, dtype=np.float64)
    if isinstance(threshold, (float, int)):  # numpy's float64 is a float; one scalar for the whole batch
        if threshold == LAST_STAGE:
            return np.ones(c.shape, dtype=bool)
        return np.asarray(c >= threshold, dtype=bool)
    thr = np.asarray(threshold, dtype=np.float64)
    return np.asarray((c >= thr) | (thr == LAST_STAGE), dtype=bool)


def is_sure(certainty: float, threshold: float) -> bool:
    """The same rule for one sample."""
    return threshold == LAST_STAGE or certainty >= threshold


def sure_list(certainty: list[float], threshold: float | list[float]) -> list[bool]:
    """:func:`sure_mask` for a short Python list of certainties (``threshold`` one, or one per sample)."""
    if isinstance(threshold, list):
        return [t == LAST_STAGE or c >= t for c, t in zip(certainty, threshold, strict=True)]
    if threshold == LAST_STAGE:
        return [True] * len(certainty)
    return [c >= threshold for c in certainty]
