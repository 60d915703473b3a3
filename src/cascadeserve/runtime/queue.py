"""Queues: one per model replica (the paper's model queues), and the bounded admission count.

A :class:`ReplicaQueue` holds requests oldest first; the enqueue time of its head is what the batch trigger's
max-wait rule and :func:`~cascadeserve.policy.choose_replica` look at. :class:`Admission` bounds the number of
requests in flight in the whole runtime: past the bound, new requests are shed (HTTP 503), so no queue can
grow without bound however hard clients push.
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
    """Counts requests in flight against a capacity; ``None`` capacity means unbounded."""

    __slots__ = ("capacity", "in_flight")

    def __init__(self, capacity: int | None) -> None:
        if capacity is not None and capacity < 1:
            raise ValueError("admission capacity must be at least 1")
        self.capacity = capacity
        self.in_flight = 0

    def room(self) -> int:
        return 1 << 62 if self.capacity is None else self.capacity - self.in_flight

    def take(self, n: int = 1) -> bool:
        if n > self.room():
            return False
        self.in_flight += n
        return True

    def give_back(self, n: int = 1) -> None:
        self.in_flight -= n
