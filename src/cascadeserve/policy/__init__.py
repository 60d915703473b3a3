"""The decision core: every serving decision, written once, applied unchanged by the simulator and every runtime.

Each decision is a pure function or a small class returning a plain value or a frozen dataclass (the vLLM
scheduler's shape: decide, then a separate step applies):

* gear: :class:`GearPolicy` (the QPS-driven :class:`GearSelector` with α·Q0 hysteresis, or a fixed
  :class:`GearSchedule`) returns a :class:`GearDecision` every producer tick;
* batch: :func:`next_batch` returns the :class:`BatchDecision` (which replica of a free device fires, and when),
  :func:`batch_size` how many samples it takes (minimum queue, max wait, drain, the plan's cap and an adaptive cap
  such as :class:`AimdBatchLimit`), :func:`batch_members` which ones (oldest first, forwarded first on a tie); one
  tie-break rule orders replicas everywhere;
* forward: :meth:`PlanTables.exits` says which samples exit at a stage (the last stage always answers, NaN
  included), and :class:`Routers` which next-stage replica each unsure sample goes to;
* admission and deadline: :class:`AdmissionPolicy` accepts, sheds with a retry hint, or refuses as too large
  (bounded by count, or by time through a :class:`WaitBudget`); :func:`readiness` says whether to take traffic;
  :func:`on_deadline` answers from an earlier stage or fails;
* failover: :func:`~cascadeserve.policy.failover.on_server_lost` says whether a request of a lost server falls
  back, is retried on another replica, or fails (the Ray backend applies it);
* tuning: a :class:`~cascadeserve.policy.thresholds.ThresholdDecision` is applied with
  :meth:`PlanTables.apply_thresholds`, the only way thresholds change.
* episodes: :class:`~cascadeserve.policy.episodes.ShedWatch` and :class:`~cascadeserve.policy.episodes.SloWatch`
  say when shedding starts and stops and when the served p95 misses the SLO and meets it again (what the server's
  event lines and gauges report: :mod:`cascadeserve.runtime.events`).

Nothing here does I/O, reads a clock or imports asyncio, Ray or a web framework (an import-linter contract
enforces it), and no engine compares a certainty with a threshold, picks a replica, sizes a batch or picks a gear
itself (``tests/policy/test_single_source.py`` greps for the forms; ``tests/policy/test_engine_contracts.py`` states
what each engine may import from here, and that none reads private fields or writes into policy objects). Callers
pass time in; decisions come back as values.
"""

from __future__ import annotations

from cascadeserve.policy.admission import (
    DEFAULT_SLO_MS,
    AdmissionDecision,
    AdmissionPolicy,
    DeadlineDecision,
    DrainMeter,
    Readiness,
    WaitBudget,
    on_deadline,
    readiness,
)
from cascadeserve.policy.aimd import AimdBatchLimit, AimdDecision
from cascadeserve.policy.batching import (
    BatchDecision,
    BatchMembers,
    BatchTrigger,
    Candidate,
    batch_members,
    batch_size,
    drain_trigger,
    next_batch,
)
from cascadeserve.policy.forwarding import LAST_STAGE, is_sure, sure_mask
from cascadeserve.policy.gears import GearDecision, GearPolicy, GearSelector
from cascadeserve.policy.qps import QpsMeter
from cascadeserve.policy.routing import SmoothWeightedRoundRobin, swrr_sequence
from cascadeserve.policy.schedule import GearSchedule
from cascadeserve.policy.tables import PlanTables, Route, Routers

__all__ = [
    "DEFAULT_SLO_MS",
    "LAST_STAGE",
    "AdmissionDecision",
    "AdmissionPolicy",
    "AimdBatchLimit",
    "AimdDecision",
    "BatchDecision",
    "BatchMembers",
    "BatchTrigger",
    "Candidate",
    "DeadlineDecision",
    "DrainMeter",
    "GearDecision",
    "GearPolicy",
    "GearSchedule",
    "GearSelector",
    "PlanTables",
    "QpsMeter",
    "Readiness",
    "Route",
    "Routers",
    "SmoothWeightedRoundRobin",
    "WaitBudget",
    "batch_members",
    "batch_size",
    "drain_trigger",
    "is_sure",
    "next_batch",
    "on_deadline",
    "readiness",
    "sure_mask",
    "swrr_sequence",
]
