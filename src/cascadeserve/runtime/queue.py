"""Queues: one per model replica (the paper's model queues), and the bounded admission count.

A :class:`ReplicaQueue` holds requests oldest first (forwarded ones and new ones apart); the enqueue time of its
oldest is what the batch trigger's max-wait rule and the tie-break between replicas
(:func:`~cascadeserve.policy.next_batch`) look at.
:class:`Admission` counts the requests in flight in the whole runtime, the input of the admission policy.
"""

from __future__ import annotations

import math
from collections import deque

from cascadeserve.policy import BatchMembers
from cascadeserve.runtime.request import Request

__all__ = ["Admission", "ReplicaQueue"]


class _Times:
    """The entry times of one of a queue's sources, oldest first, as the policy's batch membership reads them."""

    __slots__ = ("items",)

    def __init__(self, items: deque[Request]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> float:
        return self.items[i].enqueued


class ReplicaQueue:
    """The waiting requests of one replica: those an earlier stage forwarded, and new ones, each in enqueue order.

    A request that a stage already ran on (it has a :attr:`~cascadeserve.runtime.request.Request.best`) counts as
    forwarded, wherever it was queued from (the Ray backend's servers queue forwarded requests from other
    processes); which of both a batch takes, in which order, is the policy's
    :func:`~cascadeserve.policy.batch_members` decision, which :meth:`take` applies.
    """

    __slots__ = ("arrived", "forwarded", "replica")

    def __init__(self, replica: int) -> None:
        self.replica = replica
        self.forwarded: deque[Request] = deque()
        self.arrived: deque[Request] = deque()

    def __len__(self) -> int:
        return len(self.forwarded) + len(self.arrived)

    @property
    def oldest(self) -> float:
        f, a = self.forwarded, self.arrived
        return min(f[0].enqueued if f else math.inf, a[0].enqueued if a else math.inf)

    def push(self, req: Request, now: float) -> None:
        req.enqueued = now
        req.queue = self
        (self.arrived if req.best is None else self.forwarded).append(req)

    def times(self) -> tuple[_Times, _Times]:
        """The entry times of the forwarded and of the new requests, oldest first (the input of the policy's
        :func:`~cascadeserve.policy.batch_members`)."""
        return _Times(self.forwarded), _Times(self.arrived)

    def take(self, m: BatchMembers) -> list[Request]:
        """Pop the requests of the policy's :class:`~cascadeserve.policy.BatchMembers` decision, in its order."""
        fwd = [self.forwarded.popleft() for _ in range(m.forwarded)]
        new = [self.arrived.popleft() for _ in range(m.arrived)]
        if m.order is None:
            out = fwd + new if fwd else new
        else:
            it_f, it_a = iter(fwd), iter(new)
            out = [next(it_f) if from_f else next(it_a) for from_f in m.order]
        for r in out:
            r.queue = None
        return out

    def discard(self, req: Request) -> None:
        """Remove a request that left early (its deadline passed)."""
        for items in (self.forwarded, self.arrived):
            try:
                items.remove(req)
            except ValueError:
                continue
            req.queue = None
            return


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
