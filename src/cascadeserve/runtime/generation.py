"""A plan generation: one gear plan in force, with its lookup tables, routers, gear, triggers and transport.

The runtime serves one generation at a time. A plan hot-swap starts a new generation for new requests while the
old one *drains*: its queues fire as soon as a device is free (the policy's drain trigger, as in the simulator's
drain), and every request finishes in the generation it was admitted to. No request moves between generations,
so a swap can neither drop nor duplicate one.

Every decision here is the policy core's (:class:`~cascadeserve.policy.PlanTables`, its
:class:`~cascadeserve.policy.Routers` and :class:`~cascadeserve.policy.GearPolicy`, and the deadline rule
:func:`~cascadeserve.policy.on_deadline`); this class holds the state those decisions read and applies them.
Where a chosen replica lives is the injected :class:`~cascadeserve.runtime.transport.Transport`'s business.
The generation's adaptive batch limit (``batch_limit``: an AIMD or p99-fit cap, given, or built from the plan's
``batching`` field by :func:`~cascadeserve.policy.adaptive.batch_limit_for`) is asked and updated by the
consumers for this generation's replicas; each generation has its own, so a hot-swapped plan starts afresh while
the old one drains with its own. When the runtime caches answers, :meth:`Generation.release` stores each cascade
answer in the :class:`~cascadeserve.policy.cache.PredictionCache` under the key its request looked up. With
online tuning (a ``tuning`` factory, ``serve --tune``), :attr:`Generation.tuning` holds this generation's
:class:`~cascadeserve.runtime.tuning.ServingTuning`, and :meth:`Generation.tune` applies the producer tick's
threshold decision.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cascadeserve.plan import GearPlan
from cascadeserve.policy import BatchTrigger, GearSchedule, PlanTables, Routers, on_deadline
from cascadeserve.policy.adaptive import BatchLimit, batch_limit_for
from cascadeserve.policy.cache import PredictionCache
from cascadeserve.policy.tuning import ThresholdDecision
from cascadeserve.runtime.clock import Clock
from cascadeserve.runtime.observer import Observer, SwapReason
from cascadeserve.runtime.queue import Admission
from cascadeserve.runtime.request import Answer, Request, ServingError
from cascadeserve.runtime.transport import LocalTransport, Transport
from cascadeserve.runtime.tuning import ServingTuning, TuningFactory

__all__ = ["Generation"]


class Generation:
    """The state of one plan while it serves (or drains)."""

    def __init__(
        self,
        number: int,
        plan: GearPlan,
        model_names: Sequence[str],
        *,
        clock: Clock,
        admission: Admission,
        observer: Observer,
        initial_qps: float = 0.0,
        batch_limit: BatchLimit | None = None,
        gear_schedule: GearSchedule | None = None,
        transport: Transport | None = None,
        emulated: bool = False,
        cache: PredictionCache[Answer] | None = None,
        tuning: TuningFactory | None = None,
        tuning_labels: Callable[[Any], int] | None = None,
    ) -> None:
        self.number = number
        self.plan = plan
        self.model_names = tuple(model_names)
        self.tables = PlanTables(plan, {m: i for i, m in enumerate(self.model_names)})
        self.gear_policy = self.tables.gear_policy(gear_schedule)
        self.routers: Routers = self.tables.new_routers()
        self.transport: Transport = transport if transport is not None else LocalTransport(self.tables.n_replicas)
        self.clock = clock
        self.admission = admission
        self.observer = observer
        self.emulated = emulated  # answers come from emulated devices (marked so in every Answer)
        self.gear = self.gear_policy.initial(initial_qps)
        self.triggers: Sequence[BatchTrigger] = self.tables.triggers_for(self.gear)
        self.replica_row: list[int] = self.tables.replica_row.tolist()
        self.replica_device: list[int] = self.tables.replica_device.tolist()
        self.single_gear = self.tables.n_gears == 1
        # keyed by this plan's replica indices, as in the simulator
        self.batch_limit = batch_limit if batch_limit is not None else batch_limit_for(plan)
        self.cache = cache
        # online threshold tuning (runtime/tuning.py): this generation's own, on its own tables
        self.tuning = None if tuning is None else ServingTuning(tuning(self.tables), self.tables, labels=tuning_labels)
        self.in_flight = 0
        self.live: set[Request] = set()  # admitted and not yet answered (failed on a hard stop)
        self.draining = False
        self.on_drained: Callable[[Generation], None] | None = None
        self.reason: SwapReason | None = None  # why it was swapped in (None: the plan the runtime started with)

    # -- gear --------------------------------------------------------------------------------------------------
    def set_gear(self, gear: int) -> None:
        """Switch every replica to ``gear`` (new arrivals take its cascade; queues take its triggers)."""
        if gear == self.gear:
            return
        self.gear = gear
        if not self.draining:
            self.triggers = self.tables.triggers_for(gear)
        self.transport.on_gear(gear)

    def tune(self, now: float) -> None:
        """The producer tick's threshold decision for the gear in force, applied here and through the transport."""
        if self.tuning is None or self.draining:
            return
        d = self.tuning.decide(now, self.gear)
        if d is not None:
            self.apply_thresholds(d)

    def apply_thresholds(self, d: ThresholdDecision) -> None:
        """Hot-swap ``d.gear``'s thresholds to ``d.new``: in this generation's tables (every later exit decision,
        requests in flight included), through the transport (remote servers), and to the observer (metrics)."""
        if self.tuning is not None:
            self.tuning.applied(d)
        else:
            self.tables.apply_thresholds(d)
        self.transport.on_thresholds(d)
        self.observer.thresholds_changed(d, self.number)

    def q0(self) -> int:
        """The first stage's queue length in the current gear (the hysteresis input)."""
        return self.tables.q0(self.gear, self.transport.queue_length)

    def drain(self) -> None:
        """Fire every queue as soon as its device is free: no more arrivals will fill them."""
        self.draining = True
        self.triggers = self.tables.triggers_for(self.gear, draining=True)
        self.transport.on_drain()
        self._maybe_drained()

    # -- routing -----------------------------------------------------------------------------------------------
    def admit(self, req: Request, now: float, replica: int | None = None) -> None:
        """Put a new request on the first-stage replica the policy picks for its gear, or on ``replica`` when given
        (a request that another process already routed, as the Ray backend's servers receive them)."""
        self.in_flight += 1
        self.live.add(req)
        self.transport.send(req, self.routers.admit(req.gear) if replica is None else replica, now)

    def forward(self, req: Request, row: int, now: float, source: int | None = None) -> None:
        """Send a request that ``row`` was unsure of (in a batch of replica ``source``) to the next model of its own
        gear's cascade."""
        self.transport.send(req, self.routers.forward(req.gear, row, source), now)

    # -- bookkeeping -------------------------------------------------------------------------------------------
    def release(self, req: Request, answer: Answer | None, error: ServingError | None) -> None:
        """Called exactly once per request when it is answered or failed."""
        self.in_flight -= 1
        self.live.discard(req)
        self.admission.in_flight -= 1
        self.admission.answered += 1
        if self.cache is not None and answer is not None and req.cache_key is not None and not answer.fallback:
            self.cache.store(req.cache_key, answer, req.cache_epoch)
        self.observer.answered(req, answer, error, answer.finished if answer is not None else self.clock.now())
        if self.draining:
            self._maybe_drained()

    def answer_early(self, req: Request, now: float, error: ServingError) -> bool:
        """Apply the deadline rule to ``req`` now: the last stage that ran answers (``fallback``), or ``error`` when
        none ran. Used by deadlines, and by the Ray backend when the server holding a request dies. ``False`` when
        the request was already answered."""
        if req.done:
            return False
        if req.queue is not None:
            req.queue_s += now - req.enqueued
            req.queue.discard(req)
        best = req.best
        decision = on_deadline(None if best is None else best.row)
        if decision.fallback_row is None or best is None:
            return req.fail(error)
        row = decision.fallback_row
        return req.resolve(
            Answer(
                label=best.label,
                certainty=best.certainty,
                model=self.model_names[row],
                stage=int(self.tables.stage[req.gear, row]),
                gear=req.gear,
                queue_s=req.queue_s,
                compute_s=req.compute_s,
                finished=now,
                fallback=True,
                emulated=self.emulated,
                output=req.best_output,
            )
        )

    def _maybe_drained(self) -> None:
        if self.draining and self.in_flight == 0 and self.on_drained is not None:
            cb, self.on_drained = self.on_drained, None
            cb(self)

    def queued(self) -> int:
        return sum(self.transport.queue_length(r) for r in range(self.tables.n_replicas))
