"""The consumer: one per device. It fires a batch when the batch trigger says so and the device is free.

Whenever something may have changed (a request was queued, the device came free, the gear changed, a max-wait
timer ran out) the consumer is *poked*. A poke schedules one pump with ``loop.call_soon`` rather than pumping at
once, so every event of the current instant (two requests arriving together, a batch finishing and forwarding
onto this device) is queued before the device picks its batch, exactly as the simulator takes every sample
present at the firing time.

A pump hands the policy one candidate per non-empty queue of the device (its trigger's fire time as far as the
queue now shows, :meth:`~cascadeserve.policy.BatchTrigger.fire_time_known`) and applies the
:class:`~cascadeserve.policy.BatchDecision` of :func:`~cascadeserve.policy.next_batch`: fire that replica now, or
arm a timer for when its max wait runs out. The batch takes :func:`~cascadeserve.policy.batch_size` requests, the
ones :func:`~cascadeserve.policy.batch_members` picks (oldest first, forwarded first on a tie).
When the batch ends, :meth:`~cascadeserve.policy.PlanTables.exits` with each request's own gear decides who is
answered and who is forwarded, and the generation's routers pick the next replica. A device may serve replicas of
two plan generations during a hot-swap; it still runs one batch at a time, and the policy's tie-break (which
orders generations too) chooses between them.

With a generation's adaptive batch limit (AIMD or the p99 fit, Clipper's batching), a batch is also
capped at ``limit(replica)``, oldest requests first, and when the device hands the batch back ``observe(replica,
t1 - t0, size)`` reports how long the device had it, from the batch's start to its results: the simulator passes the
same span (the profiled runtime plus the plan's batch overhead), and on real devices it is the runtime Clipper
measures. A batch whose model raised reports nothing (how long a failure took says nothing about the batch size).

A model that raises fails only its own rows: the consumer reruns the batch one row at a time (on that failure path
only), so a poison row fails alone (or falls back to an earlier stage's answer, flagged) while the rows that shared
its batch are served. An upstream stage that fails (down, an error, a timeout) fails every row alike, so its batch
falls back (or fails with 502/504) at once: the stage-failure rule of :mod:`cascadeserve.policy.failure` decides.
Rows whose scores come back NaN or Inf fail (or fall back) as a raising model's rows do, and an error while applying
a batch's results answers every row not yet answered or sent on: no request of a batch can be left hanging.

With online threshold tuning on (``Generation.tuning``), :meth:`~cascadeserve.runtime.tuning.ServingTuning.on_batch`
first extends each row's trail and feeds the whole records; an audited early exit is answered first and then a
continuation of it is forwarded (it answers nobody and is dropped where a model fails on it).
"""

from __future__ import annotations

import asyncio
import math

import numpy as np

from cascadeserve.policy import batch_members, batch_size, next_batch
from cascadeserve.policy.adaptive import capped_trigger
from cascadeserve.runtime.clock import Cancellable, Clock
from cascadeserve.runtime.device import BatchOutput, Device, batch_of
from cascadeserve.runtime.generation import Generation
from cascadeserve.runtime.observer import BatchEvent, Observer
from cascadeserve.runtime.queue import ReplicaQueue
from cascadeserve.runtime.request import Answer, Best, ModelFailed, Request, stage_failure
from cascadeserve.runtime.tuning import continuation

__all__ = ["Consumer"]


class Consumer:
    """Drives one device: picks batches from its replicas' queues and applies their results."""

    def __init__(self, device: Device, clock: Clock, observer: Observer, *, order: int = 0) -> None:
        self.device = device
        self.order = order  # the device's rank, for same-instant timers on a fake clock
        self.clock = clock
        self.observer = observer
        self.lanes: dict[tuple[int, int], tuple[Generation, ReplicaQueue]] = {}  # (generation, replica) ->
        self.busy = False
        self.busy_since = math.inf  # when the running batch started (readiness looks for a stalled device)
        self._scheduled = False
        self._timer: Cancellable | None = None
        self._timer_at = math.inf
        self._tasks: set[asyncio.Task[None]] = set()
        self._forwarded: set[Request] = set()  # of the batch being applied (so a failure cannot answer them)

    def add_lane(self, gen: Generation, replica: int, queue: ReplicaQueue) -> None:
        """Serve ``replica`` of ``gen`` from ``queue`` on this device."""
        self.lanes[(gen.number, replica)] = (gen, queue)

    def drop_generation(self, gen: Generation) -> None:
        self.lanes = {key: lane for key, lane in self.lanes.items() if lane[0] is not gen}

    def poke(self) -> None:
        if not self._scheduled and not self.busy:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._pump)

    def poke_after_arrivals(self) -> None:
        """Pump at this instant, after its arrivals: a timer due now, of this device's order (on a fake clock those
        fire after the instant's arrivals; on a real one at once)."""
        self._arm(self.clock.now())

    # -- deciding ----------------------------------------------------------------------------------------------
    def _pump(self) -> None:
        self._scheduled = False
        if self.busy:
            return
        now = self.clock.now()
        cands: list[tuple[float, float, int, int]] = []
        for (number, r), (gen, q) in self.lanes.items():
            n = len(q)
            if n:
                oldest = q.oldest
                trig = (
                    gen.triggers[r]
                    if gen.batch_limit is None
                    else capped_trigger(gen.triggers[r], gen.batch_limit.limit(r))
                )
                cands.append((trig.fire_time_known(now, n, oldest), oldest, number, r))
        decision = next_batch(cands)
        if decision is None:
            return
        if decision.at > now:
            self._arm(decision.at)
            return
        r = decision.replica
        gen, q = self.lanes[(decision.generation, r)]
        limit = gen.batch_limit
        size = batch_size(gen.triggers[r], len(q), None if limit is None else limit.limit(r))
        batch = q.take(batch_members(size, *q.times()))
        self.busy = True
        self.busy_since = now
        task = asyncio.get_running_loop().create_task(self._run(gen, r, batch, now))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _arm(self, wake: float) -> None:
        """Make sure a timer pokes us at ``wake`` (the earliest max-wait deadline)."""
        if wake >= self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = wake
        self._timer = self.clock.call_at(wake, self._fired, order=self.order)

    def _fired(self) -> None:
        self._timer = None
        self._timer_at = math.inf
        self.poke()

    # -- running -----------------------------------------------------------------------------------------------
    async def _run(self, gen: Generation, r: int, batch: list[Request], t0: float) -> None:
        row = gen.replica_row[r]
        for req in batch:
            req.queue_s += t0 - req.enqueued
        try:
            inputs = batch_of([req.payload for req in batch])
            out = await self.device.run(row, inputs)
        except Exception as e:  # a model that raises fails its own rows, not the batch's others nor the server
            decision, err = stage_failure(gen.model_names[row], e)  # policy/failure.py
            if len(batch) > 1 and decision.isolate_rows:  # find the rows that make it raise: each row alone
                answered = await self._one_by_one(gen, r, row, batch, t0)
            else:
                t1 = self.clock.now()
                for req in batch:
                    req.compute_s += t1 - t0
                    gen.answer_early(req, t1, err)  # earlier stage (flagged), or 500/502/504
                answered = 0
            self._record(gen, r, row, t0, self.clock.now(), len(batch), answered, failed=True)
        else:
            t1 = self.clock.now()
            if gen.batch_limit is not None:
                gen.batch_limit.observe(r, t1 - t0, len(batch))
            answered = self._apply_safe(gen, r, row, batch, out, t0, t1)
            self._record(gen, r, row, t0, t1, len(batch), answered, host_share=out.host_share)
        finally:
            self.busy = False
            self.busy_since = math.inf
            self.poke()

    async def _one_by_one(self, gen: Generation, r: int, row: int, batch: list[Request], t0: float) -> int:
        """Rerun a batch that raised one row at a time: the rows that raise alone fail (or fall back), the rest are
        answered or forwarded as usual. Returns how many this stage answered."""
        answered = 0
        for req in batch:
            if req.done:
                continue
            try:
                out = await self.device.run(row, batch_of([req.payload]))
            except Exception as e:
                t1 = self.clock.now()
                req.compute_s += t1 - t0
                gen.answer_early(req, t1, stage_failure(gen.model_names[row], e)[1])
                continue
            answered += self._apply_safe(gen, r, row, [req], out, t0, self.clock.now())
        return answered

    def _apply_safe(
        self, gen: Generation, r: int, row: int, batch: list[Request], out: BatchOutput, t0: float, t1: float
    ) -> int:
        """:meth:`_apply`, and should it raise, fail (or fall back) every row of the batch not yet answered or sent
        on, so that nothing is left hanging whatever went wrong."""
        try:
            return self._apply(gen, r, row, batch, out, t0, t1)
        except Exception as e:
            err = ModelFailed(gen.model_names[row], e)
            for req in batch:
                if req.queue is None and req not in self._forwarded:
                    gen.answer_early(req, t1, err)
            return 0
        finally:
            self._forwarded.clear()

    def _apply(
        self, gen: Generation, r: int, row: int, batch: list[Request], out: BatchOutput, t0: float, t1: float
    ) -> int:
        """Answer the sure requests, forward the others; returns how many this stage answered."""
        tables = gen.tables
        labels, certs = out.labels, out.certainties
        if len(labels) != len(batch) or len(certs) != len(batch):
            raise ValueError(f"the device answered {len(labels)} labels and {len(certs)} certainties for {len(batch)}")
        gears = None if gen.single_gear else np.fromiter((req.gear for req in batch), dtype=np.int64, count=len(batch))
        sure = tables.exits(row, certs, gears)
        garbage = [False] * len(batch) if out.garbage is None else out.garbage.tolist()
        emulated = self.device.emulated
        name = gen.model_names[row]
        stage = tables.stage
        answered = 0
        sure_l, labels_l, certs_l = sure.tolist(), labels.tolist(), certs.tolist()
        outputs = out.outputs
        tuning = gen.tuning
        # online tuning: trails, whole records, and which early exits are audited (runtime/tuning.py)
        audit = None if tuning is None else tuning.on_batch(row, batch, sure_l, labels_l, certs_l, garbage)
        nxt = tables.next_row
        rows = zip(batch, sure_l, labels_l, certs_l, garbage, strict=True)
        for k, (req, ok, label, cert, bad) in enumerate(rows):
            req.compute_s += t1 - t0
            if req.audit:  # an audit continuation (answered already): on to the next stage, unless this was the last
                if not bad and nxt[req.gear, row] >= 0:
                    gen.forward(req, row, t1, r)
                continue
            if req.done:  # its deadline answered it while the batch ran: refuse a second answer
                self.observer.refused_duplicate()
                continue
            if bad:  # NaN/Inf scores: this row fails (or an earlier stage answers it, flagged) and goes no further
                gen.answer_early(req, t1, ModelFailed(name, ValueError("the model returned non-finite scores")))
            elif ok:
                answered += 1
                answer = Answer(
                    label=int(label),
                    certainty=float(cert),
                    model=name,
                    stage=int(stage[req.gear, row]),
                    gear=req.gear,
                    queue_s=req.queue_s,
                    compute_s=req.compute_s,
                    finished=t1,
                    emulated=emulated,
                    output=None if outputs is None else outputs[k],
                )
                req.resolve(answer)  # first: an audit never delays the answer
                if audit is not None and audit[k]:
                    req.best = Best(int(label), float(cert), row)
                    gen.forward(continuation(req, answer), row, t1, r)
            else:
                req.best = Best(int(label), float(cert), row)
                req.best_output = None if outputs is None else outputs[k]
                self._forwarded.add(req)
                gen.forward(req, row, t1, r)
        return answered

    def _record(
        self,
        gen: Generation,
        r: int,
        row: int,
        t0: float,
        t1: float,
        size: int,
        answered: int,
        *,
        failed: bool = False,
        host_share: float = 0.0,
    ) -> None:
        self.observer.batch(
            BatchEvent(
                start=t0,
                end=t1,
                device=gen.replica_device[r],
                replica=r,
                row=row,
                size=size,
                answered=answered,
                model=gen.model_names[row],
                device_name=self.device.name,
                generation=gen.number,
                failed=failed,
                host_share=host_share,
            )
        )

    def stalled(self, now: float, after_s: float) -> str | None:
        """Why this consumer looks stuck, or ``None``: a batch running for over ``after_s``, or, with the device
        free, a request waiting in one of its queues for over ``after_s`` (a trigger that can never fire)."""
        if self.busy:
            if now - self.busy_since > after_s:
                return f"device {self.device.name!r} has run one batch for {now - self.busy_since:.1f} s"
            return None
        oldest = min((q.oldest for _, q in self.lanes.values()), default=math.inf)
        if now - oldest > after_s:
            return f"a request has waited {now - oldest:.1f} s on free device {self.device.name!r}"
        return None

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for t in list(self._tasks):
            t.cancel()
