"""SP4, batching (paper §4.5): the first stage's minimum queue length per range, checked by simulation.

For each range SP4 keeps the current minimum queue length if the simulator says the range holds
(:func:`~cascadeserve.planner.batching.check_load`: simulated for seconds at the range's top QPS plus its 100 ms
measurement noise, p95 ≤ L, no growing backlog, and, with ``Planner(max_busy=…)`` below 1, no device busier
than that fraction of the time: device headroom). Every replica's batch cap
(:meth:`~cascadeserve.planner.problem.Problem.cap`) is in the plan under check, so the simulated batches are the
ones the runtime forms.
Otherwise it tries 1 (work-conserving: a free replica takes its whole queue, so batches grow with the load, which
the amortised estimate at batch 1 cannot see) and then raises it by one from the smallest value whose amortised
utilisation at that fixed batch is at most :data:`_UTIL_TARGET`, until the range holds. Later stages keep 1: they
receive a batch's uncertain samples in one chunk.

The search stops at the largest batch the SLO allows, after :data:`_MAX_SIMS` simulations, or (latency SLO) when
p95 has not improved for :data:`_PATIENCE` raises while the range keeps up; then the error names the range and
the bottleneck model (:func:`bottleneck`: the biggest user of the busiest device), and SP3 adds a replica of it.
The lowest range keeps 1, since its load can fall to zero and a larger batch would never fill; 1 is
work-conserving, so this costs no capacity (batches still grow with the queue at the range's top).

Simulation results are memoised on the problem (:class:`~cascadeserve.planner.problem.Memo`) by (cascade, shares,
minimum queue lengths, QPS); the plan under check carries the per-batch overhead, so the simulator charges it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import replace

import numpy as np

from cascadeserve.planner.batching import SAFE_UTIL, check_load, check_seed, sim_duration
from cascadeserve.planner.build import check_plan
from cascadeserve.planner.loop import Step
from cascadeserve.planner.problem import Problem, RepKey
from cascadeserve.planner.solution import Issue, Solution
from cascadeserve.policy.qps import check_qps

__all__ = ["bottleneck", "sp4"]

_UTIL_TARGET = 0.95  # SP4 starts where amortised utilisation first drops to this; below it a range cannot keep up
_MAX_SIMS = 24
_PATIENCE = 2


def _mq_for(sol: Solution, r: int, base: int) -> dict[RepKey, int]:
    """Minimum queues of range ``r``'s first-stage replicas for batch ``base`` at the busiest one, scaled down
    with each replica's share (a replica with half the share fills a batch half as fast)."""
    first = sol.cand(r).models[0]
    fs = {k: s for k, s in sol.shares[r].items() if k[0] == first}
    smax = max(fs.values()) if fs else 1.0
    return {k: (max(1, round(base * s / smax)) if s > 0 else 1) for k, s in fs.items()}


def _util_at(problem: Problem, sol: Solution, r: int, base: int) -> np.ndarray:
    """Amortised utilisation of each device at range ``r``'s top QPS with first-stage batch ``base``."""
    c = sol.cand(r)
    hi = problem.ranges[r][1]
    rt = problem.runtimes_at(c, base)
    load = dict(zip(c.models, problem.load(c), strict=True))
    util = np.zeros(problem.n_dev)
    for (m, d), s in sol.shares[r].items():
        util[d] += s * hi * load[m] * rt[m]
    return util


def bottleneck(problem: Problem, sol: Solution, r: int, base: int) -> tuple[str, ...]:
    """The model that uses the busiest device most in range ``r`` (at first-stage batch ``base``); without
    shares, the model with the most work per request. SP3 blames it too when its LP fails."""
    c = sol.cand(r)
    hi = problem.ranges[r][1]
    rt = problem.runtimes_at(c, base) if sol.shares[r] else problem.runtimes_opt(c)
    load = dict(zip(c.models, problem.load(c), strict=True))
    if not sol.shares[r]:
        return (max(c.models, key=lambda m: load[m] * rt[m]),)
    util = np.zeros(problem.n_dev)
    per: dict[tuple[int, str], float] = {}
    for (m, d), s in sol.shares[r].items():
        v = s * hi * load[m] * rt[m]
        util[d] += v
        per[(d, m)] = per.get((d, m), 0.0) + v
    d_star = int(np.argmax(util))
    return (max(c.models, key=lambda m: per.get((d_star, m), 0.0)),)


def _worst_util(problem: Problem, sol: Solution, r: int, qps: float) -> float:
    """The busiest device's utilisation in range ``r`` at ``qps`` if every sample cost the most per sample that any
    batch within its model's cap costs (SP4's test for a gear that cannot run away)."""
    c = sol.cand(r)
    load = dict(zip(c.models, problem.load(c), strict=True))
    worst = {m: problem.t_worst(m) for m in c.models}
    util = np.zeros(problem.n_dev)
    for (m, d), s in sol.shares[r].items():
        util[d] += s * qps * load[m] * worst[m]
    return float(util.max()) if len(util) else 0.0


def _sim(problem: Problem, sol: Solution, r: int, mq: Mapping[RepKey, int], qps: float) -> tuple[bool, float, float]:
    """(keeps up, p95 ms, busiest device's busy fraction) of range ``r``'s check plan at ``qps``, memoised."""
    key = (
        sol.cand(r).cascade,
        tuple(sorted((k, round(v, 6)) for k, v in sol.shares[r].items())),
        tuple(sorted(mq.items())),
        round(qps, 9),
    )
    memo = problem.memo
    hit = memo.sims.get(key)
    if hit is None:
        opts = problem.options
        safe = _worst_util(problem, sol, r, qps) <= SAFE_UTIL
        dur = opts.check_duration_s or sim_duration(
            qps, problem.latency_ms, opts.sim_requests, safe=safe, n_samples=problem.profile.n_samples
        )
        plan = check_plan(problem, sol, r, mq)
        chk = check_load(problem.profile, plan, qps, dur, seed=check_seed(opts.seed, r), slo_ms=problem.latency_ms)
        memo.sim_requests += chk.requests
        hit = memo.sims[key] = (chk.keep_up, chk.p95_ms, chk.busy_max)
    return hit


def _holds(problem: Problem, sol: Solution, r: int, base: int) -> tuple[bool, bool, float, float]:
    """(holds, keeps up at the top, predicted p95, busiest device's busy fraction at the top) for first-stage
    batch ``base``.

    A batch above 1 is also checked at the range's bottom QPS, where it takes longest to fill. With device headroom
    (``max_busy`` below 1) a gear whose busiest device is busier than that at the top does not hold; it counts as
    not keeping up, so SP4's patience (which waits for p95 to stop improving) does not end the search early: a
    larger batch is cheaper per sample and may bring the device under the bound.
    """
    lo, hi = problem.ranges[r]
    latency = problem.latency_ms
    mq = _mq_for(sol, r, base)
    opts = problem.options
    top = check_qps(hi, opts.tick_s, top=r == problem.n_ranges - 1, min_arrivals=opts.qps_min_arrivals)
    keep, p95, busy = _sim(problem, sol, r, mq, top)
    keep = keep and busy <= problem.options.max_busy
    ok = keep and (latency is None or p95 <= latency)
    if ok and lo > 0 and max(mq.values(), default=1) > 1:
        keep_lo, p95_lo, _ = _sim(problem, sol, r, mq, lo)
        p95 = max(p95, p95_lo)
        ok = keep_lo and (latency is None or p95 <= latency)
    return ok, keep, p95, busy


def _trials(problem: Problem, sol: Solution, r: int, cap: int) -> Iterator[int]:
    """First-stage batches to try in range ``r``: 1, then from the smallest batch whose amortised utilisation is at
    most :data:`_UTIL_TARGET` (``cap`` if none) up to ``cap``. Lazy: that start is only looked for when 1 fails,
    and most ranges hold at 1."""
    yield 1
    start = next((b for b in range(1, cap + 1) if _util_at(problem, sol, r, b).max() <= _UTIL_TARGET), cap)
    yield from range(max(start, 2), cap + 1)


def sp4(problem: Problem, sol: Solution, error: Issue | None) -> tuple[Solution, Step[Issue]]:
    """Find a minimum queue length per range that the simulator accepts; blame the bottleneck where none does."""
    if error is not None:  # nothing comes after SP4; kept for symmetry
        return sol, Step(error)
    changed = False
    failing: list[int] = []
    blame: list[str] = []
    # SP4 changes only the queue lengths, predicted p95s and busy fractions; the shares and placement it simulates
    # stay as given.
    mqs = list(sol.mq)
    p95s = list(sol.p95)
    busys = list(sol.busy) if sol.busy else [math.nan] * problem.n_ranges
    for r in range(problem.n_ranges):
        c = sol.cand(r)
        cap = 1 if r == 0 else problem.b_max(c.models[0])
        cur = sol.base_batch(r) if sol.mq[r] else 0
        if cur:
            ok, _, p95, busy = _holds(problem, sol, r, cur)
            if ok:
                busys[r] = busy
                if p95 != p95s[r]:
                    p95s[r] = p95
                    changed = True
                continue
        found = 0
        best_p95 = math.inf
        stale = 0
        # A minimum queue of 1 is work-conserving (a free replica takes its whole queue, so batches grow
        # with the load); the amortised estimate at batch 1 underrates it, so it is always tried first.
        for sims, b in enumerate(_trials(problem, sol, r, cap), start=1):
            ok, keep, p95, busy = _holds(problem, sol, r, b)
            if ok:
                found = b
                p95s[r], busys[r] = p95, busy
                break
            if keep and problem.latency_ms is not None:
                if p95 < best_p95 - 1e-9:
                    best_p95, stale = p95, 0
                else:
                    stale += 1
                if stale >= _PATIENCE:
                    break
            if sims >= _MAX_SIMS:
                break
        if not found:
            failing.append(r)
            blame.extend(bottleneck(problem, sol, r, cap))
            continue
        mq = _mq_for(sol, r, found)
        if mq != mqs[r]:
            mqs[r] = mq
            changed = True
    # Ranges that held keep their new queues and p95s even when another range fails (the next call starts there).
    out = replace(sol, mq=tuple(mqs), p95=tuple(p95s), busy=tuple(busys))
    if failing:
        return out, Step(Issue("batch", tuple(failing), tuple(dict.fromkeys(blame)), "simulation misses the SLO"))
    return out, Step(changed=changed)
