"""Gear selection: which gear serves the measured QPS, with the paper's α·Q0 hysteresis (§5).

Gears cover contiguous QPS ranges ``[qps_low, qps_high)``; a QPS at or above the last range's top uses the last
gear. Under an accuracy SLO the plan may carry a ``qps_scale`` (appendix C.2), by which measured QPS is multiplied
before the lookup.

Hysteresis: after a burst the queues hold a backlog. Switching to a gear for a *lower* QPS range (a slower, more
accurate cascade) would then make the backlog drain slower, so the producer keeps the current gear while
``qps < α · Q0``, where Q0 is the first stage's queue length. Moving to a gear for a *higher* QPS range is never
held back: holding a slow gear under rising load only grows the backlog. cascadeserve keeps one gear for all
inference servers, so Q0 is the first stage's queue summed over its replicas; with one server this is exactly the
paper's rule.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["GearDecision", "GearSelector"]


@dataclass(frozen=True, slots=True)
class GearDecision:
    """What the producer decided on one tick (loggable, replayable)."""

    gear: int  # the gear to use from now on
    target: int  # the gear the QPS alone asks for
    qps: float
    q0: int
    held: bool  # True when hysteresis kept ``gear`` although ``target`` differs


class GearSelector:
    """Looks up the gear for a QPS and applies hysteresis; pure, with no clock and no I/O."""

    __slots__ = ("_highs", "alpha", "qps_scale")

    def __init__(self, qps_highs: Sequence[float], *, alpha: float = 8.0, qps_scale: float = 1.0) -> None:
        if not qps_highs or list(qps_highs) != sorted(qps_highs):
            raise ValueError("qps_highs must be a non-empty ascending sequence")
        self._highs = list(qps_highs)
        self.alpha = alpha
        self.qps_scale = qps_scale

    @property
    def n_gears(self) -> int:
        return len(self._highs)

    def lookup(self, qps: float) -> int:
        """The gear whose range holds ``qps`` (after scaling); the last gear above the plan's max QPS."""
        return min(bisect.bisect_right(self._highs, qps * self.qps_scale), len(self._highs) - 1)

    def decide(self, current: int, qps: float, q0: int) -> GearDecision:
        target = self.lookup(qps)
        held = target < current and qps < self.alpha * q0
        return GearDecision(gear=current if held else target, target=target, qps=qps, q0=q0, held=held)
