"""Placements: where a runtime's replicas live, injected into :class:`~cascadeserve.runtime.Runtime`.

The runtime decides nothing about *where* a replica runs. It owns admission, the producer, deadlines and the
generations of the plan; everything that depends on where the replicas are is the business of its
:class:`Placement`, which it is given at construction (and which is :class:`LocalPlacement` unless told otherwise):

* :meth:`Placement.transport` builds the :class:`~cascadeserve.runtime.transport.Transport` of a new generation
  (local queues, or an outbox to the processes that hold the replicas);
* :meth:`Placement.place` sets the new generation up to serve (here: a consumer per device and a lane per replica;
  for a distributed backend: installing the plan on the servers of its devices);
* :meth:`Placement.start`, :meth:`Placement.retire` and :meth:`Placement.stop` hear of the lifecycle: the runtime
  has started (its first generation placed), a hot-swapped generation has drained and is dropped, and the runtime
  has stopped (every request answered or failed);
* :meth:`Placement.queue_lengths` and :attr:`Placement.emulated` report what only the placement knows.

This is the seam that lets the Ray backend reuse the runtime by composition: its front end is a plain
:class:`~cascadeserve.runtime.Runtime` whose placement is the fleet of server actors, and each server composes a
:class:`LocalPlacement` restricted to its own device.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from cascadeserve.plan import GearPlan
from cascadeserve.runtime.clock import Clock
from cascadeserve.runtime.consumer import Consumer
from cascadeserve.runtime.device import Device
from cascadeserve.runtime.generation import Generation
from cascadeserve.runtime.observer import Observer
from cascadeserve.runtime.transport import LocalTransport, Transport

__all__ = ["LocalPlacement", "Placement"]


class Placement(Protocol):
    """Where the replicas of a runtime's generations live (see the module docstring)."""

    @property
    def emulated(self) -> bool:
        """Whether answers come from emulated devices (marked so in every answer and in the HTTP response)."""
        ...

    def transport(self, number: int, plan: GearPlan) -> Transport:
        """The transport of generation ``number`` of ``plan``, before the generation exists."""
        ...

    def place(self, gen: Generation) -> None:
        """Make ``gen`` (just built on :meth:`transport`'s transport) ready to serve its replicas."""
        ...

    async def start(self) -> None:
        """The runtime starts: its first generation is placed; return once its replicas can serve."""
        ...

    def retire(self, gen: Generation) -> None:
        """``gen`` drained after a hot-swap (every request of it was answered): release what serves only it."""
        ...

    async def stop(self) -> None:
        """The runtime stopped (no request is left in flight): release every device."""
        ...

    def queue_lengths(self, generations: Sequence[Generation]) -> dict[str, int]:
        """Queue length per replica id over the live ``generations`` (for metrics and the HTTP front end)."""
        ...


class LocalPlacement:
    """Every replica in this process: one :class:`~cascadeserve.runtime.consumer.Consumer` per device, built on
    first use by ``device_factory(name, order)``, serving its replicas' :class:`LocalTransport` queues.

    ``devices`` restricts it to some devices (a Ray server holds the replicas of its own device only; the others'
    requests leave through its transport); ``None`` places every replica here.
    """

    def __init__(
        self,
        device_factory: Callable[[str, int], Device],
        clock: Clock,
        observer: Observer,
        *,
        devices: Collection[str] | None = None,
    ) -> None:
        self.device_factory = device_factory
        self.clock = clock
        self.observer = observer
        self.devices = None if devices is None else frozenset(devices)
        self.consumers: dict[str, Consumer] = {}  # device name -> its consumer

    @property
    def emulated(self) -> bool:
        return any(c.device.emulated for c in self.consumers.values())

    def transport(self, number: int, plan: GearPlan) -> LocalTransport:
        return LocalTransport(len(plan.replicas))

    def place(self, gen: Generation) -> None:
        transport = gen.transport
        if not isinstance(transport, LocalTransport):  # a consumer takes its batches from local queues
            raise TypeError(f"a local placement serves local queues, not a {type(transport).__name__}")
        for r, rep in enumerate(gen.plan.replicas):
            if self.devices is not None and rep.device not in self.devices:
                continue
            consumer = self.consumers.get(rep.device)
            if consumer is None:
                order = gen.plan.device_index[rep.device]
                consumer = Consumer(self.device_factory(rep.device, order), self.clock, self.observer, order=order)
                self.consumers[rep.device] = consumer
            consumer.add_lane(gen, r, transport.attach(r, consumer))
            gen.emulated = consumer.device.emulated

    async def start(self) -> None:
        return None  # devices are built in place(); nothing to wait for

    def retire(self, gen: Generation) -> None:
        for c in self.consumers.values():
            c.drop_generation(gen)
        for name, c in list(self.consumers.items()):
            if not c.lanes and not c.busy:  # a device that only the retired plan used
                c.close()
                c.device.close()
                del self.consumers[name]

    async def stop(self) -> None:
        for c in self.consumers.values():
            c.close()
            c.device.close()
        self.consumers.clear()

    def stalled(self, now: float, after_s: float) -> str | None:
        """The first stalled consumer's description (readiness), or ``None``."""
        for c in self.consumers.values():
            why = c.stalled(now, after_s)
            if why is not None:
                return why
        return None

    def queue_lengths(self, generations: Sequence[Generation]) -> dict[str, int]:
        out: dict[str, int] = {}
        for gen in generations:
            for r, rep in enumerate(gen.plan.replicas):
                out[rep.id] = out.get(rep.id, 0) + gen.transport.queue_length(r)
        return out
