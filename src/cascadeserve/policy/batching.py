"""The batch decision: which replica of a device fires next, when, and how many samples it takes.

A replica's queue is ready to fire when its device is free and either

* it holds at least the gear's *minimum queue length* (paper §4.5), or
* its oldest sample has waited ``max_wait_s``, so that a queue at low load cannot starve (a plan with no
  ``max_wait_ms`` gets :data:`~cascadeserve.plan.DEFAULT_MAX_WAIT_MS`, see :class:`~cascadeserve.policy.PlanTables`).

Both engines ask the same question, :func:`next_batch`, with one :data:`Candidate` per queue of a free device:
the time its trigger fires (:meth:`BatchTrigger.fire_time`) and the time its head sample entered. The simulator
knows future arrivals, so a fire time may lie ahead; the runtime (:meth:`BatchTrigger.fire_time_known`) knows
only the queue as it is, so a fire time ahead of ``now`` is the max-wait deadline, for which it arms a timer. The
answer is a frozen :class:`BatchDecision` (``at``, ``oldest``, ``generation``, ``replica``): fire now, or wait
until ``at``. Its size comes from :func:`batch_size`: the whole queue, oldest first, up to the plan's
``max_batch`` and an adaptive cap (AIMD) when one is set.

**The tie-break rule** (:func:`next_batch` on :data:`Candidate` tuples), for every choice between replicas on
one device, in both engines: the earliest fire time, then the oldest head sample, then the older plan generation,
then the lower replica index. A replica index is the plan's own order (``GearPlan.replicas``), never an engine's
lane or list order.

At the end of a trace (simulator) or on a hot swap or stop (runtime) queues *drain*: :func:`drain_trigger` fires
any non-empty queue at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from cascadeserve.policy.kernels import NO_LIMIT, prefer, take_count, takes_forwarded
from cascadeserve.policy.kernels import fire_time as _fire_time
from cascadeserve.policy.records import positional_maker

__all__ = [
    "BatchDecision",
    "BatchMembers",
    "BatchTrigger",
    "Candidate",
    "batch_members",
    "batch_size",
    "drain_trigger",
    "next_batch",
]


@dataclass(frozen=True, slots=True)
class BatchTrigger:
    """One replica's batching rule in one gear: minimum queue length, max wait, and the plan's batch cap."""

    min_queue: int = 1
    max_wait_s: float | None = None
    max_batch: int | None = None

    def needed(self, queued: int) -> int:
        """How many more samples the queue needs before the length rule fires."""
        return max(0, self.min_queue - queued)

    def deadline(self, oldest: float) -> float:
        """When the max-wait rule fires for a queue whose oldest sample entered at ``oldest``."""
        return self.fire_time(-math.inf, oldest, math.inf)

    def ready(self, queued: int, oldest: float, now: float) -> bool:
        """Should a free device fire this queue now?"""
        return queued > 0 and (self.needed(queued) == 0 or now >= self.deadline(oldest))

    def fire_time(self, now: float, first: float, mth: float) -> float:
        """Earliest time ≥ ``now`` at which :meth:`ready` holds.

        ``first`` is when the oldest sample entered the queue and ``mth`` when the ``min_queue``-th did (``inf``
        when it has not, or, for the simulator, will not before the next arrivals are known).
        """
        wait = self.max_wait_s
        return _fire_time(now, first, mth, _INF if wait is None else wait)  # the rule: policy.kernels.fire_time

    def fire_time_known(self, now: float, queued: int, oldest: float) -> float:
        """:meth:`fire_time` for an engine that knows only the samples queued now (the runtime): ``now`` when ready,
        else the max-wait deadline (``inf`` for an empty queue, or a short one with no max wait)."""
        if queued == 0:
            return math.inf
        return self.fire_time(now, oldest, -math.inf if queued >= self.min_queue else math.inf)

    def take(self, queued: int) -> int:
        """Batch size for a queue of ``queued`` samples, before any adaptive cap."""
        return batch_size(self, queued)


def drain_trigger(max_batch: int | None) -> BatchTrigger:
    """The trigger of a draining queue: fire whatever it holds as soon as the device is free."""
    return BatchTrigger(1, None, max_batch)


def batch_size(trigger: BatchTrigger, present: int, cap: int | None = None) -> int:
    """How many of the ``present`` queued samples a firing batch takes: the whole queue, oldest first, up to the
    plan's ``max_batch`` and then the adaptive cap (AIMD) when one is set."""
    limit = trigger.max_batch
    return take_count(present, NO_LIMIT if limit is None else limit, NO_LIMIT if cap is None else cap)


Candidate = tuple[float, float, int, int]
"""A queue that may fire: ``(fire time, head sample's enqueue time, plan generation, replica index)``.

A plain tuple, not a dataclass: the simulator builds one per queue per device event, and tuples compare in
exactly the tie-break order: fire time, oldest head, generation, replica index.
"""


_INF = math.inf


@dataclass(frozen=True, slots=True)
class BatchDecision:
    """What a free device does next: fire ``replica`` of ``generation`` at ``at`` (``at > now``: wait until then);
    ``oldest`` is when that queue's head sample entered (the tie-break's second key)."""

    at: float
    oldest: float
    generation: int
    replica: int


def next_batch(candidates: Sequence[Candidate]) -> BatchDecision | None:
    """The queue a free device fires next, as a :class:`BatchDecision` (the winner of the tie-break order of
    :data:`Candidate`), or ``None`` if none can.

    Candidates whose fire time is ``inf`` (a short queue with no max wait) are never chosen.
    """
    if not candidates:
        return None
    best = candidates[0]
    for cand in candidates:  # the tie-break rule is policy.kernels.prefer; inf fire times lose to any finite one
        best = prefer(best, cand)
    return None if best[0] == _INF else _decision(*best)


class Times(Protocol):
    """The entry times of one source of a replica's queue, oldest first (a numpy array, or a queue's view)."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int, /) -> float: ...


@dataclass(frozen=True, slots=True)
class BatchMembers:
    """Which queued samples a firing batch takes, and in which order.

    A replica's queue has two sources, each oldest first: samples *forwarded* by an earlier stage, and new
    *arrivals*. The batch takes the front ``forwarded`` of the first and the front ``arrived`` of the second; in the
    batch, the forwarded ones come first (``order`` is ``None``), or, for a capped batch that mixes both, in the
    order of ``order`` (``True``: the next forwarded sample, ``False``: the next arrival).
    """

    forwarded: int
    arrived: int
    order: tuple[bool, ...] | None = None


def batch_members(size: int, forwarded: Times, arrived: Times) -> BatchMembers:
    """The members of a batch of ``size`` samples (:func:`batch_size`) from a queue holding ``forwarded`` and
    ``arrived`` samples (their entry times, oldest first; ``arrived`` only those present at the start).

    The rule: the ``size`` oldest samples, the forwarded one first on a tie (:func:`~cascadeserve.policy.kernels.
    takes_forwarded`, slot by slot). A batch that takes the whole queue lists its forwarded samples first.
    """
    n_f, n_a = len(forwarded), len(arrived)
    if size >= n_f + n_a:
        return _block(n_f, n_a)
    if n_a == 0 or n_f == 0:  # one source: its front (the slot rule always picks the only source)
        return _block(size, 0) if n_a == 0 else _block(0, size)
    i = j = 0
    order: list[bool] = []
    for _ in range(size):
        take_f = takes_forwarded(i < n_f, j < n_a, forwarded[i] if i < n_f else _INF, arrived[j] if j < n_a else _INF)
        order.append(take_f)
        i, j = (i + 1, j) if take_f else (i, j + 1)
    return BatchMembers(i, j, tuple(order))


def _block(n_forwarded: int, n_arrived: int) -> BatchMembers:
    """The decision "the front ``n_forwarded`` forwarded, then the front ``n_arrived`` arrivals", shared: records are
    immutable, and the simulator asks for one per batch (the common sizes are few)."""
    key = (n_forwarded, n_arrived)
    m = _BLOCKS.get(key)
    if m is None:
        m = BatchMembers(n_forwarded, n_arrived)
        if len(_BLOCKS) < 1 << 16:
            _BLOCKS[key] = m
    return m


_BLOCKS: dict[tuple[int, int], BatchMembers] = {}
_decision = positional_maker(BatchDecision)
