"""From the planner's joint solution to a :class:`~cascadeserve.plan.GearPlan` (paper §4: the gear plan).

Two kinds of plan are built from a solution: the *check plan* that SP4 simulates (one gear, one range's cascade,
raw LP shares, trying a minimum queue length; §4.5), and the *final plan* that ``Planner.fit`` returns (one gear
per range, shares normalised per model, predicted p95 and accuracy, the QPS scaling of appendix C.2). Both go
through :func:`_gear` and :func:`_gear_plan`, the only places that turn (model, device index) replicas into the
plan's replica entries, so a change to how a gear names its replicas is made here once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from cascadeserve.plan import SLO, Gear, GearPlan, GearReplica, Replica
from cascadeserve.planner.problem import Problem, RepKey
from cascadeserve.planner.solution import Solution, weighted_acc
from cascadeserve.profile import costs_note

__all__ = ["build_plan", "check_plan"]


def _gear(
    problem: Problem,
    sol: Solution,
    r: int,
    *,
    qps_low: float,
    qps_high: float,
    mq: Mapping[RepKey, int],
    shares: Mapping[RepKey, float],
    predicted_p95_ms: float | None = None,
    predicted_accuracy: float | None = None,
    predicted_busy: float | None = None,
) -> Gear:
    """Range ``r``'s gear: its cascade on the placed replicas of its models, with ``mq`` and ``shares``."""
    c = sol.cand(r)
    reps = [k for k in sol.placement if k[0] in c.models]
    return Gear(
        qps_low=qps_low,
        qps_high=qps_high,
        models=c.models,
        thresholds=c.cascade.thresholds,
        replicas=tuple(
            GearReplica(
                model=m,
                device=problem.devices[d].name,
                min_queue=mq.get((m, d), 1),
                share=shares.get((m, d), 0.0),
                max_batch=problem.cap(m),
            )
            for m, d in reps
        ),
        predicted_p95_ms=predicted_p95_ms,
        predicted_accuracy=predicted_accuracy,
        predicted_busy=predicted_busy,
    )


def _gear_plan(
    problem: Problem,
    replicas: Sequence[RepKey],
    gears: tuple[Gear, ...],
    *,
    slo: SLO | None = None,
    qps_scale: float = 1.0,
    notes: dict[str, str] | None = None,
) -> GearPlan:
    """A plan of ``gears`` over ``replicas`` (the check plan leaves ``slo``, ``qps_scale`` and ``notes`` unset)."""
    return GearPlan(
        profile=problem.profile.name,
        devices=problem.devices,
        replicas=tuple(Replica(model=m, device=problem.devices[d].name) for m, d in replicas),
        gears=gears,
        alpha=problem.options.alpha,
        batch_overhead_ms=problem.overhead_ms,
        audit_fraction=problem.options.audit_fraction,
        max_busy=problem.options.max_busy,
        backend=problem.options.backend,  # the simulator charges a Ray plan the profile's ray_hop_ms per hop
        qps_min_arrivals=problem.options.qps_min_arrivals,
        slo=slo,
        qps_scale=qps_scale,
        notes=notes or {},
    )


def check_plan(problem: Problem, sol: Solution, r: int, mq: Mapping[RepKey, int]) -> GearPlan:
    """The one-gear plan SP4 simulates for range ``r`` with first-stage minimum queues ``mq`` (raw LP shares)."""
    c = sol.cand(r)
    reps = [k for k in sol.placement if k[0] in c.models]
    gear = _gear(problem, sol, r, qps_low=0.0, qps_high=max(problem.ranges[r][1], 1e-9), mq=mq, shares=sol.shares[r])
    return _gear_plan(problem, reps, (gear,))


def _norm(shares: Mapping[RepKey, float], model: str) -> dict[RepKey, float]:
    """Shares of ``model``'s replicas rescaled to sum exactly to one (the plan checks this to 1e-6)."""
    own = {k: v for k, v in shares.items() if k[0] == model}
    total = sum(own.values())
    if total <= 0:
        return {k: 1.0 / len(own) for k in own}
    return {k: v / total for k, v in own.items()}


def build_plan(problem: Problem, sol: Solution, qps_scale: float) -> GearPlan:
    """The plan ``Planner.fit`` returns: one gear per range, the predicted p95 and accuracy of each, and the
    measured-QPS scaling ``qps_scale`` (appendix C.2, computed by the caller)."""
    fr = sol.fr
    gears = []
    for r, (lo, hi) in enumerate(problem.ranges):
        c = sol.cand(r)
        normed: dict[RepKey, float] = {}
        for m in c.models:  # the models' replica keys are disjoint, so one dict holds every model's shares
            normed.update(_norm(sol.shares[r], m))
        gears.append(
            _gear(
                problem,
                sol,
                r,
                qps_low=lo,
                qps_high=hi,
                mq=sol.mq[r],
                shares=normed,
                predicted_p95_ms=round(sol.p95[r], 3),
                predicted_accuracy=round(c.accuracy, 6),
                predicted_busy=round(sol.busy[r], 4) if sol.busy and math.isfinite(sol.busy[r]) else None,
            )
        )
    return _gear_plan(
        problem,
        sol.placement,
        tuple(gears),
        slo=problem.slo,
        qps_scale=qps_scale,
        notes={
            "planner": "cascadeserve.planner (Algorithm 1)",
            "qps_dist": problem.dist.describe(),
            "costs": costs_note(problem.profile),
            "planned_accuracy": f"{weighted_acc(problem, fr, sol.assign):.6f}",
            # the distribution the plan was made for, per range: what serve --replan measures drift against
            "qps_weights": ",".join(f"{w:.6g}" for w in problem.weights),
        },
    )
