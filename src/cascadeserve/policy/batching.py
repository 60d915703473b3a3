"""The batch trigger: when a replica's queue fires a batch, and how large the batch is.

A replica fires when its device is free and either

* its queue holds at least the gear's *minimum queue length* (paper §4.5), or
* the oldest waiting sample has waited ``max_wait_s`` (optional), so that a queue at low load cannot starve.

The batch takes the whole queue, oldest first, up to ``max_batch`` when one is set.

The rule is expressed through two primitives, :meth:`BatchTrigger.needed` and :meth:`BatchTrigger.deadline`.
The runtime asks :meth:`BatchTrigger.ready` on every enqueue and device-free event; the simulator, which knows
future arrivals, computes *when* ``ready`` turns true from the same two primitives
(:meth:`BatchTrigger.fire_time`). When several replicas on one device are ready, :func:`choose_replica` picks
the one whose head sample has waited longest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["BatchTrigger", "choose_replica", "earliest_replica"]


@dataclass(frozen=True, slots=True)
class BatchTrigger:
    min_queue: int = 1
    max_wait_s: float | None = None
    max_batch: int | None = None

    def needed(self, queued: int) -> int:
        """How many more samples the queue needs before the length rule fires."""
        return max(0, self.min_queue - queued)

    def deadline(self, oldest: float) -> float:
        """When the max-wait rule fires for a queue whose oldest sample entered at ``oldest``."""
        return math.inf if self.max_wait_s is None else oldest + self.max_wait_s

    def ready(self, queued: int, oldest: float, now: float) -> bool:
        """Should a free device fire this queue now?"""
        return queued > 0 and (self.needed(queued) == 0 or now >= self.deadline(oldest))

    def fire_time(self, now: float, first: float, mth: float) -> float:
        """Earliest time ≥ ``now`` at which :meth:`ready` holds, for a caller that knows future arrivals.

        ``first`` is when the oldest known sample entered the queue and ``mth`` when the ``min_queue``-th did
        (``inf`` when not known yet). Used by the simulator; the runtime only needs :meth:`ready` and, to arm a
        timer, :meth:`deadline`.
        """
        return max(now, min(mth, self.deadline(first)))

    def take(self, queued: int) -> int:
        """Batch size for a queue of ``queued`` samples."""
        return queued if self.max_batch is None else min(queued, self.max_batch)


def choose_replica(candidates: Sequence[tuple[float, int]]) -> int:
    """Among ``(oldest_enqueue_time, replica)`` pairs ready on one device, the replica that waited longest.

    Ties go to the lower replica index, so the choice is deterministic.
    """
    return min(candidates)[1]


def earliest_replica(candidates: Sequence[tuple[float, float, int]]) -> tuple[float, float, int]:
    """Among ``(fire_time, oldest_enqueue_time, replica)`` triples of one device, the one that fires first.

    Replicas that fire at the same time are ordered exactly as :func:`choose_replica` orders ready ones (oldest
    head, then lowest index); this is the form the simulator uses, since it knows when each queue will be ready.
    """
    return min(candidates)
