"""Static cascades: one cascade with fixed thresholds for every QPS range, the no-switching ablation's plans and a
floor under the planner's own.

A gear plan that switches can do everything a static cascade does (give every range the same gear), so the planner
must never need more devices than the best static cascade. Algorithm 1 does not always find it: it checks each range
in steady state, downgrades ranges one error at a time, and places every cascade it assigns at once, while a static
cascade is judged on its own. So after Algorithm 1 (:class:`~cascadeserve.planner.Planner`), the planner also
judges the static cascades the same way it judged its own plan (the replay of the check arrivals, or SP4's load
check at the top QPS) and returns one where it is better: under a latency SLO more accurate, under an accuracy SLO
faster, or feasible where the planner's plan is not.

This module is the one source of what a static cascade is, for the planner and for the ablation
(:class:`~cascadeserve.baselines.NoSwitching`):

* :func:`static_cascades`: the candidates, up to :data:`STATIC_CANDIDATES` frontier cascades spread over SP1's
  frontier (the most accurate always among them), at least a given accuracy;
* :func:`static_plan`: one as a one-gear plan: every model on every device where it fits, load split evenly, each
  replica work-conserving (minimum queue 1, so a free device takes its whole queue) up to the planner's batch cap
  without a latency bound (:func:`~cascadeserve.planner.problem.default_batch_caps`);
* :func:`replay_accuracy`: the accuracy its replay of ``n`` requests will have when every request is answered
  (request ``i`` takes validation sample ``i mod n_samples``, as in the simulator), so candidates that cannot beat a
  plan are never simulated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from cascadeserve.cascade import Cascade
from cascadeserve.errors import PlanError
from cascadeserve.plan import SLO, Device, GearPlan, fixed_plan
from cascadeserve.planner.problem import default_batch_caps
from cascadeserve.planner.search import Frontier
from cascadeserve.planner.tracecheck import TraceCheck, rank
from cascadeserve.policy import sure_mask
from cascadeserve.profile import Profile

__all__ = [
    "STATIC_CANDIDATES",
    "Judge",
    "best_static",
    "replay_accuracy",
    "static_cascades",
    "static_gears",
    "static_plan",
]

STATIC_CANDIDATES = 8


def static_cascades(frontier: Frontier, min_accuracy: float = 0.0, limit: int = STATIC_CANDIDATES) -> list[Cascade]:
    """Up to ``limit`` frontier cascades of at least ``min_accuracy``, spread evenly over the frontier (cheapest
    first), always keeping the most accurate."""
    cands = [c for c in frontier.candidates if c.accuracy >= min_accuracy]
    if len(cands) > limit:
        idx = np.unique(np.linspace(0, len(cands) - 1, limit).round().astype(int))
        cands = [cands[i] for i in idx]
    return [c.cascade for c in cands]


def static_plan(
    profile: Profile,
    cascade: Cascade,
    devices: Sequence[Device],
    *,
    overhead_ms: float,
    max_qps: float = 1e9,
) -> GearPlan | None:
    """``cascade`` alone, work-conserving, on every device where its models fit (module docstring); ``None`` when a
    model fits on no device. The plan charges ``overhead_ms`` per batch."""
    caps = default_batch_caps(profile, None, overhead_ms=overhead_ms, models=cascade.models)
    try:
        return fixed_plan(
            profile, cascade, devices, max_qps=max_qps, min_queue=1, batch_caps=caps, batch_overhead_ms=overhead_ms
        )
    except PlanError:
        return None


def replay_accuracy(profile: Profile, cascade: Cascade, n_requests: int) -> float:
    """The accuracy of ``n_requests`` requests answered by ``cascade``, request ``i`` on sample ``i mod n``."""
    rows = [profile.index(m) for m in cascade.models]
    n = profile.n_samples
    answer = np.full(n, rows[-1])
    open_ = np.ones(n, dtype=bool)
    for row, thr in zip(rows[:-1], cascade.thresholds, strict=True):
        here = open_ & sure_mask(profile.certainties[row], thr)
        answer[here] = row
        open_ &= ~here
    correct = profile.predictions[answer, np.arange(n)] == profile.labels
    if n_requests <= 0:
        return float(correct.mean())
    full, rest = divmod(n_requests, n)
    return float((full * correct.sum() + correct[:rest].sum()) / n_requests)


# How a static plan is judged: the planner's own test of its plan (a replay of the check arrivals, or SP4's load
# check at the top QPS), given the plan and the accuracy its requests will have.
Judge = Callable[[GearPlan, float], TraceCheck]


def best_static(
    profile: Profile,
    frontier: Frontier,
    devices: Sequence[Device],
    slo: SLO,
    judge: Judge,
    *,
    overhead_ms: float,
    max_qps: float,
    load_qps: float,
    n_requests: int,
    beat: TraceCheck | None,
    span_s: float = 0.0,
) -> tuple[Cascade, GearPlan, TraceCheck] | None:
    """The static cascade that meets ``slo`` and ranks best (:func:`~cascadeserve.planner.tracecheck.rank`), if it
    ranks better than ``beat`` (the planner's own plan, judged the same way; ``None``: there is none).

    The candidates are every frontier cascade and every model alone (so the ablations' static settings are among
    them). Only candidates that could rank better are judged, in the order that finds the best first, and the search
    stops at the first that meets the SLO: under a latency SLO the most accurate first (by
    :func:`replay_accuracy`, exact when every request is answered), skipping any no more accurate than ``beat``;
    under an accuracy SLO those accurate enough, cheapest first. A candidate whose optimistic work (every model at
    its batch cap, on every device) cannot carry ``load_qps`` (the mean load) is not judged; with ``span_s``, the
    seconds the replay lasts, a latency SLO allows the overload whose backlog stays within the SLO until 95 % of
    the replay is over (a short trace can end before a slightly overloaded plan misses)."""
    latency = slo.kind == "p95_ms"
    caps = default_batch_caps(profile, None, overhead_ms=overhead_ms)
    per_sample = {m: (float(profile.model(m).runtime.ms_at(b)) + overhead_ms) / b / 1000.0 for m, b in caps.items()}
    pool: dict[Cascade, float] = {
        c.cascade: sum(f * per_sample[m] for m, f in zip(c.models, c.load, strict=True)) for c in frontier.candidates
    }
    for m in profile.model_names:
        pool.setdefault(Cascade((m,), ()), per_sample[m])
    scored = []
    for c, work in pool.items():
        # utilisation ρ > 1 grows a backlog of (ρ - 1)·t seconds by time t: the request at 95 % of the span waits
        # about that long, so p95 ≤ L needs ρ ≤ 1 + L / (0.95·span); 0.9 keeps a margin for the estimate
        slack = slo.value / 1000.0 / (0.9 * span_s) if latency and span_s > 0 else 0.0
        if load_qps * work > len(devices) * (1.0 + slack + 1e-9):
            continue
        acc = replay_accuracy(profile, c, n_requests)
        if latency and beat is not None and beat.met and acc <= beat.accuracy:
            continue
        if not latency and acc < slo.value:
            continue
        scored.append((-acc if latency else work, acc, c))
    for _, acc, c in sorted(scored, key=lambda t: (t[0], t[1] if not latency else 0.0)):
        plan = static_plan(profile, c, devices, overhead_ms=overhead_ms, max_qps=max_qps)
        if plan is None:
            continue
        check = judge(plan, acc)
        if check.met:
            if beat is None or rank(slo, check) < rank(slo, beat):
                return c, plan, check
            return None
    return None


def static_gears(
    profile: Profile,
    frontier: Frontier,
    devices: Sequence[Device],
    slo: SLO,
    judge_at: Callable[[float], Judge],
    top: tuple[Cascade, GearPlan, TraceCheck],
    *,
    overhead_ms: float,
    max_qps: float,
    n_ranges: int,
) -> tuple[GearPlan, str] | None:
    """Static cascades per QPS range: for each of ``n_ranges`` equal ranges, the most accurate static cascade that
    meets ``slo`` at the range's top QPS (``judge_at(qps)`` judges there; ``top`` where none does), accuracy never
    rising with the load; as one gear plan whose placement is the union of theirs, and a line saying which. Under a
    latency SLO the cascade that holds the peak is seldom the best one at the base load: when Algorithm 1 finds no
    plan, one static cascade for every load gives up the gears' point (fewer escalations only under load).
    ``None`` when the ranges all pick the top cascade or
    the union of placements does not fit the devices' memory."""
    top_cascade, top_plan, _ = top
    width = max_qps / n_ranges
    chosen: list[tuple[Cascade, GearPlan, TraceCheck]] = []
    for r in range(n_ranges):  # the top range too: judged like the others, it may need a safer cascade than ``top``
        q = width * (r + 1)
        found = best_static(
            profile, frontier, devices, slo, judge_at(q), overhead_ms=overhead_ms, max_qps=q, load_qps=q,
            n_requests=0, beat=None,
        )  # fmt: skip
        chosen.append(found if found is not None else top)
    # accuracy never rises with the load: a cascade judged to hold above a range holds in it, so a range whose own
    # pick is less accurate (a judgement's noise) takes the pick of the range above
    for r in range(n_ranges - 2, -1, -1):
        if replay_accuracy(profile, chosen[r][0], 0) < replay_accuracy(profile, chosen[r + 1][0], 0):
            chosen[r] = chosen[r + 1]
    if all(c == top_cascade for c, _, _ in chosen):
        return None
    replicas = {rep.id: rep for _, plan, _ in chosen for rep in plan.replicas}
    for d in devices:
        if sum(profile.model(rep.model).memory_mb for rep in replicas.values() if rep.device == d.name) > d.memory_mb:
            return None
    gears = tuple(
        plan.gears[0].model_copy(
            update={
                "qps_low": width * r,
                "qps_high": max_qps if r == n_ranges - 1 else width * (r + 1),
                "predicted_p95_ms": round(check.p95_ms, 3),
                "predicted_accuracy": round(check.accuracy, 6),
            }
        )
        for r, (_, plan, check) in enumerate(chosen)
    )
    order = {rep.id: i for i, rep in enumerate(top_plan.replicas)}
    placed = tuple(sorted(replicas.values(), key=lambda rep: (order.get(rep.id, len(order)), rep.id)))
    plan = top_plan.model_copy(update={"gears": gears, "replicas": placed})
    said = ", ".join(f"{g.qps_high:g} QPS {c}" for g, (c, _, _) in zip(gears, chosen, strict=True))
    return GearPlan.model_validate(plan.model_dump()), f"each range takes the most accurate that holds there: {said}"
