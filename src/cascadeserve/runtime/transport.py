"""Transports: how a plan generation's samples reach the queue of the replica the policy chose.

The runtime's generation decides nothing about *where a replica lives*: it routes a request by the policy core
(:class:`~cascadeserve.policy.Routers`) and hands it to its :class:`Transport`. The embedded runtime uses
:class:`LocalTransport`: one :class:`~cascadeserve.runtime.queue.ReplicaQueue` per replica, and the consumer of
the replica's device is woken on every arrival. A distributed backend injects its own transport (the Ray backend
sends requests for replicas in other processes to those processes, and reports their queue lengths back), so it
needs no subclass of the generation or of the consumer.

A transport also hears of the generation's two state changes that the queues must react to: a gear switch (the
triggers changed) and the start of a drain (every queue may now fire at once), and of a threshold change by online
tuning (a transport whose replicas live elsewhere must pass it on).
"""

from __future__ import annotations

from typing import Protocol

from cascadeserve.policy.thresholds import ThresholdDecision
from cascadeserve.runtime.queue import ReplicaQueue
from cascadeserve.runtime.request import Request

__all__ = ["LocalTransport", "Transport", "Waker"]


class Waker(Protocol):
    """Something that re-decides when its queues change (a device's consumer)."""

    def poke(self) -> None: ...

    def poke_after_arrivals(self) -> None:
        """Re-decide at this instant, but after the instant's arrivals (a gear switch at a producer tick)."""
        ...


class Transport(Protocol):
    """Where a generation's requests go once the policy picked their replica."""

    def send(self, req: Request, replica: int, now: float) -> None:
        """Queue ``req`` on ``replica`` (locally, or in the process that holds the replica)."""
        ...

    def queue_length(self, replica: int) -> int:
        """How many samples wait on ``replica`` (as last known, for a remote one)."""
        ...

    def on_gear(self, gear: int) -> None:
        """The generation switched to ``gear``."""
        ...

    def on_drain(self) -> None:
        """The generation started draining."""
        ...

    def on_thresholds(self, d: ThresholdDecision) -> None:
        """The generation applied ``d`` (online tuning; its own tables already exit with ``d.new``)."""
        ...


class LocalTransport:
    """Every replica's queue in this process; each arrival wakes the consumer of the replica's device."""

    __slots__ = ("queues", "wakers")

    def __init__(self, n_replicas: int) -> None:
        self.queues = [ReplicaQueue(r) for r in range(n_replicas)]
        self.wakers: list[Waker | None] = [None] * n_replicas  # set when the runtime places the replicas

    def attach(self, replica: int, waker: Waker) -> ReplicaQueue:
        """Let ``waker`` serve ``replica``; returns the replica's queue for it to take batches from."""
        self.wakers[replica] = waker
        return self.queues[replica]

    def send(self, req: Request, replica: int, now: float) -> None:
        self.queues[replica].push(req, now)
        waker = self.wakers[replica]
        if waker is not None:
            waker.poke()

    def queue_length(self, replica: int) -> int:
        return len(self.queues[replica])

    def on_gear(self, gear: int) -> None:
        # Not a plain poke: the tick comes first at its instant, then that instant's arrivals, then device events
        # (the simulator's order). A pump run straight after the switch would fire a queue that the instant's
        # arrivals were about to join, under the new gear's triggers, and split one batch in two.
        for waker in dict.fromkeys(w for w in self.wakers if w is not None):
            waker.poke_after_arrivals()

    def on_drain(self) -> None:
        self.wake_all()

    def on_thresholds(self, d: ThresholdDecision) -> None:
        return None  # the consumers here read the generation's own tables, already changed

    def wake_all(self) -> None:
        for waker in dict.fromkeys(w for w in self.wakers if w is not None):
            waker.poke()
