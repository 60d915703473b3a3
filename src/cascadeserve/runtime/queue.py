"""Queues: one per model replica (the paper's model queues), and the bounded admission count.

A :class:`ReplicaQueue` holds requests oldest first; the enqueue time of its head is what the batch trigger's
max-wait rule and the tie-break between replicas (:func:`~cascadeserve.policy.next_batch`) look at.
:class:`Admission` counts the requests in flight in the whole runtime, the input of the admission policy.
"""

from __future__ import annotations

import math
from collections import deque

from cascadeserve.runtime.request import Request

__all__ = ["Admission", "ReplicaQueue"]


class ReplicaQueue:
    """The waiting requests of one replica, in enqueue order."""

    __slots__ = ("items", "replica")

    def __init__(self, replica: int) -> None:
        self.replica = replica
        self.items: deque[Request] = deque()

    def __len__(self) -> int:
        return len(self.items)

    @property
    def oldest(self) -> float:
        return self.items[0].enqueued if self.items else math.inf

    def push(self, req: Request, now: float) -> None:
        req.enqueued = now
        req.queue = self
        self.items.append(req)

    def take(self, n: int) -> list[Request]:
        """Pop the ``n`` oldest requests."""
        items = self.items
        out = [items.popleft() for _ in range(min(n, len(items)))]
        for r in out:
            r.queue = None
        return out

    def discard(self, req: Request) -> None:
        """Remove a request that left early (its deadline passed)."""
        try:
            self.items.remove(req)
        except ValueError:
            return
        req.queue = None


class Admission:
    """The count of requests in flight (admitted, not yet answered) across the runtime's generations.

    Whether a call may be admitted is the policy's decision (:class:`~cascadeserve.policy.AdmissionPolicy`), made
    from this count; this class only keeps it.
    """

    __slots__ = ("answered", "in_flight")

    def __init__(self) -> None:
        self.in_flight = 0
        self.answered = 0  # requests answered or failed so far (the drain rate's input)

    def add(self, n: int = 1) -> None:
        self.in_flight += n
