"""The fleet: the front end's view of its server actors, one per device of the plans it has served.

The fleet holds the actor handle of each device's server (started on first need, by the ``spawn`` callable the
front end gives it) and what each server's last poll reported: when it was born (a new value means Ray restarted
it), its queue lengths per generation and replica (the producer's Q0 and the HTTP metrics read these, one tick
old), and when it applied each generation's gear. It broadcasts the front end's fire-and-forget messages (gear
switches, drains, retirements) to the servers of a plan's devices.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cascadeserve.plan import Device as PlanDevice
from cascadeserve.plan import GearPlan

__all__ = ["Fleet"]


class Fleet:
    """The server actors, by device name, and what their last poll said."""

    def __init__(self, spawn: Callable[[PlanDevice, int, GearPlan], Any]) -> None:
        self.spawn = spawn
        self.handles: dict[str, Any] = {}
        self.born: dict[str, float] = {}
        self.lengths: dict[str, dict[int, dict[int, int]]] = {}  # device -> generation -> replica -> length
        self.queues: dict[str, dict[str, int]] = {}  # device -> replica id -> length
        self.gear_set_at: dict[str, dict[int, float]] = {}  # device -> generation -> when its gear was applied

    def handle(self, device: str) -> Any:
        return self.handles[device]

    def ensure(self, plan: GearPlan) -> None:
        """Start a server for every device of ``plan`` that has none (it loads its replicas as it starts)."""
        for d, dev in enumerate(plan.devices):
            if dev.name not in self.handles:
                self.handles[dev.name] = self.spawn(dev, d, plan)

    def broadcast(self, plan: GearPlan, method: str, *args: Any) -> None:
        """Call ``method`` on the server of every device of ``plan`` (fire and forget)."""
        for dev in plan.devices:
            h = self.handles.get(dev.name)
            if h is not None:
                getattr(h, method).remote(*args)

    def queue_lengths(self) -> dict[str, int]:
        """Queue length per replica id, summed over the servers' last reports."""
        out: dict[str, int] = {}
        for rep in self.queues.values():
            for rid, n in rep.items():
                out[rid] = out.get(rid, 0) + n
        return out
