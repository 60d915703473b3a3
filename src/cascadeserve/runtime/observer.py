"""Observers: how the runtime reports what it did, without metrics code inside the decisions.

The runtime calls an :class:`Observer` at a handful of points (admitted, shed, answered, batch finished,
producer tick, plan swapped, thresholds re-tuned). Why a plan was swapped in is its generation's
:class:`SwapReason` (``Runtime.swap_plan(plan, reason)``). :class:`NullObserver` ignores everything; :class:`Recorder`
keeps plain records for tests and replay; the HTTP layer's Prometheus observer turns the same calls into metrics.
Several observers combine with :class:`Fanout`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from cascadeserve.policy import GearDecision
from cascadeserve.policy.tuning import ThresholdDecision
from cascadeserve.runtime.request import Answer, Request, ServingError

__all__ = ["BatchEvent", "Fanout", "NullObserver", "Observer", "Recorder", "SwapReason", "TickEvent"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchEvent:
    """One batch, with the fields of the simulator's ``BatchRecord`` plus names (built by keyword: eleven fields
    are too many to keep apart by position)."""

    start: float
    end: float
    device: int  # index in the plan's devices
    replica: int  # index in the plan's replicas
    row: int  # model row
    size: int
    answered: int
    model: str
    device_name: str
    generation: int
    failed: bool = False
    host_share: float = 0.0  # share of the host's other devices running a batch when this one started


@dataclass(frozen=True, slots=True)
class TickEvent:
    """One producer tick: the time it closed the QPS window and what the gear selector decided."""

    time: float
    decision: GearDecision
    switched: bool
    generation: int


@dataclass(frozen=True, slots=True)
class SwapReason:
    """Why a plan was swapped in: ``kind`` is ``manual`` (``PUT /v2/cascade/plan``, or a call), ``load_drift`` (a
    re-plan for the measured QPS distribution) or ``cost_drift`` (a re-plan with the measured batch costs);
    ``detail`` is one line that says more."""

    kind: str
    detail: str = ""


class Observer(Protocol):
    def admitted(self, n: int) -> None: ...

    def shed(self, n: int) -> None: ...

    def answered(self, req: Request, answer: Answer | None, error: ServingError | None, now: float) -> None: ...

    def refused_duplicate(self) -> None: ...

    def batch(self, event: BatchEvent) -> None: ...

    def tick(self, event: TickEvent) -> None: ...

    def plan_swapped(self, generation: int) -> None: ...

    def thresholds_changed(self, decision: ThresholdDecision, generation: int) -> None: ...


class NullObserver:
    def admitted(self, n: int) -> None:
        return None

    def shed(self, n: int) -> None:
        return None

    def answered(self, req: Request, answer: Answer | None, error: ServingError | None, now: float) -> None:
        return None

    def refused_duplicate(self) -> None:
        return None

    def batch(self, event: BatchEvent) -> None:
        return None

    def tick(self, event: TickEvent) -> None:
        return None

    def plan_swapped(self, generation: int) -> None:
        return None

    def thresholds_changed(self, decision: ThresholdDecision, generation: int) -> None:
        return None


@dataclass
class Recorder(NullObserver):
    """Keeps every batch and tick, and counts admissions and answers (for tests and exact replays)."""

    batches: list[BatchEvent] = field(default_factory=list)
    ticks: list[TickEvent] = field(default_factory=list)
    threshold_changes: list[ThresholdDecision] = field(default_factory=list)
    n_admitted: int = 0
    n_shed: int = 0
    n_answered: int = 0
    n_failed: int = 0
    n_duplicates: int = 0

    def admitted(self, n: int) -> None:
        self.n_admitted += n

    def shed(self, n: int) -> None:
        self.n_shed += n

    def answered(self, req: Request, answer: Answer | None, error: ServingError | None, now: float) -> None:
        if answer is not None:
            self.n_answered += 1
        else:
            self.n_failed += 1

    def refused_duplicate(self) -> None:
        self.n_duplicates += 1

    def batch(self, event: BatchEvent) -> None:
        self.batches.append(event)

    def tick(self, event: TickEvent) -> None:
        self.ticks.append(event)

    def thresholds_changed(self, decision: ThresholdDecision, generation: int) -> None:
        self.threshold_changes.append(decision)


class Fanout(NullObserver):
    """Forwards every call to several observers."""

    def __init__(self, *observers: Observer) -> None:
        self.observers = observers

    def admitted(self, n: int) -> None:
        for o in self.observers:
            o.admitted(n)

    def shed(self, n: int) -> None:
        for o in self.observers:
            o.shed(n)

    def answered(self, req: Request, answer: Answer | None, error: ServingError | None, now: float) -> None:
        for o in self.observers:
            o.answered(req, answer, error, now)

    def refused_duplicate(self) -> None:
        for o in self.observers:
            o.refused_duplicate()

    def batch(self, event: BatchEvent) -> None:
        for o in self.observers:
            o.batch(event)

    def tick(self, event: TickEvent) -> None:
        for o in self.observers:
            o.tick(event)

    def plan_swapped(self, generation: int) -> None:
        for o in self.observers:
            o.plan_swapped(generation)

    def thresholds_changed(self, decision: ThresholdDecision, generation: int) -> None:
        for o in self.observers:
            o.thresholds_changed(decision, generation)
