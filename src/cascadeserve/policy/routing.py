"""Replica choice by the gear's QPS shares: smooth weighted round-robin (as in nginx).

Each pick adds every replica's weight to its running credit, picks the replica with the most credit, and takes
the total weight from it. The sequence is periodic with period ``sum(weights)``, spreads each replica's picks
evenly, and keeps the realised split within two requests of the shares (within one almost always: weights
1,1,1,5,5,5 drift by 1.06 after 11 picks).

Shares are floats; we round them to integer weights at a fixed resolution (1/1000 by default), reduce by their
gcd, and precompute one period. :meth:`SmoothWeightedRoundRobin.pick` and the vectorised
:meth:`SmoothWeightedRoundRobin.pick_many` walk the same sequence, so the simulator (which routes a whole tick of
arrivals at once) and the runtime (one request at a time) make identical choices.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from cascadeserve.policy.kernels import swrr_pick

__all__ = ["SmoothWeightedRoundRobin", "swrr_sequence"]


def swrr_sequence(weights: Sequence[int]) -> np.ndarray:
    """One period of the smooth weighted round-robin order for integer weights (a fresh array)."""
    return _period(tuple(int(w) for w in weights)).copy()


@functools.lru_cache(maxsize=1024)
def _period(weights: tuple[int, ...]) -> np.ndarray:
    # A pure function of the weights, cached: building a period is a Python loop over up to ``resolution``
    # picks, and the planner's SP4 builds the same routers for many one-gear check plans.
    if any(w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError("weights must be non-negative with a positive sum")
    total = sum(weights)
    credit = [0] * len(weights)
    out = np.empty(total, dtype=np.int64)
    for k in range(total):
        best = 0
        for i, w in enumerate(weights):
            credit[i] += w
            if credit[i] > credit[best]:
                best = i
        credit[best] -= total
        out[k] = best
    return out


class SmoothWeightedRoundRobin:
    """Picks indices ``0..len(shares)-1`` in proportion to ``shares``."""

    __slots__ = ("_period", "_pos", "_seq")

    def __init__(self, shares: Sequence[float], *, resolution: int = 1000) -> None:
        raw = [max(0, round(float(s) * resolution)) for s in shares]
        if sum(raw) == 0:
            # Shares too small to survive rounding: fall back to the largest one.
            if not shares or max(shares) <= 0:
                raise ValueError("at least one share must be positive")
            raw = [1 if i == int(np.argmax(shares)) else 0 for i in range(len(shares))]
        g = 0
        for w in raw:
            g = math.gcd(g, w)
        self._seq = swrr_sequence([w // g for w in raw])
        self._period = len(self._seq)
        self._pos = 0

    @property
    def sequence(self) -> np.ndarray:
        """One period of the pick order (read-only view), starting at position 0."""
        out = self._seq.view()
        out.setflags(write=False)
        return out

    def pick(self) -> int:
        i, self._pos = swrr_pick(self._seq, self._pos)
        return i

    def pick_many(self, n: int) -> np.ndarray:
        """The next ``n`` picks as an array (same sequence as ``n`` calls of :meth:`pick`)."""
        idx = (self._pos + np.arange(n)) % self._period
        self._pos = (self._pos + n) % self._period
        return self._seq[idx]
