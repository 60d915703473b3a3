"""Forwarding by certainty: which samples of a finished batch are answered, and which move on.

A stage answers a sample when its certainty is at least the stage's threshold; the last stage answers everything.
Thresholds come per sample (each request keeps the cascade of the gear it was admitted under), so the function
takes an array of thresholds as readily as a scalar. The last stage is encoded as threshold ``-inf``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["LAST_STAGE", "is_sure", "sure_mask"]

LAST_STAGE = -np.inf


def sure_mask(certainty: np.ndarray, threshold: float | np.ndarray) -> np.ndarray:
    """Boolean mask of the samples this stage answers."""
    return np.asarray(certainty >= threshold, dtype=bool)


def is_sure(certainty: float, threshold: float) -> bool:
    """The same rule for one sample (the runtime's and the simulator's per-sample paths)."""
    return certainty >= threshold
