"""The threshold decision of online tuning, as a value: swap one gear's thresholds (split from
:mod:`cascadeserve.policy.tuning` so that :class:`~cascadeserve.policy.PlanTables`, which applies it, need not
import the tuner that makes it)."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["ThresholdDecision"]


@dataclass(frozen=True, slots=True)
class ThresholdDecision:
    """Swap gear ``gear``'s thresholds from ``old`` to ``new`` (logged with why and what the window predicts)."""

    gear: int
    old: tuple[float, ...]
    new: tuple[float, ...]
    window_accuracy: float  # under ``old``, on the window
    accuracy: float  # predicted under ``new``
    work_ms: float  # predicted under ``new``
    reason: str  # "below target", "periodic", or "in force" (a restatement, see :meth:`in_force`)
    at: float

    @classmethod
    def in_force(cls, gear: int, thresholds: tuple[float, ...], at: float = math.nan) -> ThresholdDecision:
        """A restatement of the thresholds in force for ``gear`` (a restarted Ray server, a test): applying it sets
        exactly ``thresholds``; it predicts nothing."""
        t = tuple(float(x) for x in thresholds)
        return cls(gear, t, t, math.nan, math.nan, math.nan, "in force", at)
