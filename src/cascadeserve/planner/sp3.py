"""SP3, hardware mapping (paper §4.4): which replicas go on which device, and how each range splits its load.

Placement (:func:`~cascadeserve.planner.placement.place_replicas`, greedy pruning with Eq. 4) covers the models
the assignment uses, with every range's cascade as one load at optimistic runtimes. Each range is then balanced
with one LP (:func:`~cascadeserve.planner.lp.balance`, Eq. 5). Runtime per sample is amortised at the gear's batch
sizes: a first-stage replica at its minimum queue length ``b``, a later stage ``s`` at ``max(1, b·reach_s)``, the
expected size of the chunk one first-stage batch forwards to it.

A range errors only when even the *optimistic* amortisation (every model at the largest batch the SLO allows,
``Problem.b_max``) needs ``u > 1``, because SP4 may still raise batch sizes. A range keeps its shares while
placement and cascade are unchanged and they remain feasible (appendix A: a submodule only changes a feasible
solution to improve it). On an SP4 error SP3 forces one more replica of each bottleneck model and re-places; if
that is impossible it passes the error on to SP2. A model that cannot be placed at all is a memory error for SP2.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from cascadeserve.planner.loop import Step
from cascadeserve.planner.lp import Balance
from cascadeserve.planner.placement import Load, PlacementError, min_max_util, place_replicas
from cascadeserve.planner.problem import Problem, RepKey
from cascadeserve.planner.search import Candidate
from cascadeserve.planner.solution import Issue, Solution
from cascadeserve.planner.sp4 import bottleneck

__all__ = ["sp3"]

# Hall's bound equals the LP's u to rounding (~1e-15); within this of the feasibility limit the LP decides.
_HALL_MARGIN = 1e-9


def _loads(problem: Problem, sol: Solution) -> list[Load]:
    """One load per distinct cascade, at the highest QPS it serves, with optimistic runtimes."""
    top: dict[int, int] = {}
    for r, a in enumerate(sol.assign):
        top[a] = r  # ranges ascend, so the last one is the highest QPS
    loads = []
    for a, r in sorted(top.items()):
        c = sol.fr[a]
        loads.append(Load(problem.demand(c, problem.ranges[r][1]), problem.runtimes_opt(c)))
    return loads


def _place(problem: Problem, sol: Solution, forced: Mapping[str, int]) -> tuple[RepKey, ...]:
    needed = sorted(sol.used_models())
    mem = {m: problem.profile.model(m).memory_mb for m in needed}
    devs = [d.memory_mb for d in problem.devices]
    return tuple(place_replicas(mem, devs, _loads(problem, sol), forced, problem.may_hold))


def _lp_if_feasible(
    problem: Problem, c: Candidate, qps: float, rt: Mapping[str, float], pl: tuple[RepKey, ...]
) -> Balance | None:
    """The balancing LP, or ``None`` where it is sure to be infeasible: its optimal ``u`` has a closed form
    (:func:`~cascadeserve.planner.placement.min_max_util`), and above 1 no solve is needed."""
    hall = min_max_util(pl, Load(problem.demand(c, qps), rt))
    if hall is not None and hall > 1.0 + 1e-9 + _HALL_MARGIN:
        return None
    return problem.lp(c, qps, rt, pl)


def _balance_ranges(problem: Problem, sol: Solution) -> tuple[Solution, bool, list[int]]:
    """Re-balance every range whose shares are missing, stale or infeasible on ``sol.placement``.

    Returns the new solution, whether some range's shares changed, and the ranges no LP can balance (their
    shares and queues are cleared: they must be balanced afresh once the error is resolved).
    """
    changed = False
    failing: list[int] = []
    pl = sol.placement
    shares_all = list(sol.shares)
    share_for_all = list(sol.share_for)
    mq_all = list(sol.mq)
    for r, (_, hi) in enumerate(problem.ranges):
        c = sol.cand(r)
        key = (sol.assign[r], pl)
        base = sol.base_batch(r) if sol.share_for[r] == key else 1
        rt = problem.runtimes_at(c, base)
        if sol.share_for[r] == key and sol.shares[r]:
            # still balanced for this cascade and placement: keep the shares while they stay feasible
            util = np.zeros(problem.n_dev)
            for (m, d), s in sol.shares[r].items():
                util[d] += s * hi * dict(zip(c.models, problem.load(c), strict=True))[m] * rt[m]
            if util.max() <= 1.0 + 1e-9:
                continue
        bal = _lp_if_feasible(problem, c, hi, rt, pl)
        if bal is None or not bal.feasible:
            bal = _lp_if_feasible(problem, c, hi, problem.runtimes_opt(c), pl)  # SP4 may still raise batch sizes
            if bal is None or not bal.feasible:
                failing.append(r)
                shares_all[r], share_for_all[r], mq_all[r] = {}, None, {}
                continue
        models = [m for m, _ in pl]
        shares: dict[RepKey, float] = {}
        for m in c.models:
            for i, s in bal.shares(models, m).items():
                shares[pl[i]] = s
        if shares != sol.shares[r] or sol.share_for[r] != key:
            changed = True
            shares_all[r] = shares
            share_for_all[r] = key
            mq_all[r] = {k: v for k, v in sol.mq[r].items() if k in shares}
    out = replace(sol, shares=tuple(shares_all), share_for=tuple(share_for_all), mq=tuple(mq_all))
    return out, changed, failing


def sp3(problem: Problem, sol: Solution, error: Issue | None) -> tuple[Solution, Step[Issue]]:
    """Place and balance (ok), or add replicas of the models SP4 blamed (error)."""
    if error is not None:
        forced = dict(sol.forced)
        grew = False
        for m in error.models:
            have = sum(1 for mm, _ in sol.placement if mm == m)
            if have < problem.n_dev:
                forced[m] = max(forced.get(m, 1), have + 1)
                grew = True
        if not grew:
            return sol, Step(error)
        try:
            placement = _place(problem, sol, forced)
        except PlacementError:
            return sol, Step(error)
        placed = replace(sol, forced=forced, placement=placement)
        placed = replace(placed, placed_for=placed.placement_key())
        balanced, _, _ = _balance_ranges(problem, placed)
        return balanced, Step(changed=True)
    changed = False
    key = sol.placement_key()
    if key != sol.placed_for:
        try:
            placement = _place(problem, sol, sol.forced)
        except PlacementError as e:
            # report the memory problem back to SP2, naming the ranges that use the model when it is only one
            ranges = sol.ranges_using(e.models) if len(e.models) == 1 else ()
            return sol, Step(Issue("memory", ranges, e.models, str(e)))
        changed = placement != sol.placement
        sol = replace(sol, placement=placement, placed_for=key)
    sol, ch, failing = _balance_ranges(problem, sol)
    if failing:
        worst = max(failing, key=lambda r: problem.ranges[r][1])
        return sol, Step(Issue("capacity", tuple(failing), bottleneck(problem, sol, worst, 1), "LP needs u > 1"))
    return sol, Step(changed=changed or ch)
