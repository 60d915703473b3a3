"""Why a plan is impossible, in the user's terms (paper §4: an error that reaches SP1 is final).

Algorithm 1's errors speak of ranges, caps and bottleneck models; a user needs to hear which SLO cannot be met,
at what load, on how many devices, and what to change. :func:`explain` turns the final :class:`Issue` and the
solution the cycle ended with into that sentence: a model that fits no device, an accuracy target above the most
accurate cascade (or above what keeping up at every load allows), a load beyond what even the cheapest cascade
can carry, or a p95 the simulator could not bring under the SLO.
"""

from __future__ import annotations

import math

from cascadeserve.planner.problem import Problem
from cascadeserve.planner.solution import Issue, Solution, weighted_acc

__all__ = ["explain", "memory_warnings"]


def memory_warnings(problem: Problem, sol: Solution, placed: set[str]) -> list[str]:
    """One sentence per profile model that memory kept out of the plan (``placed``: the models of the final
    placement): a model larger than every device, and a model that SP2 dropped to resolve a memory error (the
    cascades that use it could not be placed beside the rest). A plan that quietly lacks the most accurate model
    looks like a planner's choice; these say it was the hardware's."""
    largest = max(d.memory_mb for d in problem.devices)
    n = f"{problem.n_dev} device{'s' if problem.n_dev != 1 else ''}"
    mem = ", ".join(sorted({f"{d.memory_mb:g} MB" for d in problem.devices}))
    out: list[str] = []
    for m in problem.profile.models:
        if m.name in placed:
            continue
        if m.memory_mb > largest + 1e-9:
            out.append(
                f"model {m.name} needs {m.memory_mb:g} MB and fits on no device ({n} of {mem}): the plan leaves it out"
            )
        elif m.name in sol.memory_dropped:
            out.append(
                f"model {m.name} ({m.memory_mb:g} MB) was left out of the plan for memory: the cascades that use it "
                f"could not be placed on {n} of {mem} beside the other models the plan needs"
            )
    return out


def explain(problem: Problem, sol: Solution, issue: Issue) -> str:
    """The message of the :class:`~cascadeserve.errors.InfeasibleError` for ``issue``; with device headroom
    (``max_busy`` below 1) it says so, since the headroom may be what made the load too much."""
    msg = _explain(problem, sol, issue)
    busy = problem.options.max_busy
    if busy < 1 and issue.kind != "memory":
        msg += f" (planned with device headroom: at most {busy:.0%} busy; raise max_busy, plan --max-busy, for more)"
    return msg


def _explain(problem: Problem, sol: Solution, issue: Issue) -> str:
    fr = sol.fr
    n = f"{problem.n_dev} device{'s' if problem.n_dev != 1 else ''}"
    mem = ", ".join(sorted({f"{d.memory_mb:g} MB" for d in problem.devices}))
    slo = str(problem.slo)
    if issue.kind == "memory":
        big = ", ".join(f"{m} ({problem.profile.model(m).memory_mb:g} MB)" for m in issue.models) or "the models"
        return f"{slo} is unreachable on {n} of {mem}: {big} cannot be placed; add devices or memory"
    if problem.slo.kind == "accuracy":
        best = fr[len(fr) - 1]
        if best.accuracy < problem.slo.value:
            return (
                f"{slo} is unreachable: the most accurate cascade ({best.cascade}) reaches {best.accuracy:.4f} "
                f"on the validation set; relax the SLO"
            )
        got = weighted_acc(problem, fr, sol.caps) if sol.caps and min(sol.caps) >= 0 else fr[0].accuracy
        top = problem.ranges[-1][1]
        return (
            f"{slo} is unreachable at {top:,.0f} QPS on {n}: keeping up at every load allows at most a "
            f"time-weighted accuracy of about {got:.4f} ({problem.dist.describe()}); add devices or relax the SLO"
        )
    at_cheapest = [r for r in issue.ranges if sol.assign and sol.assign[r] == 0]
    r = max(at_cheapest or issue.ranges or (problem.n_ranges - 1,))
    lo, hi = problem.ranges[r]
    cheapest = fr[0]
    cap_qps, worst = problem.capacity_qps(cheapest)
    if cap_qps < hi:
        return (
            f"{slo} is unreachable at {hi:,.0f} QPS on {n}: even the cheapest cascade ({cheapest.cascade}) "
            f"saturates model {worst} at about {cap_qps:,.0f} QPS; add devices or relax the SLO"
        )
    one = problem.batch_ms(cheapest.models[0], 1)
    p95 = sol.p95[r]
    seen = f"a simulated p95 of about {p95:,.1f} ms" if math.isfinite(p95) else "a p95 above the SLO"
    return (
        f"{slo} is unreachable at {lo:,.0f}-{hi:,.0f} QPS on {n}: even the cheapest cascade "
        f"({cheapest.cascade}, {float(one):.2f} ms per request at batch 1) gets {seen}; "
        f"add devices or relax the SLO"
    )
