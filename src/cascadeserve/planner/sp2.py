"""SP2, workload adaptation (paper §4.3): which frontier cascade serves each QPS range.

* **Latency SLO.** Every range starts at the most accurate cascade it could carry. An error naming a range
  downgrades it to the next cheaper cascade, and every higher range to at most that cascade (a cascade that cannot
  carry some QPS cannot carry more).
* **Accuracy SLO.** Each range has a *cap* (the costliest cascade it may use, lowered by errors in the same way),
  and the assignment is the cheapest one meeting the time-weighted accuracy target: starting from the cheapest
  cascade everywhere, repeatedly upgrade the range with the most accuracy per unit of added work × QPS (so
  accurate cascades go to low, frequent loads).
* An error that names no range (memory), or names ranges that cannot go cheaper, drops from the plan the model
  whose removal costs the least time-weighted accuracy.

Both start by skipping cascades whose optimistic work exceeds the devices' total capacity at the range's top QPS,
which SP3 would reject anyway. SP1's frontier never grows, so Algorithm 1's "swap in new cascades on ok" step has
nothing to do here and changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from cascadeserve.planner.loop import Step
from cascadeserve.planner.problem import Problem
from cascadeserve.planner.search import Frontier
from cascadeserve.planner.solution import Issue, Solution, weighted_acc

__all__ = ["accuracy_assign", "sp2"]


def _top_feasible(problem: Problem, fr: Frontier, qps: float) -> int:
    """The most accurate frontier index whose optimistic work fits the devices at ``qps`` (-1: none)."""
    for i in range(len(fr) - 1, -1, -1):
        if problem.capacity_ok(fr[i], qps):
            return i
    return -1


def accuracy_assign(problem: Problem, fr: Frontier, caps: Sequence[int]) -> list[int] | None:
    """Cheapest assignment within ``caps`` whose time-weighted accuracy meets the accuracy SLO (``None``: none)."""
    target = problem.slo.value
    weights = problem.weights
    if min(caps) < 0 or weighted_acc(problem, fr, caps) < target - 1e-12:
        return None
    a = [0] * problem.n_ranges
    while weighted_acc(problem, fr, a) < target - 1e-12:
        best: tuple[float, int] | None = None
        for r in range(problem.n_ranges):
            if a[r] >= caps[r]:
                continue
            gain = fr[a[r] + 1].accuracy - fr[a[r]].accuracy
            cost = max(fr[a[r] + 1].work_ms - fr[a[r]].work_ms, 1e-12) * problem.ranges[r][1]
            score = weights[r] * gain / (weights[r] * cost)
            if best is None or score > best[0]:
                best = (score, r)
        if best is None:
            return None
        a[best[1]] += 1
    return a


def _drop_model(problem: Problem, sol: Solution, keep: set[str]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Move every range that uses some model to the best cheaper cascade without it, choosing the model whose
    removal costs the least time-weighted accuracy; ``keep`` are models that must stay.

    Returns the new (assign, caps), or ``None`` when no model can be dropped.
    """
    fr = sol.fr
    latency = problem.latency_ms is not None
    n = problem.n_ranges
    limits = list(sol.assign if latency else sol.caps)
    used = sorted({m for r in range(n) for m in sol.cand(r).models} - keep)
    best: tuple[float, list[int]] | None = None
    for m in used:
        trial = list(limits)
        ok = True
        for r in range(n):
            i = trial[r]
            while i >= 0 and m in fr[i].models:
                i -= 1
            if i < 0:
                ok = False
                break
            for k in range(r, n):
                trial[k] = min(trial[k], i)
        if not ok or trial == limits:
            continue
        if latency:
            loss = weighted_acc(problem, fr, sol.assign) - weighted_acc(problem, fr, trial)
        else:
            loss = -weighted_acc(problem, fr, trial)
        if best is None or loss < best[0] - 1e-15:
            best = (loss, trial)
    if best is None:
        return None
    if latency:
        return tuple(best[1]), sol.caps
    got = accuracy_assign(problem, fr, best[1])
    if got is None:
        return None  # the caps stay as they were
    return tuple(got), tuple(best[1])


def sp2(problem: Problem, sol: Solution, error: Issue | None) -> tuple[Solution, Step[Issue]]:
    """Assign a cascade to every range (first call), or resolve an error from SP3 by choosing cheaper ones."""
    fr = sol.fr
    latency = problem.latency_ms is not None
    if error is None:
        if sol.assign:
            return sol, Step()  # SP1's frontier is fixed: no new cascades to swap in
        tops = [_top_feasible(problem, fr, hi) for _, hi in problem.ranges]
        if min(tops) < 0:
            r = tops.index(-1)
            return sol, Step(Issue("capacity", (r,), fr[0].models, "cheapest cascade over capacity"))
        if latency:
            return replace(sol, assign=tuple(tops)), Step(changed=True)
        got = accuracy_assign(problem, fr, tops)
        if got is None:
            # the caps are kept: the final message reports the accuracy they allow
            return replace(sol, caps=tuple(tops)), Step(Issue("accuracy", (), (), "target above what the caps allow"))
        return replace(sol, caps=tuple(tops), assign=tuple(got)), Step(changed=True)
    before = sol.assign
    stuck = [r for r in error.ranges if sol.assign[r] == 0 or (not latency and sol.caps[r] == 0)]
    if error.kind == "memory" or stuck or not error.ranges:
        # Downgrading the named ranges cannot help (or none is named): free memory for the others by dropping
        # from the plan the model whose removal costs the least time-weighted accuracy.
        keep = {m for r in stuck for m in sol.cand(r).models}
        dropped = _drop_model(problem, sol, keep)
        if dropped is None:
            return sol, Step(error)
        assign, caps = dropped
        out = replace(sol, assign=assign, caps=caps)
        if error.kind == "memory":  # remembered so that the planner can say which models memory cost the plan
            gone = sorted(sol.used_models() - out.used_models())
            out = replace(out, memory_dropped=tuple(dict.fromkeys((*sol.memory_dropped, *gone))))
        return out, Step(changed=assign != before)
    n = problem.n_ranges
    if latency:
        new = list(sol.assign)
        for r in sorted(error.ranges):
            for k in range(r, n):
                new[k] = min(new[k], sol.assign[r] - 1)
        return replace(sol, assign=tuple(new)), Step(changed=tuple(new) != before)
    lowered = list(sol.caps)
    for r in sorted(error.ranges):
        for k in range(r, n):
            lowered[k] = min(lowered[k], sol.assign[r] - 1)
    got = accuracy_assign(problem, fr, lowered)
    if got is None:
        # the lowered caps are kept even though no assignment meets the target within them
        return replace(sol, caps=tuple(lowered)), Step(Issue("accuracy", error.ranges, error.models, error.detail))
    return replace(sol, caps=tuple(lowered), assign=tuple(got)), Step(changed=tuple(got) != before)
