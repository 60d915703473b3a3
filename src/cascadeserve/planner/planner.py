"""The gear planner: Algorithm 1 over SP1 (cascade search), SP2 (workload adaptation), SP3 (hardware mapping)
and SP4 (batching), behind a scikit-learn style ``Planner(...).fit(...)``.

One :class:`_Run` holds the joint solution while the four submodules take turns (:func:`run_loop`):

* **SP1** builds the accuracy/work frontier once (:func:`search_cascades`). It is static afterwards, so an error
  reaching it is final: the SLO is unreachable and :class:`~cascadeserve.errors.InfeasibleError` explains why.
* **SP2** assigns a frontier cascade to every QPS range.
  Under a latency SLO every range starts at the most accurate cascade; an error naming a range downgrades it to
  the next cheaper cascade, and every higher range to at most that cascade (a cascade that cannot carry some QPS
  cannot carry more). An error that names no range (memory) downgrades the range whose downgrade costs the least
  time-weighted accuracy. Under an accuracy SLO each range has a *cap* (the costliest cascade it may use, lowered
  by errors in the same way), and the assignment is the cheapest one meeting the time-weighted accuracy target:
  starting from the cheapest cascade everywhere, repeatedly upgrade the range with the most accuracy per unit of
  added work × QPS (so accurate cascades go to low, frequent loads). Both start by skipping cascades whose
  optimistic work exceeds the devices' total capacity at the range's top QPS, which SP3 would reject anyway.
  SP1's frontier never grows, so SP2's "swap in new cascades on ok" step has nothing to do and changes nothing.
* **SP3** places replicas (:func:`place_replicas`, greedy pruning with Eq. 4) for the models the assignment uses,
  then balances each range with one LP (:func:`balance`). Runtime per sample is amortised at the gear's batch
  sizes: a first-stage replica at its minimum queue length ``b``, a later stage ``s`` at ``max(1, b·reach_s)``,
  the expected size of the chunk one first-stage batch forwards to it. The range errors only when even the
  *optimistic* amortisation (every model at the largest batch the SLO allows, see ``_b_max``) needs ``u > 1``,
  because SP4 may still raise batch sizes. A range keeps its shares while placement and cascade are unchanged and
  they remain feasible (appendix A: a submodule only changes a feasible solution to improve it). On an SP4 error
  it forces one more replica of each bottleneck model and re-places; if that is impossible it passes the error on.
* **SP4** sets the first stage's minimum queue length per range: it keeps the current one if the simulator says
  the range holds (:func:`check_load`: p95 ≤ L and no growing backlog; no utilisation cap), otherwise tries 1
  (work-conserving: batches grow with the queue, which the amortised estimate at batch 1 cannot see) and then
  raises it by one from the smallest value whose amortised utilisation at that fixed batch is at most 0.95,
  until the range holds. Later stages keep 1: they
  receive a batch's uncertain samples in one chunk. The search stops at the largest batch the SLO allows, after
  :data:`_MAX_SIMS` simulations, or (latency SLO) when p95 has not improved for :data:`_PATIENCE` raises while the
  range keeps up; then the error names the range and the bottleneck model (the biggest user of the busiest
  device). The lowest range keeps 1, since its load can fall to zero and a larger batch would never fill; 1 is
  work-conserving, so this costs no capacity (batches still grow with the queue at the range's top).

A per-batch overhead (``Planner(batch_overhead_ms=…)``, a deployment's fixed cost per batch beyond the profiled
runtime) is part of every batch's duration above: the amortised runtimes of SP2's capacity test and of SP3's LP and
placement, ``_b_max``, SP4's utilisation estimate, and SP4's simulations (the checked plan carries it, as does the
emitted plan). SP1's frontier still ranks cascades by profiled work alone.

Simulation results are cached by (cascade, shares, minimum queue lengths, QPS), and so are LP solutions.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from cascadeserve.errors import InfeasibleError
from cascadeserve.plan import SLO, Device, Gear, GearPlan, GearReplica, Replica
from cascadeserve.planner.batching import check_load, check_seed, sim_duration
from cascadeserve.planner.loop import LoopInfeasible, Step, run_loop
from cascadeserve.planner.lp import Balance, balance
from cascadeserve.planner.placement import Load, PlacementError, place_replicas
from cascadeserve.planner.search import Candidate, Frontier, search_cascades
from cascadeserve.planner.tracecheck import SloSearch, TraceCheck, rank, shortfall
from cascadeserve.planner.workload import QpsDistribution, qps_ranges
from cascadeserve.profile import Profile
from cascadeserve.simulate import simulate

__all__ = ["SUBMODULES", "Planner", "PlannerReport", "qps_scale_for"]

SUBMODULES = ("search_cascades", "assign_cascades", "place_models", "tune_batch_sizes")
_UTIL_TARGET = 0.95  # SP4 starts where amortised utilisation first drops to this; below it a range cannot keep up
_MAX_SIMS = 24
_PATIENCE = 4

RepKey = tuple[str, int]  # (model, device index)


@dataclass(frozen=True)
class _Issue:
    """An error travelling back through the submodules."""

    kind: str  # capacity | memory | batch | accuracy | final
    ranges: tuple[int, ...] = ()
    models: tuple[str, ...] = ()
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind}: ranges {list(self.ranges)} models {list(self.models)} {self.detail}".strip()


@dataclass
class PlannerReport:
    """What the planner did: Algorithm 1's iterations and calls, time per submodule, frontier and simulations."""

    feasible: bool = False
    iterations: int = 0
    cycles: int = 0
    submodule_calls: dict[str, int] = field(default_factory=dict)
    submodule_s: dict[str, float] = field(default_factory=dict)
    frontier_size: int = 0
    frontier_method: str = ""
    frontier_evaluated: int = 0
    converged: bool = False
    hit_iteration_cap: bool = False
    max_iterations: int = 0
    planner_s: float = 0.0
    simulations: int = 0
    simulated_requests: int = 0
    lp_solves: int = 0
    plan_accuracy: float = 0.0
    qps_dist: str = ""
    message: str = ""
    trace_check: TraceCheck | None = None  # set when ``fit`` was given check arrivals

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def qps_scale_for(
    gear_highs: Sequence[float], accuracies: Sequence[float], samples: np.ndarray, target: float
) -> float:
    """Appendix C.2's measured-QPS scaling for an accuracy SLO.

    The largest factor ``s`` in (0, 1] such that, with every measured QPS sample multiplied by ``s`` before the gear
    lookup, the time-weighted accuracy over ``samples`` is at least ``target``. Scaling down keeps the system in
    the more accurate low-QPS gears for longer when the real load is heavier than planned; 1.0 when the samples
    already meet the target (or nothing does).
    """
    highs = np.asarray(gear_highs, dtype=np.float64)
    acc = np.asarray(accuracies, dtype=np.float64)
    qs = np.asarray(samples, dtype=np.float64)
    if not len(qs):
        return 1.0

    def achieved(s: float) -> float:
        g = np.minimum(np.searchsorted(highs, qs * s, side="right"), len(highs) - 1)
        return float(acc[g].mean())

    if achieved(1.0) >= target - 1e-12:
        return 1.0
    lo, hi = 0.0, 1.0  # achieved(lo) is the accuracy of the lowest gear, the best the scaling can do
    if achieved(1e-12) < target - 1e-12:
        return 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if achieved(mid) >= target - 1e-12:
            lo = mid
        else:
            hi = mid
    return max(lo, 1e-6)


class _Run:
    """The joint solution and the four submodules of one planner run."""

    def __init__(self, planner: Planner, profile: Profile, devices: Sequence[Device], slo: SLO, max_qps: float):
        self.p = planner
        self.profile = profile
        self.devices = tuple(devices)
        self.n_dev = len(self.devices)
        self.slo = slo
        self.latency_ms = slo.value if slo.kind == "p95_ms" else None
        self.overhead_ms = float(planner.batch_overhead_ms)
        self.ranges = qps_ranges(max_qps, planner.n_ranges)
        self.n_ranges = len(self.ranges)
        self.dist = QpsDistribution.parse(planner.qps_dist)
        self.weights = self.dist.weights(max_qps, self.n_ranges)
        self.frontier: Frontier | None = None
        self.assign: list[int] = []
        self.caps: list[int] = []
        self.placement: list[RepKey] = []
        self.placed_for: tuple[tuple[str, ...], tuple[tuple[str, int], ...]] | None = None
        self.forced: dict[str, int] = {}
        self.shares: list[dict[RepKey, float]] = [{} for _ in self.ranges]
        self.share_for: list[tuple[int, tuple[RepKey, ...]] | None] = [None] * self.n_ranges
        self.mq: list[dict[RepKey, int]] = [{} for _ in self.ranges]
        self.p95: list[float] = [math.nan] * self.n_ranges
        self.last_issue: _Issue | None = None
        self._t_cache: dict[tuple[str, int], float] = {}
        self._lp_cache: dict[tuple[Any, ...], Balance] = {}
        self._sim_cache: dict[tuple[Any, ...], tuple[bool, float]] = {}
        self.lp_solves = 0
        self.simulations = 0
        self.sim_requests = 0
        self._b_max_cache: dict[str, int] = {}

    # -- small helpers -----------------------------------------------------------------------------------------
    def batch_ms(self, model: str, sizes: float | np.ndarray) -> np.ndarray:
        """Milliseconds one batch of each size takes: the profiled runtime plus the per-batch overhead."""
        return np.asarray(self.profile.model(model).runtime.ms_at(sizes) + self.overhead_ms)

    def t(self, model: str, batch: float) -> float:
        """Seconds per sample of ``model`` in batches of ``batch`` (amortised, the per-batch overhead included)."""
        b = max(1, round(batch))
        key = (model, b)
        v = self._t_cache.get(key)
        if v is None:
            v = self._t_cache[key] = float(self.batch_ms(model, b)) / max(float(b), 1.0) / 1000.0
        return v

    def b_max(self, model: str) -> int:
        """Largest batch SP4 may give ``model``: its batch (overhead included) must run in half the latency SLO (a
        request may wait for the previous batch and then run in its own), capped by ``max_batch``."""
        hit = self._b_max_cache.get(model)
        if hit is not None:
            return hit
        cap = max(1, self.p.max_batch)
        if self.latency_ms is None or cap == 1:
            b = cap
        else:
            sizes = np.arange(1, cap + 1)
            ms = self.batch_ms(model, sizes)
            ok = np.flatnonzero(ms <= self.latency_ms / 2)
            b = int(sizes[ok[-1]]) if len(ok) else 1
        self._b_max_cache[model] = b
        return b

    def t_opt(self, model: str) -> float:
        """Optimistic seconds per sample: the cheapest amortised cost at any batch up to ``b_max``."""
        return min(self.t(model, b) for b in range(1, self.b_max(model) + 1))

    def cand(self, r: int) -> Candidate:
        assert self.frontier is not None
        return self.frontier[self.assign[r]]

    def demand(self, c: Candidate, qps: float) -> dict[str, float]:
        return {m: qps * f for m, f in zip(c.models, c.reach, strict=True)}

    def work_opt(self, c: Candidate) -> float:
        return sum(f * self.t_opt(m) for m, f in zip(c.models, c.reach, strict=True))

    def capacity_ok(self, c: Candidate, qps: float) -> bool:
        return qps * self.work_opt(c) <= self.n_dev * (1.0 + 1e-9)

    def lp(self, c: Candidate, qps: float, runtime: dict[str, float], placement: Sequence[RepKey]) -> Balance:
        key = (c.cascade, round(qps, 9), tuple(sorted(runtime.items())), tuple(placement))
        hit = self._lp_cache.get(key)
        if hit is None:
            self.lp_solves += 1
            hit = balance(
                [m for m, _ in placement],
                [d for _, d in placement],
                [runtime.get(m, 0.0) for m, _ in placement],
                self.demand(c, qps),
                self.n_dev,
            )
            self._lp_cache[key] = hit
        return hit

    def stage_batches(self, c: Candidate, base: int) -> dict[str, float]:
        """Expected batch per model when the first stage fires batches of ``base``."""
        pairs = enumerate(zip(c.models, c.reach, strict=True))
        return {m: (float(base) if k == 0 else max(1.0, base * f)) for k, (m, f) in pairs}

    def runtimes_at(self, c: Candidate, base: int) -> dict[str, float]:
        return {m: self.t(m, b) for m, b in self.stage_batches(c, base).items()}

    def runtimes_opt(self, c: Candidate) -> dict[str, float]:
        return {m: self.t_opt(m) for m in c.models}

    def base_batch(self, r: int) -> int:
        first = self.cand(r).models[0]
        vals = [v for (m, _), v in self.mq[r].items() if m == first]
        return max(vals) if vals else 1

    # -- SP1 -------------------------------------------------------------------------------------------------
    def sp1(self, error: _Issue | None) -> Step[_Issue]:
        if error is not None:
            return Step(error)  # the frontier already holds the cheapest and the most accurate cascade: final
        if self.frontier is not None:
            return Step()
        self.frontier = search_cascades(
            self.profile, levels=self.p.levels, seed=self.p.seed, method=self.p.search_method
        )
        return Step(changed=True)

    # -- SP2 -------------------------------------------------------------------------------------------------
    def _top_feasible(self, qps: float) -> int:
        assert self.frontier is not None
        for i in range(len(self.frontier) - 1, -1, -1):
            if self.capacity_ok(self.frontier[i], qps):
                return i
        return -1

    def _weighted_acc(self, assign: Sequence[int]) -> float:
        assert self.frontier is not None
        return float(sum(w * self.frontier[a].accuracy for w, a in zip(self.weights, assign, strict=True)))

    def _accuracy_assign(self) -> list[int] | None:
        """Cheapest assignment within ``caps`` whose time-weighted accuracy meets the accuracy SLO."""
        assert self.frontier is not None
        fr = self.frontier
        target = self.slo.value
        if min(self.caps) < 0 or self._weighted_acc(self.caps) < target - 1e-12:
            return None
        a = [0] * self.n_ranges
        while self._weighted_acc(a) < target - 1e-12:
            best: tuple[float, int] | None = None
            for r in range(self.n_ranges):
                if a[r] >= self.caps[r]:
                    continue
                gain = fr[a[r] + 1].accuracy - fr[a[r]].accuracy
                cost = max(fr[a[r] + 1].work_ms - fr[a[r]].work_ms, 1e-12) * self.ranges[r][1]
                score = self.weights[r] * gain / (self.weights[r] * cost)
                if best is None or score > best[0]:
                    best = (score, r)
            if best is None:
                return None
            a[best[1]] += 1
        return a

    def sp2(self, error: _Issue | None) -> Step[_Issue]:
        assert self.frontier is not None
        latency = self.latency_ms is not None
        if error is None:
            if self.assign:
                return Step()  # SP1's frontier is fixed: no new cascades to swap in
            tops = [self._top_feasible(hi) for _, hi in self.ranges]
            if min(tops) < 0:
                r = tops.index(-1)
                return Step(_Issue("capacity", (r,), self.frontier[0].models, "cheapest cascade over capacity"))
            if latency:
                self.assign = tops
                return Step(changed=True)
            self.caps = tops
            got = self._accuracy_assign()
            if got is None:
                return Step(_Issue("accuracy", (), (), "target above what the caps allow"))
            self.assign = got
            return Step(changed=True)
        before = list(self.assign)
        stuck = [r for r in error.ranges if self.assign[r] == 0 or (not latency and self.caps[r] == 0)]
        if error.kind == "memory" or stuck or not error.ranges:
            # Downgrading the named ranges cannot help (or none is named): free memory for the others by dropping
            # from the plan the model whose removal costs the least time-weighted accuracy.
            keep = {m for r in stuck for m in self.cand(r).models}
            if not self._drop_model(keep):
                return Step(error)
            return Step(changed=self.assign != before)
        if latency:
            new = list(self.assign)
            for r in sorted(error.ranges):
                for k in range(r, self.n_ranges):
                    new[k] = min(new[k], self.assign[r] - 1)
            self.assign = new
        else:
            for r in sorted(error.ranges):
                for k in range(r, self.n_ranges):
                    self.caps[k] = min(self.caps[k], self.assign[r] - 1)
            got = self._accuracy_assign()
            if got is None:
                return Step(_Issue("accuracy", error.ranges, error.models, error.detail))
            self.assign = got
        return Step(changed=self.assign != before)

    def _drop_model(self, keep: set[str]) -> bool:
        """Move every range that uses some model to the best cheaper cascade without it, choosing the model whose
        removal costs the least time-weighted accuracy; ``keep`` are models that must stay."""
        assert self.frontier is not None
        fr = self.frontier
        limits = self.assign if self.latency_ms is not None else self.caps
        used = sorted({m for r in range(self.n_ranges) for m in self.cand(r).models} - keep)
        best: tuple[float, list[int]] | None = None
        for m in used:
            trial = list(limits)
            ok = True
            for r in range(self.n_ranges):
                i = trial[r]
                while i >= 0 and m in fr[i].models:
                    i -= 1
                if i < 0:
                    ok = False
                    break
                for k in range(r, self.n_ranges):
                    trial[k] = min(trial[k], i)
            if not ok or trial == limits:
                continue
            if self.latency_ms is not None:
                loss = self._weighted_acc(self.assign) - self._weighted_acc(trial)
            else:
                loss = -self._weighted_acc(trial)
            if best is None or loss < best[0] - 1e-15:
                best = (loss, trial)
        if best is None:
            return False
        if self.latency_ms is not None:
            self.assign = best[1]
            return True
        old = self.caps
        self.caps = best[1]
        got = self._accuracy_assign()
        if got is None:
            self.caps = old
            return False
        self.assign = got
        return True

    # -- SP3 -------------------------------------------------------------------------------------------------
    def _loads(self) -> list[Load]:
        """One load per distinct cascade, at the highest QPS it serves, with optimistic runtimes."""
        top: dict[int, int] = {}
        for r, a in enumerate(self.assign):
            top[a] = r  # ranges ascend, so the last one is the highest QPS
        loads = []
        for a, r in sorted(top.items()):
            c = self.frontier[a] if self.frontier is not None else None
            assert c is not None
            loads.append(Load(self.demand(c, self.ranges[r][1]), self.runtimes_opt(c)))
        return loads

    def _place(self, forced: dict[str, int]) -> list[RepKey]:
        needed = sorted({m for r in range(self.n_ranges) for m in self.cand(r).models})
        mem = {m: self.profile.model(m).memory_mb for m in needed}
        return place_replicas(mem, [d.memory_mb for d in self.devices], self._loads(), forced)

    def _ranges_using(self, models: Sequence[str]) -> tuple[int, ...]:
        return tuple(r for r in range(self.n_ranges) if set(self.cand(r).models) & set(models))

    def _balance_ranges(self) -> tuple[bool, list[int]]:
        changed = False
        failing: list[int] = []
        pl = tuple(self.placement)
        for r, (_, hi) in enumerate(self.ranges):
            c = self.cand(r)
            key = (self.assign[r], pl)
            base = self.base_batch(r) if self.share_for[r] == key else 1
            rt = self.runtimes_at(c, base)
            if self.share_for[r] == key and self.shares[r]:
                util = np.zeros(self.n_dev)
                for (m, d), s in self.shares[r].items():
                    util[d] += s * hi * dict(zip(c.models, c.reach, strict=True))[m] * rt[m]
                if util.max() <= 1.0 + 1e-9:
                    continue
            bal = self.lp(c, hi, rt, pl)
            if not bal.feasible:
                bal = self.lp(c, hi, self.runtimes_opt(c), pl)
                if not bal.feasible:
                    failing.append(r)
                    self.shares[r], self.share_for[r], self.mq[r] = {}, None, {}
                    continue
            models = [m for m, _ in pl]
            shares: dict[RepKey, float] = {}
            for m in c.models:
                for i, s in bal.shares(models, m).items():
                    shares[pl[i]] = s
            if shares != self.shares[r] or self.share_for[r] != key:
                changed = True
                self.shares[r] = shares
                self.share_for[r] = key
                self.mq[r] = {k: v for k, v in self.mq[r].items() if k in shares}
        return changed, failing

    def sp3(self, error: _Issue | None) -> Step[_Issue]:
        assert self.frontier is not None
        if error is not None:
            forced = dict(self.forced)
            grew = False
            for m in error.models:
                have = sum(1 for mm, _ in self.placement if mm == m)
                if have < self.n_dev:
                    forced[m] = max(forced.get(m, 1), have + 1)
                    grew = True
            if not grew:
                return Step(error)
            try:
                placement = self._place(forced)
            except PlacementError:
                return Step(error)
            self.forced = forced
            self.placement = placement
            self.placed_for = self._placement_key()
            self._balance_ranges()
            return Step(changed=True)
        changed = False
        key = self._placement_key()
        if key != self.placed_for:
            try:
                placement = self._place(self.forced)
            except PlacementError as e:
                # drop forcing for models no longer needed, then report the memory problem back to SP2
                return Step(
                    _Issue("memory", self._ranges_using(e.models) if len(e.models) == 1 else (), e.models, str(e))
                )
            changed = placement != self.placement
            self.placement = placement
            self.placed_for = key
        ch, failing = self._balance_ranges()
        if failing:
            worst = max(failing, key=lambda r: self.ranges[r][1])
            return Step(_Issue("capacity", tuple(failing), self._bottleneck(worst, 1), "LP needs u > 1"))
        return Step(changed=changed or ch)

    def _placement_key(self) -> tuple[tuple[str, ...], tuple[tuple[str, int], ...]]:
        needed = tuple(sorted({m for r in range(self.n_ranges) for m in self.cand(r).models}))
        return needed, tuple(sorted(self.forced.items()))

    # -- SP4 -------------------------------------------------------------------------------------------------
    def _mq_for(self, r: int, base: int) -> dict[RepKey, int]:
        c = self.cand(r)
        first = c.models[0]
        fs = {k: s for k, s in self.shares[r].items() if k[0] == first}
        smax = max(fs.values()) if fs else 1.0
        return {k: (max(1, round(base * s / smax)) if s > 0 else 1) for k, s in fs.items()}

    def _util_at(self, r: int, base: int) -> np.ndarray:
        c = self.cand(r)
        hi = self.ranges[r][1]
        rt = self.runtimes_at(c, base)
        reach = dict(zip(c.models, c.reach, strict=True))
        util = np.zeros(self.n_dev)
        for (m, d), s in self.shares[r].items():
            util[d] += s * hi * reach[m] * rt[m]
        return util

    def _bottleneck(self, r: int, base: int) -> tuple[str, ...]:
        """The model that uses the busiest device most (at first-stage batch ``base``)."""
        c = self.cand(r)
        hi = self.ranges[r][1]
        rt = self.runtimes_at(c, base) if self.shares[r] else self.runtimes_opt(c)
        reach = dict(zip(c.models, c.reach, strict=True))
        if not self.shares[r]:
            return (max(c.models, key=lambda m: reach[m] * rt[m]),)
        util = np.zeros(self.n_dev)
        per: dict[tuple[int, str], float] = {}
        for (m, d), s in self.shares[r].items():
            v = s * hi * reach[m] * rt[m]
            util[d] += v
            per[(d, m)] = per.get((d, m), 0.0) + v
        d_star = int(np.argmax(util))
        return (max(c.models, key=lambda m: per.get((d_star, m), 0.0)),)

    def _plan_for(self, r: int, mq: dict[RepKey, int]) -> GearPlan:
        c = self.cand(r)
        reps = [k for k in self.placement if k[0] in c.models]
        return GearPlan(
            profile=self.profile.name,
            devices=self.devices,
            replicas=tuple(Replica(model=m, device=self.devices[d].name) for m, d in reps),
            gears=(
                Gear(
                    qps_low=0.0,
                    qps_high=max(self.ranges[r][1], 1e-9),
                    models=c.models,
                    thresholds=c.cascade.thresholds,
                    replicas=tuple(
                        GearReplica(
                            model=m,
                            device=self.devices[d].name,
                            min_queue=mq.get((m, d), 1),
                            share=self.shares[r].get((m, d), 0.0),
                        )
                        for m, d in reps
                    ),
                ),
            ),
            alpha=self.p.alpha,
            batch_overhead_ms=self.overhead_ms,
        )

    def _sim(self, r: int, mq: dict[RepKey, int], qps: float) -> tuple[bool, float]:
        key = (
            self.cand(r).cascade,
            tuple(sorted((k, round(v, 6)) for k, v in self.shares[r].items())),
            tuple(sorted(mq.items())),
            round(qps, 9),
        )
        hit = self._sim_cache.get(key)
        if hit is None:
            dur = self.p.check_duration_s or sim_duration(qps, self.latency_ms, self.p.sim_requests)
            chk = check_load(self.profile, self._plan_for(r, mq), qps, dur, seed=check_seed(self.p.seed, r))
            self.simulations += 1
            self.sim_requests += chk.requests
            hit = self._sim_cache[key] = (chk.keep_up, chk.p95_ms)
        return hit

    def _holds(self, r: int, base: int) -> tuple[bool, bool, float]:
        """(holds, keeps up at the top, predicted p95) for first-stage batch ``base``."""
        lo, hi = self.ranges[r]
        mq = self._mq_for(r, base)
        keep, p95 = self._sim(r, mq, hi)
        ok = keep and (self.latency_ms is None or p95 <= self.latency_ms)
        if ok and lo > 0 and max(mq.values(), default=1) > 1:
            keep_lo, p95_lo = self._sim(r, mq, lo)
            p95 = max(p95, p95_lo)
            ok = keep_lo and (self.latency_ms is None or p95 <= self.latency_ms)
        return ok, keep, p95

    def sp4(self, error: _Issue | None) -> Step[_Issue]:
        if error is not None:  # nothing comes after SP4; kept for symmetry
            return Step(error)
        changed = False
        failing: list[int] = []
        blame: list[str] = []
        for r in range(self.n_ranges):
            c = self.cand(r)
            cap = 1 if r == 0 else self.b_max(c.models[0])
            cur = self.base_batch(r) if self.mq[r] else 0
            if cur:
                ok, _, p95 = self._holds(r, cur)
                if ok:
                    if p95 != self.p95[r]:
                        self.p95[r] = p95
                        changed = True
                    continue
            start = cap
            for b in range(1, cap + 1):
                if self._util_at(r, b).max() <= _UTIL_TARGET:
                    start = b
                    break
            found = 0
            best_p95 = math.inf
            stale = 0
            # A minimum queue of 1 is work-conserving (a free replica takes its whole queue, so batches grow
            # with the load); the amortised estimate at batch 1 underrates it, so it is always tried first.
            trials = ([1] if start > 1 else []) + list(range(start, cap + 1))
            for sims, b in enumerate(trials, start=1):
                ok, keep, p95 = self._holds(r, b)
                if ok:
                    found = b
                    self.p95[r] = p95
                    break
                if keep and self.latency_ms is not None:
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
                blame.extend(self._bottleneck(r, cap))
                continue
            mq = self._mq_for(r, found)
            if mq != self.mq[r]:
                self.mq[r] = mq
                changed = True
        if failing:
            return Step(_Issue("batch", tuple(failing), tuple(dict.fromkeys(blame)), "simulation misses the SLO"))
        return Step(changed=changed)

    # -- result ----------------------------------------------------------------------------------------------
    def build_plan(self) -> GearPlan:
        assert self.frontier is not None
        gears = []
        for r, (lo, hi) in enumerate(self.ranges):
            c = self.cand(r)
            reps = [k for k in self.placement if k[0] in c.models]
            gears.append(
                Gear(
                    qps_low=lo,
                    qps_high=hi,
                    models=c.models,
                    thresholds=c.cascade.thresholds,
                    replicas=tuple(
                        GearReplica(
                            model=m,
                            device=self.devices[d].name,
                            min_queue=self.mq[r].get((m, d), 1),
                            share=_norm(self.shares[r], m).get((m, d), 0.0),
                        )
                        for m, d in reps
                    ),
                    predicted_p95_ms=round(self.p95[r], 3),
                    predicted_accuracy=round(c.accuracy, 6),
                )
            )
        accs = [self.cand(r).accuracy for r in range(self.n_ranges)]
        scale = 1.0
        if self.slo.kind == "accuracy":
            samples = self.dist.samples(self.ranges[-1][1])
            if samples is not None:
                scale = qps_scale_for([hi for _, hi in self.ranges], accs, samples, self.slo.value)
        return GearPlan(
            profile=self.profile.name,
            devices=self.devices,
            replicas=tuple(Replica(model=m, device=self.devices[d].name) for m, d in self.placement),
            gears=tuple(gears),
            slo=self.slo,
            alpha=self.p.alpha,
            qps_scale=scale,
            batch_overhead_ms=self.overhead_ms,
            notes={
                "planner": "cascadeserve.planner (Algorithm 1)",
                "qps_dist": self.dist.describe(),
                "planned_accuracy": f"{self._weighted_acc(self.assign):.6f}",
            },
        )

    # -- infeasibility in the user's terms -------------------------------------------------------------------
    def capacity_qps(self, c: Candidate) -> tuple[float, str]:
        """About how many QPS cascade ``c`` can carry with every model on every device it fits, batching as the
        SLO allows; and the model that saturates first."""
        fits = [
            (m, d)
            for d, dev in enumerate(self.devices)
            for m in c.models
            if self.profile.model(m).memory_mb <= dev.memory_mb
        ]
        bal = self.lp(c, 1.0, self.runtimes_opt(c), fits)
        reach = dict(zip(c.models, c.reach, strict=True))
        worst = max(c.models, key=lambda m: reach[m] * self.t_opt(m))
        return (1.0 / bal.u if bal.u > 0 and math.isfinite(bal.u) else 0.0), worst

    def explain(self, issue: _Issue) -> str:
        assert self.frontier is not None
        fr = self.frontier
        n = f"{self.n_dev} device{'s' if self.n_dev != 1 else ''}"
        mem = ", ".join(sorted({f"{d.memory_mb:g} MB" for d in self.devices}))
        slo = str(self.slo)
        if issue.kind == "memory":
            big = ", ".join(f"{m} ({self.profile.model(m).memory_mb:g} MB)" for m in issue.models) or "the models"
            return f"{slo} is unreachable on {n} of {mem}: {big} cannot be placed; add devices or memory"
        if self.slo.kind == "accuracy":
            best = fr[len(fr) - 1]
            if best.accuracy < self.slo.value:
                return (
                    f"{slo} is unreachable: the most accurate cascade ({best.cascade}) reaches {best.accuracy:.4f} "
                    f"on the validation set; relax the SLO"
                )
            got = self._weighted_acc(self.caps) if self.caps and min(self.caps) >= 0 else fr[0].accuracy
            top = self.ranges[-1][1]
            return (
                f"{slo} is unreachable at {top:,.0f} QPS on {n}: keeping up at every load allows at most a "
                f"time-weighted accuracy of about {got:.4f} ({self.dist.describe()}); add devices or relax the SLO"
            )
        at_cheapest = [r for r in issue.ranges if self.assign and self.assign[r] == 0]
        r = max(at_cheapest or issue.ranges or (self.n_ranges - 1,))
        lo, hi = self.ranges[r]
        cheapest = fr[0]
        cap_qps, worst = self.capacity_qps(cheapest)
        if cap_qps < hi:
            return (
                f"{slo} is unreachable at {hi:,.0f} QPS on {n}: even the cheapest cascade ({cheapest.cascade}) "
                f"saturates model {worst} at about {cap_qps:,.0f} QPS; add devices or relax the SLO"
            )
        one = self.batch_ms(cheapest.models[0], 1)
        p95 = self.p95[r]
        seen = f"a simulated p95 of about {p95:,.1f} ms" if math.isfinite(p95) else "a p95 above the SLO"
        return (
            f"{slo} is unreachable at {lo:,.0f}-{hi:,.0f} QPS on {n}: even the cheapest cascade "
            f"({cheapest.cascade}, {float(one):.2f} ms per request at batch 1) gets {seen}; "
            f"add devices or relax the SLO"
        )


def _announce(
    i: int, module: Callable[[_Issue | None], Step[_Issue]], progress: Callable[[int, int], None]
) -> Callable[[_Issue | None], Step[_Issue]]:
    calls = [0]

    def call(error: _Issue | None) -> Step[_Issue]:
        calls[0] += 1
        progress(i, calls[0])
        return module(error)

    return call


def _norm(shares: dict[RepKey, float], model: str) -> dict[RepKey, float]:
    """Shares of ``model``'s replicas rescaled to sum exactly to one (the plan checks this to 1e-6)."""
    own = {k: v for k, v in shares.items() if k[0] == model}
    total = sum(own.values())
    if total <= 0:
        return {k: 1.0 / len(own) for k in own}
    return {k: v / total for k, v in own.items()}


class Planner:
    """The gear planner. ``Planner(...).fit(profile, hardware, slo, max_qps)`` sets ``plan_`` and ``report_``.

    * ``n_ranges``: equal QPS ranges over ``[0, max_qps]``, one gear each.
    * ``qps_dist``: ``"zipf"`` (exponent 1.1), ``"zipf:<exponent>"``, ``"trace:<trace spec>"`` or a
      :class:`QpsDistribution`; it weights the ranges for the plan's time-weighted accuracy.
    * ``alpha``: the runtime's hysteresis factor, copied into the plan.
    * ``seed``: seeds random cascade sampling and the simulated arrivals.
    * ``levels``: threshold levels per stage; ``max_batch``: the largest minimum queue length SP4 may choose
      (1 = no batching); ``sim_requests``: the most requests one SP4 simulation replays; ``max_iterations``:
      Algorithm 1's hard cap on submodule calls; ``search_method``: auto, exact or random.
    * ``batch_overhead_ms`` (≥ 0, default 0): a deployment's fixed cost per batch beyond the profiled runtime (e.g.
      from ``eval fidelity --calibrate``). Every batch the planner reasons about costs ``runtime(b) + overhead``:
      SP3's amortised per-sample runtimes (LP and placement), SP4's largest batch and amortised utilisation, and
      SP4's simulations (the plan under check carries it). The plan carries it too, so ``simulate`` charges it.
      With 0 the planner behaves exactly as without it.
    * ``trace_rounds`` (default 4) and ``trace_loosen`` (default True): with ``fit(check_arrivals=…)``, how many
      times the planner may plan again against a retargeted internal SLO (tighter when the plan's replay of those
      arrivals misses the SLO; looser when it meets it with slack, unless ``trace_loosen`` is False), keeping the
      best plan that meets the SLO on the replay (:mod:`cascadeserve.planner.tracecheck`).
    """

    def __init__(
        self,
        n_ranges: int = 10,
        qps_dist: str | QpsDistribution = "zipf",
        alpha: float = 8.0,
        seed: int = 0,
        *,
        levels: int = 20,
        max_batch: int = 256,
        sim_requests: int = 2000,
        max_iterations: int = 5000,
        search_method: str = "auto",
        check_duration_s: float | None = None,
        batch_overhead_ms: float = 0.0,
        trace_rounds: int = 4,
        trace_loosen: bool = True,
    ) -> None:
        if trace_rounds < 0:
            raise ValueError(f"trace_rounds must be ≥ 0, got {trace_rounds!r}")
        if not (batch_overhead_ms >= 0 and math.isfinite(batch_overhead_ms)):
            raise ValueError(f"batch_overhead_ms must be a finite number ≥ 0, got {batch_overhead_ms!r}")
        self.n_ranges = n_ranges
        self.qps_dist = qps_dist
        self.alpha = alpha
        self.seed = seed
        self.levels = levels
        self.max_batch = max_batch
        self.sim_requests = sim_requests
        self.max_iterations = max_iterations
        self.search_method = search_method
        # SP4 simulates each range for a duration chosen from its QPS and the SLO; a fixed one is for experiments
        # that score plans on one known trace (the quality harness).
        self.check_duration_s = check_duration_s
        self.batch_overhead_ms = float(batch_overhead_ms)
        self.trace_rounds = trace_rounds
        self.trace_loosen = trace_loosen
        self.plan_: GearPlan | None = None
        self.report_: PlannerReport | None = None

    def fit(
        self,
        profile: Profile,
        hardware: Sequence[Device],
        slo: SLO,
        max_qps: float,
        *,
        progress: Callable[[int, int], None] | None = None,
        check_arrivals: np.ndarray | None = None,
    ) -> Planner:
        """Plan gears for ``profile`` on ``hardware`` under ``slo`` up to ``max_qps``.

        ``progress(submodule, calls)`` is called before every submodule call (for a live display). Raises
        :class:`~cascadeserve.errors.InfeasibleError` (with ``report_`` set) when the SLO cannot be met.

        ``check_arrivals`` (sorted arrival times in seconds, e.g. the trace the QPS distribution came from): replay
        the plan on them and plan again against a retargeted internal SLO (tighter while the replay misses ``slo``,
        looser while it meets it with slack), at most ``trace_rounds`` times; the best plan that meets ``slo`` on
        the replay is kept (:mod:`cascadeserve.planner.tracecheck`). ``report_.trace_check`` says how the kept plan
        replayed; when none meets ``slo`` the closest is kept, not raised. The plan states the user's ``slo``; its
        notes name the internal one.
        """
        if check_arrivals is None:
            return self._fit_once(profile, hardware, slo, max_qps, progress)
        t0 = time.perf_counter()
        arrivals = np.asarray(check_arrivals, dtype=np.float64)
        internal, search = slo, SloSearch(slo)
        best: tuple[tuple[float, ...], GearPlan, PlannerReport, TraceCheck] | None = None
        for rounds in range(self.trace_rounds + 1):
            try:
                self._fit_once(profile, hardware, internal, max_qps, progress)
            except InfeasibleError:
                if best is None:
                    raise  # the user's own SLO is infeasible: the planner's message says why
                break  # a retargeted SLO is infeasible: keep the best plan so far
            assert self.plan_ is not None and self.report_ is not None
            res = simulate(profile, self.plan_, arrivals)
            p95, acc = res.percentile_ms(95), res.accuracy
            check = TraceCheck(shortfall(slo, p95, acc) <= 0, p95, acc, len(arrivals), rounds, internal.value)
            key = rank(slo, check)
            if best is None or key < best[0]:
                best = (key, self.plan_, self.report_, check)
            if rounds == self.trace_rounds or (check.met and not self.trace_loosen):
                break
            nxt = search.next(internal, p95, acc)
            if nxt is None:
                break
            internal = nxt
        assert best is not None
        _, plan, report, check = best
        notes = dict(plan.notes)
        if check.planned_for != slo.value:
            notes["planned_for"] = str(SLO(kind=slo.kind, value=check.planned_for))
        notes["trace_check"] = check.describe(slo)
        self.plan_ = plan.model_copy(update={"slo": slo, "notes": notes})
        report.trace_check = check
        report.planner_s = time.perf_counter() - t0
        self.report_ = report
        return self

    def _fit_once(
        self,
        profile: Profile,
        hardware: Sequence[Device],
        slo: SLO,
        max_qps: float,
        progress: Callable[[int, int], None] | None,
    ) -> Planner:
        t0 = time.perf_counter()
        if not hardware:
            raise InfeasibleError("no devices: give at least one")
        run = _Run(self, profile, hardware, slo, max_qps)
        modules: list[Callable[[_Issue | None], Step[_Issue]]] = [run.sp1, run.sp2, run.sp3, run.sp4]
        if progress is not None:
            modules = [_announce(i, m, progress) for i, m in enumerate(modules)]
        report = PlannerReport(qps_dist=run.dist.describe(), max_iterations=self.max_iterations)
        self.report_ = report
        try:
            res = run_loop(modules, max_iterations=self.max_iterations)
        except LoopInfeasible as e:
            self._fill(report, run, e.result, t0)
            report.message = run.explain(e.error)
            self.plan_ = None
            raise InfeasibleError(report.message) from None
        self._fill(report, run, res, t0)
        if res.hit_cap and not run.assign:
            report.message = f"Algorithm 1 hit its cap of {self.max_iterations} submodule calls before any plan"
            raise InfeasibleError(report.message)
        self.plan_ = run.build_plan()
        report.feasible = True
        report.plan_accuracy = run._weighted_acc(run.assign)
        if res.hit_cap:
            report.message = f"Algorithm 1 hit its cap of {self.max_iterations} submodule calls; plan may be suboptimal"
        report.planner_s = time.perf_counter() - t0
        return self

    @staticmethod
    def _fill(report: PlannerReport, run: _Run, res: Any, t0: float) -> None:
        report.iterations = res.iterations
        report.cycles = res.cycles
        report.submodule_calls = dict(zip(SUBMODULES, res.calls, strict=True))
        report.submodule_s = {k: round(v, 6) for k, v in zip(SUBMODULES, res.seconds, strict=True)}
        report.converged = res.converged
        report.hit_iteration_cap = res.hit_cap
        report.simulations = run.simulations
        report.simulated_requests = run.sim_requests
        report.lp_solves = run.lp_solves
        if run.frontier is not None:
            report.frontier_size = len(run.frontier)
            report.frontier_method = run.frontier.method
            report.frontier_evaluated = run.frontier.evaluated
        report.planner_s = time.perf_counter() - t0
