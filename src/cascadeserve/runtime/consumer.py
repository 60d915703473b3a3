"""The consumer: one per device. It fires a batch when the batch trigger says so and the device is free.

Whenever something may have changed (a request was queued, the device came free, the gear changed, a max-wait
timer ran out) the consumer is *poked*. A poke schedules one pump with ``loop.call_soon`` rather than pumping at
once, so every event of the current instant (two requests arriving together, a batch finishing and forwarding
onto this device) is queued before the device picks its batch, exactly as the simulator takes every sample
present at the firing time.

A pump asks each of the device's replica queues :meth:`BatchTrigger.ready` and lets
:func:`~cascadeserve.policy.choose_replica` pick among the ready ones; if none is ready it arms a timer for the
earliest :meth:`BatchTrigger.deadline`. When the batch ends, :func:`~cascadeserve.policy.sure_mask` with each
request's own gear's threshold decides who is answered and who is forwarded. A device may serve replicas of
two plan generations during a hot-swap; it still runs one batch at a time.

With a generation's :class:`~cascadeserve.policy.AimdBatchLimit` (MS+'s Clipper-style batching), a batch is also
capped at ``limit(replica)``, oldest requests first, and when the device hands the batch back ``observe(replica,
t1 - t0)`` reports how long the device had it, from the batch's start to its results: the simulator passes the
same span (the profiled runtime plus the plan's batch overhead), and on real devices it is the runtime Clipper
measures. A batch whose model raised reports nothing (how long a failure took says nothing about the batch size).
"""

from __future__ import annotations

import asyncio
import math

import numpy as np

from cascadeserve.policy import choose_replica, sure_mask
from cascadeserve.runtime.clock import Clock
from cascadeserve.runtime.device import Device
from cascadeserve.runtime.generation import Generation
from cascadeserve.runtime.observer import BatchEvent, Observer
from cascadeserve.runtime.request import Answer, ModelFailed, Request

__all__ = ["Consumer"]


class Consumer:
    """Drives one device: picks batches from its replicas' queues and applies their results."""

    def __init__(self, device: Device, clock: Clock, observer: Observer, *, order: int = 0) -> None:
        self.device = device
        self.order = order  # the device's rank, for same-instant timers on a fake clock
        self.clock = clock
        self.observer = observer
        self.lanes: list[tuple[Generation, int]] = []
        self.busy = False
        self._scheduled = False
        self._timer: asyncio.Task[None] | None = None
        self._timer_at = math.inf
        self._tasks: set[asyncio.Task[None]] = set()

    def add_lane(self, gen: Generation, replica: int) -> None:
        self.lanes.append((gen, replica))

    def drop_generation(self, gen: Generation) -> None:
        self.lanes = [(g, r) for g, r in self.lanes if g is not gen]

    def poke(self) -> None:
        if not self._scheduled and not self.busy:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._pump)

    # -- deciding ----------------------------------------------------------------------------------------------
    def _pump(self) -> None:
        self._scheduled = False
        if self.busy:
            return
        now = self.clock.now()
        ready: list[tuple[float, int]] = []
        wake = math.inf
        for i, (gen, r) in enumerate(self.lanes):
            q = gen.queues[r]
            n = len(q)
            if not n:
                continue
            trig = gen.triggers[r]
            oldest = q.oldest
            if trig.ready(n, oldest, now):
                ready.append((oldest, i))
            else:
                wake = min(wake, trig.deadline(oldest))
        if not ready:
            self._arm(wake)
            return
        gen, r = self.lanes[choose_replica(ready)]
        q = gen.queues[r]
        size = gen.triggers[r].take(len(q))
        if gen.batch_limit is not None:
            size = min(size, gen.batch_limit.limit(r))
        batch = q.take(size)
        self.busy = True
        task = asyncio.get_running_loop().create_task(self._run(gen, r, batch, now))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _arm(self, wake: float) -> None:
        """Make sure a timer pokes us at ``wake`` (the earliest max-wait deadline), if there is one."""
        if wake == math.inf or wake >= self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = wake

        async def fire() -> None:
            await self.clock.sleep_until(wake, order=self.order)
            self._timer = None
            self._timer_at = math.inf
            self.poke()

        self._timer = asyncio.get_running_loop().create_task(fire())

    # -- running -----------------------------------------------------------------------------------------------
    async def _run(self, gen: Generation, r: int, batch: list[Request], t0: float) -> None:
        row = gen.replica_row[r]
        for req in batch:
            req.queue_s += t0 - req.enqueued
        try:
            inputs = np.asarray([req.payload for req in batch])
            out = await self.device.run(row, inputs)
        except Exception as e:  # a model that raises fails its batch, not the server
            t1 = self.clock.now()
            err = ModelFailed(gen.model_names[row], e)
            for req in batch:
                req.compute_s += t1 - t0
                req.fail(err)
            self._record(gen, r, row, t0, t1, len(batch), 0, failed=True)
        else:
            t1 = self.clock.now()
            if gen.batch_limit is not None:
                gen.batch_limit.observe(r, t1 - t0)
            answered = self._apply(gen, row, batch, out.labels, out.certainties, t0, t1)
            self._record(gen, r, row, t0, t1, len(batch), answered)
        finally:
            self.busy = False
            self.poke()

    def _apply(
        self,
        gen: Generation,
        row: int,
        batch: list[Request],
        labels: np.ndarray,
        certs: np.ndarray,
        t0: float,
        t1: float,
    ) -> int:
        """Answer the sure requests, forward the others; returns how many this stage answered."""
        tables = gen.tables
        if gen.single_gear:
            sure = sure_mask(certs, tables.threshold[0, row])
        else:
            gears = np.fromiter((req.gear for req in batch), dtype=np.int64, count=len(batch))
            sure = sure_mask(certs, tables.threshold[gears, row])
        emulated = self.device.emulated
        name = gen.model_names[row]
        stage = tables.stage
        answered = 0
        for req, ok, label, cert in zip(batch, sure.tolist(), labels.tolist(), certs.tolist(), strict=True):
            req.compute_s += t1 - t0
            if req.done:  # its deadline answered it while the batch ran: refuse a second answer
                self.observer.refused_duplicate()
                continue
            if ok:
                answered += 1
                req.resolve(
                    Answer(
                        label=int(label),
                        certainty=float(cert),
                        model=name,
                        stage=int(stage[req.gear, row]),
                        gear=req.gear,
                        queue_s=req.queue_s,
                        compute_s=req.compute_s,
                        finished=t1,
                        emulated=emulated,
                    )
                )
            else:
                req.best = (int(label), float(cert), row)
                gen.forward(req, row, t1)
        return answered

    def _record(
        self, gen: Generation, r: int, row: int, t0: float, t1: float, size: int, answered: int, *, failed: bool = False
    ) -> None:
        self.observer.batch(
            BatchEvent(
                t0,
                t1,
                gen.replica_device[r],
                r,
                row,
                size,
                answered,
                gen.model_names[row],
                self.device.name,
                gen.number,
                failed,
            )
        )

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for t in list(self._tasks):
            t.cancel()
