"""Clipper-style adaptive batching: additive-increase, multiplicative-decrease (AIMD) on the maximum batch size.

Clipper (Crankshaw et al., NSDI 2017) keeps, per model container, a maximum batch size. After every batch it
compares the batch's processing time with the latency objective: while the batch ran within it, the cap grows by
a constant ``step``; when it ran over, the cap shrinks by a factor ``backoff`` (Clipper uses 10 %). The cap
therefore settles near the largest batch whose runtime fits the objective, and follows changes in the runtime.

This is the MS+ baseline's batching (paper §6.2), and the ``aimd`` serving policy a plan or ``serve --batching
aimd`` selects (:func:`~cascadeserve.policy.adaptive.batch_limit_for` builds one per plan generation). It is a
pure decision: :meth:`AimdBatchLimit.observe` takes the replica and the measured batch runtime, returns an
:class:`AimdDecision`, and :meth:`AimdBatchLimit.limit` says how large the replica's next batch may be. The
simulator calls both around every batch, and so does the runtime's consumer: ``limit(r)`` when it takes a batch
from a replica's queue, ``observe(r, seconds, size)`` when the device hands the batch back. No clock is read here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cascadeserve.policy.kernels import aimd_next

__all__ = ["AimdBatchLimit", "AimdDecision"]


@dataclass(frozen=True, slots=True)
class AimdDecision:
    """One AIMD update (loggable, replayable)."""

    replica: int
    runtime_s: float
    limit: int  # the cap from now on
    increased: bool


class AimdBatchLimit:
    """Per-replica maximum batch sizes driven by AIMD against ``target_s`` (the latency objective for one batch).

    ``start`` is every replica's initial cap, ``step`` the additive increase, ``backoff`` the multiplicative
    decrease (the new cap is ``floor(cap * backoff)``, at least 1), ``ceiling`` the largest cap allowed.
    """

    __slots__ = ("_caps", "backoff", "ceiling", "start", "step", "target_s")

    def __init__(
        self,
        target_s: float,
        *,
        step: int = 2,
        backoff: float = 0.9,
        start: int = 1,
        ceiling: int = 4096,
    ) -> None:
        if not target_s > 0:
            raise ValueError("target_s must be positive")
        if step < 1 or start < 1 or ceiling < start:
            raise ValueError("need step >= 1 and 1 <= start <= ceiling")
        if not 0 < backoff < 1:
            raise ValueError("backoff must lie in (0, 1)")
        self.target_s = target_s
        self.step = step
        self.backoff = backoff
        self.start = start
        self.ceiling = ceiling
        self._caps: dict[int, int] = {}

    def limit(self, replica: int) -> int:
        """The largest batch ``replica`` may take now."""
        return self._caps.get(replica, self.start)

    def observe(self, replica: int, runtime_s: float, size: int | None = None) -> AimdDecision:
        """Update ``replica``'s cap after a batch (of ``size`` samples; AIMD needs only the time) that took
        ``runtime_s`` seconds to run."""
        cap = self._caps.get(replica, self.start)
        new = aimd_next(cap, runtime_s, self.target_s, self.step, self.backoff, self.ceiling)
        self._caps[replica] = new
        return AimdDecision(replica=replica, runtime_s=runtime_s, limit=new, increased=runtime_s <= self.target_s)

    def caps(self, replicas: int) -> np.ndarray:
        """Replicas ``0..replicas-1``'s caps now, as an int64 array (the compiled simulator's state)."""
        return np.asarray([self.limit(r) for r in range(replicas)], dtype=np.int64)

    def set_caps(self, caps: np.ndarray) -> None:
        """Take replica ``r``'s cap from ``caps[r]`` where it differs from what :meth:`limit` says (the state the
        compiled simulator hands back, so a limiter reads the same after either loop)."""
        for r, cap in enumerate(caps.tolist()):
            if cap != self.limit(r):
                self._caps[r] = int(cap)
