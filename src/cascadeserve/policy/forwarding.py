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

import numpy as np

from cascadeserve.policy import kernels
from cascadeserve.policy.kernels import LAST_STAGE

__all__ = ["LAST_STAGE", "is_sure", "sure_list", "sure_mask"]

_rule = kernels.is_sure  # the rule itself, written once (elementwise on arrays as on floats)


def sure_mask(certainty: np.ndarray, threshold: float | np.ndarray) -> np.ndarray:
    """Boolean mask of the samples this stage answers (``threshold`` a scalar, or one per sample)."""
    c = np.asarray(certainty, dtype=np.float64)
    if isinstance(threshold, (float, int)):  # numpy's float64 is a float; one scalar for the whole batch
        return np.asarray(_rule(c, float(threshold)), dtype=bool)  # elementwise: c's shape
    return np.asarray(_rule(c, np.asarray(threshold, dtype=np.float64)), dtype=bool)


def is_sure(certainty: float, threshold: float) -> bool:
    """The same rule for one sample."""
    return bool(_rule(certainty, threshold))


def sure_list(certainty: list[float], threshold: float | list[float]) -> list[bool]:
    """:func:`sure_mask` for a short Python list of certainties (``threshold`` one, or one per sample)."""
    rule = _rule
    if isinstance(threshold, list):
        return [rule(c, t) for c, t in zip(certainty, threshold, strict=True)]
    return [rule(c, threshold) for c in certainty]
