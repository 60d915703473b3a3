"""A plan generation: one gear plan in force, with its lookup tables, routers, gear, triggers and queues.

The runtime serves one generation at a time. A plan hot-swap starts a new generation for new requests while the
old one *drains*: its queues fire as soon as a device is free (minimum queue length 1, as in the simulator's
drain), and every request finishes in the generation it was admitted to. No request moves between generations,
so a swap can neither drop nor duplicate one.

Every decision here is delegated to the policy core (:class:`~cascadeserve.policy.PlanTables` and the routers
it makes); this class only holds the state those decisions read and applies them. That includes the optional
:class:`~cascadeserve.policy.AimdBatchLimit` (``batch_limit``), which the consumers ask and update for this
generation's replicas.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from cascadeserve.plan import GearPlan
from cascadeserve.policy import AimdBatchLimit, BatchTrigger, PlanTables, SmoothWeightedRoundRobin
from cascadeserve.runtime.clock import Clock
from cascadeserve.runtime.observer import Observer
from cascadeserve.runtime.queue import Admission, ReplicaQueue
from cascadeserve.runtime.request import Answer, Request, ServingError

if TYPE_CHECKING:
    from cascadeserve.runtime.consumer import Consumer

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
        batch_limit: AimdBatchLimit | None = None,
    ) -> None:
        self.number = number
        self.plan = plan
        self.model_names = tuple(model_names)
        self.tables = PlanTables(plan, {m: i for i, m in enumerate(self.model_names)})
        self.routers: dict[tuple[int, int], SmoothWeightedRoundRobin] = self.tables.new_routers()
        self.clock = clock
        self.admission = admission
        self.observer = observer
        self.gear = self.tables.selector.lookup(initial_qps)
        self.triggers: Sequence[BatchTrigger] = self.tables.triggers[self.gear]
        self.queues = [ReplicaQueue(r) for r in range(self.tables.n_replicas)]
        self.replica_row: list[int] = self.tables.replica_row.tolist()
        self.replica_device: list[int] = self.tables.replica_device.tolist()
        self.single_gear = self.tables.n_gears == 1
        self.batch_limit = batch_limit  # keyed by this plan's replica indices, as in the simulator
        self.consumers: list[Consumer] = []  # per replica, set by the runtime
        self.in_flight = 0
        self.live: set[Request] = set()  # admitted and not yet answered (failed on a hard stop)
        self.draining = False
        self.on_drained: Callable[[Generation], None] | None = None

    # -- gear --------------------------------------------------------------------------------------------------
    def set_gear(self, gear: int) -> None:
        """Switch every replica to ``gear`` (new arrivals take its cascade; queues take its triggers)."""
        self.gear = gear
        if not self.draining:
            self.triggers = self.tables.triggers[gear]
            self.poke_all()

    def q0(self) -> int:
        """The first stage's queue length, summed over its replicas (the hysteresis input)."""
        return sum(len(self.queues[r]) for r in self.tables.first_stage_replicas(self.gear))

    def drain(self) -> None:
        """Fire every queue as soon as its device is free: no more arrivals will fill them."""
        self.draining = True
        self.triggers = [BatchTrigger(1, None, self.plan.max_batch)] * self.tables.n_replicas
        self.poke_all()
        self._maybe_drained()

    def poke_all(self) -> None:
        for c in dict.fromkeys(self.consumers):
            c.poke()

    # -- routing -----------------------------------------------------------------------------------------------
    def admit(self, req: Request, now: float, replica: int | None = None) -> None:
        """Put a new request on a first-stage replica chosen by the gear's shares, or on ``replica`` when given
        (a request that another process already routed, as the Ray backend's servers receive them)."""
        self.in_flight += 1
        self.live.add(req)
        if replica is None:
            replica = self._pick(req.gear, int(self.tables.first_row[req.gear]))
        self.enqueue(req, replica, now)

    def forward(self, req: Request, row: int, now: float) -> None:
        """Send a request that ``row`` was unsure of to the next model of its own gear's cascade."""
        nxt = int(self.tables.next_row[req.gear, row])
        self.enqueue(req, self._pick(req.gear, nxt), now)

    def _pick(self, gear: int, row: int) -> int:
        reps = self.tables.route(gear, row).replicas
        return reps[0] if len(reps) == 1 else reps[self.routers[(gear, row)].pick()]

    def enqueue(self, req: Request, replica: int, now: float) -> None:
        """Queue ``req`` on ``replica`` and wake its consumer. The seam for distributed backends: the Ray backend
        overrides it to send requests for replicas that live in another process to that process."""
        self.queues[replica].push(req, now)
        self.consumers[replica].poke()

    # -- bookkeeping -------------------------------------------------------------------------------------------
    def release(self, req: Request, answer: Answer | None, error: ServingError | None) -> None:
        """Called exactly once per request when it is answered or failed."""
        self.in_flight -= 1
        self.live.discard(req)
        self.admission.in_flight -= 1
        self.observer.answered(req, answer, error, answer.finished if answer is not None else self.clock.now())
        if self.draining:
            self._maybe_drained()

    def _maybe_drained(self) -> None:
        if self.draining and self.in_flight == 0 and self.on_drained is not None:
            cb, self.on_drained = self.on_drained, None
            cb(self)

    def queued(self) -> int:
        return sum(len(q) for q in self.queues)
