"""Adaptive batching as a serving policy: which batch cap a plan's ``batching`` field asks for.

A plan (or ``serve --batching``) picks one of three batching policies:

* ``plan``: the planner's minimum queue lengths and the plan's own caps (the default; no adaptive cap);
* ``aimd``: :class:`~cascadeserve.policy.AimdBatchLimit`, additive increase while batches run within the target,
  10 % multiplicative decrease on a miss, per replica;
* ``quantile``: :class:`~cascadeserve.policy.QuantileBatchLimit`, the largest batch whose fitted p99 latency fits
  the target, per replica.

The adaptive cap is the ``cap`` argument of :func:`~cascadeserve.policy.batch_size`, and the triggers (minimum
queue, max wait: delayed batching) compose with it through :func:`capped_trigger`: a queue never waits for more
samples than one batch may take, so the length rule fires at ``min(min_queue, cap)``. (A planner's minimum queue
length buys throughput at the load it planned for; once the cap says a batch of that size no longer fits the
target, waiting to fill it only adds delay.) :func:`batch_limit_for` builds a fresh limit for
one plan generation; the simulator builds one per run and the runtime one per generation (on the local runtime
and on every Ray server, from the plan it receives), so a plan hot-swap starts the new plan's replicas afresh
while the old generation drains with its own.

The per-batch target: the plan's ``batch_target_ms`` when set, else its latency SLO divided by twice the longest
cascade's length. A request crosses one batch per stage and, under steady load, waits about one batch before its
own starts, so a batch within SLO / (2·stages) keeps the whole path within the SLO.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal, Protocol

from cascadeserve.plan import GearPlan
from cascadeserve.policy.aimd import AimdBatchLimit
from cascadeserve.policy.batching import BatchTrigger
from cascadeserve.policy.kernels import capped_min_queue
from cascadeserve.policy.quantile import QuantileBatchLimit

__all__ = ["BATCHING", "BatchLimit", "Batching", "batch_limit_for", "batch_target_s", "capped_trigger"]

Batching = Literal["plan", "aimd", "quantile"]
BATCHING: tuple[Batching, ...] = ("plan", "aimd", "quantile")


class BatchLimit(Protocol):
    """An adaptive per-replica batch cap: asked when a batch is taken, told how long it ran."""

    def limit(self, replica: int) -> int: ...

    def observe(self, replica: int, runtime_s: float, size: int | None = None) -> object: ...


@lru_cache(maxsize=4096)
def capped_trigger(trigger: BatchTrigger, cap: int) -> BatchTrigger:
    """``trigger`` with its minimum queue length lowered to the adaptive ``cap`` when the cap is smaller."""
    min_queue = capped_min_queue(trigger.min_queue, cap)
    if min_queue == trigger.min_queue:
        return trigger
    return BatchTrigger(min_queue, trigger.max_wait_s, trigger.max_batch)


def batch_target_s(plan: GearPlan, batching: Batching | None = None, *, slo_ms: float | None = None) -> float:
    """The latency one batch may take under ``plan``'s adaptive batching (see the module docstring); ``slo_ms``
    is the p95 SLO to size it against, given where the plan has neither a target nor a p95 SLO of its own."""
    if plan.batch_target_ms is not None:
        return plan.batch_target_ms / 1000.0
    if slo_ms is None and plan.slo is not None and plan.slo.kind == "p95_ms":
        slo_ms = plan.slo.value
    if slo_ms is None:
        kind = batching or plan.batching
        raise ValueError(
            f"batching {kind!r} needs a latency target: give a p95 latency SLO (--slo-p95-ms) or a plan with one"
        )
    stages = max(len(g.models) for g in plan.gears)
    return slo_ms / 1000.0 / (2 * stages)


def batch_limit_for(plan: GearPlan, batching: Batching | None = None) -> BatchLimit | None:
    """A fresh adaptive limit for one generation of ``plan`` (``batching`` overrides the plan's), or ``None``
    for ``plan`` batching."""
    kind = batching or plan.batching
    if kind == "plan":
        return None
    target = batch_target_s(plan, kind)
    ceiling = plan.max_batch or 4096
    if kind == "aimd":
        return AimdBatchLimit(target, step=1, backoff=0.9, ceiling=ceiling)
    if kind == "quantile":
        return QuantileBatchLimit(target, ceiling=ceiling)
    raise ValueError(f"batching: {kind!r} is not one of {', '.join(BATCHING)}")
