"""The inference server: the body of the Ray actor that serves one device of the plan (the paper's consumer).

A server is composed of the runtime's own parts, unchanged: a
:class:`~cascadeserve.runtime.LocalPlacement` restricted to its device (so one
:class:`~cascadeserve.runtime.consumer.Consumer` fires its batches by the policy core's batch trigger), and one
:class:`~cascadeserve.runtime.Generation` per plan the front end installed, each with a
:class:`~cascadeserve.backends.ray.transport.ServerTransport`: its own replicas queue here, and a sample its stage
was unsure of is forwarded straight to the server of the next stage's replica. It is not a
:class:`~cascadeserve.runtime.Runtime`: it has no producer and admits nothing itself (the front end does both), and
its generations are numbered by the front end, which installs them with :meth:`InferenceServer.open`.

Models load in the constructor, exactly those of the replicas placed on this device (and a hot-swapped plan's new
ones when it is installed, before it serves), never on a request. Requests keep their deadline here (the time left
travels with them) and are answered at it with the last stage's prediction, as in the runtime. Batch events are
kept in a :class:`BatchLog` until the front end's next poll (:meth:`InferenceServer.sync`) carries them to its
observer.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import ray

from cascadeserve.backends.ray.audit import ServerTuning
from cascadeserve.backends.ray.options import (
    Item,
    ModelSource,
    RayOptions,
    Result,
    Trail,
    encode_result,
    encode_trail,
)
from cascadeserve.backends.ray.transport import ServerTransport
from cascadeserve.plan import GearPlan
from cascadeserve.policy.thresholds import ThresholdDecision
from cascadeserve.profile import Profile
from cascadeserve.runtime import (
    Answer,
    BatchEvent,
    Clock,
    Device,
    EmulatedDevice,
    Generation,
    LocalPlacement,
    ModelFn,
    MonotonicClock,
    NullObserver,
    Request,
    ServingError,
    ThreadDevice,
    arm_deadline,
    load_model,
)
from cascadeserve.runtime.queue import Admission

__all__ = ["BatchLog", "InferenceServer", "ServerActor"]


class BatchLog(NullObserver):
    """Keeps the server's batch events until the producer's next poll carries them to the front end's observer."""

    def __init__(self, limit: int = 20_000) -> None:
        self.events: list[BatchEvent] = []
        self.limit = limit

    def batch(self, event: BatchEvent) -> None:
        if len(self.events) < self.limit:  # a front end that stopped polling must not grow this without bound
            self.events.append(event)

    def take(self) -> list[BatchEvent]:
        out, self.events = self.events, []
        return out


class InferenceServer:
    """One device: its replicas' queues, its consumer and its models (the body of a Ray server actor)."""

    def __init__(
        self,
        device: str,
        model_names: Sequence[str],
        profile: Profile | None,
        models: Mapping[str, ModelSource],
        certainty: str,
        options: RayOptions,
    ) -> None:
        self.born = time.monotonic()
        self.device = device
        self.model_names = tuple(model_names)
        self.profile = profile
        self.certainty = certainty
        self.options = options
        self.clock: Clock = MonotonicClock()
        self.fns: dict[int, ModelFn] = {}
        self._load(models)  # at start-up, exactly the models of this device's replicas
        self.log = BatchLog()
        self.placement = LocalPlacement(self._make_device, self.clock, self.log, devices=(device,))
        # Unbounded: the front end bounds admission. Generations count their requests in it, so it stays balanced.
        self.admission = Admission()
        self.peers: dict[str, Any] = {}  # device -> server handle, for forwarding (updated by every open)
        self.gens: dict[int, Generation] = {}
        self.opened: dict[int, asyncio.Event] = {}
        self._rid = 0

    def _load(self, models: Mapping[str, ModelSource]) -> None:
        for name, src in models.items():
            row = self.model_names.index(name)
            if row in self.fns:
                continue
            if isinstance(src, tuple):
                self.fns[row] = load_model(src[0], src[1])
            else:
                self.fns[row] = load_model(src)

    def _make_device(self, name: str, order: int) -> Device:
        if self.profile is not None:
            return EmulatedDevice(name, self.profile, self.clock, order=order)
        # The dict is shared, so models loaded for a later plan reach the device without rebuilding it.
        dev = ThreadDevice(name, {}, self.certainty)
        dev.models = self.fns
        return dev

    async def ping(self) -> float:
        return self.born

    async def open(
        self,
        number: int,
        plan: GearPlan,
        gear: int,
        peers: Mapping[str, Any],
        models: Mapping[str, ModelSource],
        tuned: bool = False,
    ) -> None:
        """Install generation ``number`` (loading any model it places here that is not loaded yet); ``tuned``:
        online tuning is on, so its requests keep trails (backends/ray/audit.py)."""
        self.peers.update(peers)
        if number in self.gens:
            return
        self._load(models)
        transport = ServerTransport(plan, self.device, self.peers.__getitem__, self.options)
        gen = Generation(
            number,
            plan,
            self.model_names,
            clock=self.clock,
            admission=self.admission,
            observer=self.log,
            transport=transport,
        )
        if tuned:
            gen.tuning = ServerTuning(gen.tables, self.clock)
        transport.outbox.bind(gen)
        self.placement.place(gen)
        gen.set_gear(gear)
        self.gens[number] = gen
        self.opened.setdefault(number, asyncio.Event()).set()

    async def _generation(self, number: int) -> Generation:
        gen = self.gens.get(number)
        if gen is None:  # a restarted server: the front end's next poll re-installs its plans
            event = self.opened.setdefault(number, asyncio.Event())
            await asyncio.wait_for(event.wait(), timeout=10.0)
            gen = self.gens[number]
        return gen

    def _queue(self, gen: Generation, replica: int, items: Sequence[Item]) -> list[Request]:
        now = self.clock.now()
        loop = asyncio.get_running_loop()
        out = []
        for it in items:
            self.admission.add(1)
            remaining = it.remaining_s
            req = Request(self._rid, it.payload, now, gen, it.gear, loop.create_future(), now + remaining)
            self._rid += 1
            req.queue_s, req.compute_s, req.best = it.queue_s, it.compute_s, it.best
            req.trail, req.audit = (None if it.trail is None else list(it.trail)), it.audit
            gen.admit(req, now, replica)
            if remaining != math.inf:
                arm_deadline(req, self.clock, max(0.0, remaining))
            out.append(req)
        return out

    async def accept(
        self, number: int, replica: int, items: Sequence[Item]
    ) -> AsyncIterator[list[tuple[int, Result, Trail]]]:
        """Queue ``items`` on ``replica`` and stream ``(index, answer, trail)`` groups back as they are answered."""
        gen = await self._generation(number)
        reqs = self._queue(gen, replica, items)
        pending: dict[asyncio.Future[Answer], int] = {req.future: i for i, req in enumerate(reqs)}
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            out = []
            for f in done:
                i = pending.pop(f)
                out.append((i, encode_result(f), encode_trail(reqs[i].trail)))
            yield out

    async def accept_one(self, number: int, replica: int, item: Item) -> tuple[Result, Trail]:
        """:meth:`accept` for a single request: one plain call, answered when the request is."""
        gen = await self._generation(number)
        (req,) = self._queue(gen, replica, [item])
        with contextlib.suppress(ServingError):
            await req.future
        return (encode_result(req.future), encode_trail(req.trail))

    async def set_gear(self, number: int, gear: int) -> None:
        gen = self.gens.get(number)
        if gen is not None:
            gen.set_gear(gear)

    async def set_thresholds(self, number: int, d: ThresholdDecision) -> None:
        """Online tuning re-tuned ``d.gear`` of generation ``number``: exits decided here use ``d.new`` from now."""
        gen = self.gens.get(number)
        if gen is not None:
            gen.tables.apply_thresholds(d)

    async def thresholds(self, number: int) -> list[tuple[float, ...]]:
        """The thresholds in force here for every gear of generation ``number`` (what the front end last sent)."""
        gen = self.gens[number]
        return [gen.tables.thresholds_of(g) for g in range(gen.tables.n_gears)]

    async def drain(self, number: int | None = None) -> None:
        """Drain one generation (a hot-swap replaced it) or all (the front end is stopping).

        A hot-swapped generation is only drained here, not retired: requests of it may still arrive (sent by the
        front end in the same loop iteration as the swap, or forwarded by another server), so it stays installed
        until the front end, which holds every request until its answer, says :meth:`retire`. A stop retires
        every generation once it is empty.
        """
        for gen in list(self.gens.values()):
            if number is None or gen.number == number:
                if number is None:
                    gen.on_drained = self._retire
                gen.drain()

    async def retire(self, number: int) -> None:
        """Drop generation ``number`` once nothing of it is left here (the front end answered all of it)."""
        gen = self.gens.get(number)
        if gen is not None:
            gen.on_drained = self._retire
            gen.drain()

    def _retire(self, gen: Generation) -> None:
        self.gens.pop(gen.number, None)
        self.placement.retire(gen)

    async def sync(self, gears: Mapping[int, int]) -> dict[str, Any]:
        """The producer's per-tick poll: apply the gears, report Q0 per generation and every queue length."""
        for number, gear in gears.items():
            gen = self.gens.get(number)
            if gen is not None and gen.gear != gear:
                gen.set_gear(gear)
        return {
            "born": self.born,
            "gens": sorted(self.gens),
            "lengths": {n: _transport(g).local_lengths() for n, g in self.gens.items()},
            "queues": self.placement.queue_lengths(list(self.gens.values())),
            "gear_set_at": {n: _transport(g).gear_set_at for n, g in self.gens.items()},
            "gears": {n: g.gear for n, g in self.gens.items()},
            "batches": self.log.take(),
        }


def _transport(gen: Generation) -> ServerTransport:
    transport = gen.transport
    assert isinstance(transport, ServerTransport)  # every generation here is built in open() with one
    return transport


ServerActor = ray.remote(InferenceServer)
"""The Ray actor class of :class:`InferenceServer` (``.options(...)`` sets its resources per device)."""
