"""The two transports of the Ray backend: where a generation's requests go once the policy picked their replica.

The runtime's :class:`~cascadeserve.runtime.Generation` routes by the policy core and hands each request to its
injected :class:`~cascadeserve.runtime.transport.Transport`; these two decide what "send" means in each process.

* :class:`ServerTransport` (in a server actor) is a :class:`~cascadeserve.runtime.transport.LocalTransport` for
  the replicas on the server's own device, whose queues its consumer serves; a request for any other replica (a
  sample forwarded to the next stage) leaves through the generation's
  :class:`~cascadeserve.backends.ray.outbox.Outbox` for the server of that replica.
* :class:`FrontTransport` (in the front end) holds no queue: every admitted request leaves through the outbox for
  the server of its first-stage replica. The queue lengths it reports are those the servers sent at the producer's
  last poll (one tick old: the price of not centralising the queues), and it broadcasts the generation's gear
  switches and its drain to every server of the plan.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from cascadeserve.backends.ray.fleet import Fleet
from cascadeserve.backends.ray.options import RayOptions
from cascadeserve.backends.ray.outbox import Outbox
from cascadeserve.plan import GearPlan
from cascadeserve.policy.thresholds import ThresholdDecision
from cascadeserve.runtime import Request
from cascadeserve.runtime.transport import LocalTransport

__all__ = ["FrontTransport", "ServerTransport"]


class ServerTransport(LocalTransport):
    """A server's transport: replicas on this server's device queue here; the others go to their servers."""

    __slots__ = ("gear_set_at", "local", "outbox")

    def __init__(self, plan: GearPlan, device: str, handle: Callable[[str], Any], options: RayOptions) -> None:
        super().__init__(len(plan.replicas))
        self.local = [rep.device == device for rep in plan.replicas]
        self.outbox = Outbox(handle, options)
        self.gear_set_at = 0.0  # when the last gear switch landed here (the gear-propagation test reads it)

    def send(self, req: Request, replica: int, now: float) -> None:
        if self.local[replica]:
            super().send(req, replica, now)
        else:
            self.outbox.put(req, replica)

    def on_gear(self, gear: int) -> None:
        self.gear_set_at = time.monotonic()
        super().on_gear(gear)

    def local_lengths(self) -> dict[int, int]:
        """The queue length of each replica that lives on this server."""
        return {r: len(q) for r, (q, local) in enumerate(zip(self.queues, self.local, strict=True)) if local}


class FrontTransport:
    """The front end's transport: it holds no queue; every request goes to the server of its replica, and queue
    lengths are those the servers reported at the producer's last poll (one tick old)."""

    def __init__(self, plan: GearPlan, number: int, fleet: Fleet, options: RayOptions) -> None:
        self.plan = plan
        self.number = number
        self.fleet = fleet
        self.outbox = Outbox(fleet.handle, options)
        self.switched_at = 0.0  # when the producer switched gear (compared with the servers' gear_set_at)

    def send(self, req: Request, replica: int, now: float) -> None:
        self.outbox.put(req, replica)

    def queue_length(self, replica: int) -> int:
        reported = self.fleet.lengths.get(self.plan.replicas[replica].device, {})
        return reported.get(self.number, {}).get(replica, 0)

    def on_gear(self, gear: int) -> None:
        self.switched_at = time.monotonic()
        self.fleet.broadcast(self.plan, "set_gear", self.number, gear)

    def on_drain(self) -> None:
        self.fleet.broadcast(self.plan, "drain", self.number)

    def on_thresholds(self, d: ThresholdDecision) -> None:
        # online tuning: every server decides exits with its own tables, so each one gets the decision (as a gear)
        self.fleet.broadcast(self.plan, "set_thresholds", self.number, d)
