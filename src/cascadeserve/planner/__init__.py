"""The gear planner (paper §4, Algorithm 1): cascade search, workload adaptation, hardware mapping, batching.

``Planner(n_ranges=…, qps_dist=…, alpha=…, seed=…).fit(profile, hardware, slo, max_qps)`` sets ``plan_`` (a
:class:`~cascadeserve.plan.GearPlan`) and ``report_`` (a :class:`PlannerReport`), or raises
:class:`~cascadeserve.errors.InfeasibleError` with a message in the user's terms. ``Planner(batch_overhead_ms=…)``
plans with a fixed cost per batch beyond the profiled runtime (every batch duration and capacity estimate includes
it, and the plan carries it for the simulator; by default the profile's recorded ``batch_overhead_ms``). Every plan
caps each model's batch (:func:`default_batch_caps`, schema 3's ``GearReplica.max_batch``). The parts are usable alone:
:func:`search_cascades` (SP1), :class:`QpsDistribution` (SP2's weights), :func:`place_replicas` and
:func:`balance` (SP3), :func:`check_load` (SP4's simulation check) and :func:`run_loop` (Algorithm 1's control
flow). ``fit(check_arrivals=…)`` replays the finished plan on a trace and re-plans against a tighter internal SLO
while it misses (:mod:`cascadeserve.planner.tracecheck`). Where a static cascade (one for every range,
:func:`static_cascades`, :func:`static_plan`) does better than Algorithm 1's plan, judged the same way, the planner
returns that (:mod:`cascadeserve.planner.static`). :mod:`cascadeserve.eval.quality` compares the planner
with exhaustive and random search.
"""

from __future__ import annotations

from cascadeserve.planner.batching import LoadCheck, check_load
from cascadeserve.planner.loop import LoopInfeasible, LoopResult, Step, run_loop
from cascadeserve.planner.lp import Balance, balance
from cascadeserve.planner.placement import Load, PlacementError, place_replicas
from cascadeserve.planner.planner import SUBMODULES, Planner, PlannerReport, qps_scale_for
from cascadeserve.planner.problem import default_batch_caps
from cascadeserve.planner.search import Candidate, Frontier, search_cascades
from cascadeserve.planner.static import STATIC_CANDIDATES, static_cascades, static_plan
from cascadeserve.planner.tracecheck import TraceCheck
from cascadeserve.planner.workload import ZIPF_EXPONENT, QpsDistribution, qps_ranges

__all__ = [
    "STATIC_CANDIDATES",
    "SUBMODULES",
    "ZIPF_EXPONENT",
    "Balance",
    "Candidate",
    "Frontier",
    "Load",
    "LoadCheck",
    "LoopInfeasible",
    "LoopResult",
    "PlacementError",
    "Planner",
    "PlannerReport",
    "QpsDistribution",
    "Step",
    "TraceCheck",
    "balance",
    "check_load",
    "default_batch_caps",
    "place_replicas",
    "qps_ranges",
    "qps_scale_for",
    "run_loop",
    "search_cascades",
    "static_cascades",
    "static_plan",
]
