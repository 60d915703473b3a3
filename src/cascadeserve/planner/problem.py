"""What one planner fit is about, fixed from start to finish (paper §4.1: the inputs of Algorithm 1).

Algorithm 1 alternates four submodules over a *joint solution* (:mod:`cascadeserve.planner.solution`); everything
they read but never change lives here, in one frozen :class:`Problem`: the profile, the devices, the SLO, the
largest QPS, the planner's options, the QPS ranges (one gear each, §4.3) and their time weights, and the runtime
and capacity arithmetic derived from them (amortised per-sample runtimes at a batch size, the largest batch the
SLO allows, each model's demand at a QPS).

Keeping these apart from the solution is what lets the submodules be plain functions ``(problem, solution,
error) -> (solution, step)``: a submodule cannot accidentally change the problem, and a reader can see at a glance
which state the cycle moves.

The problem also owns the run's :class:`Memo`: the LP solutions and SP4's simulation results, cached by their
inputs. The memo is the one mutable thing reachable from a :class:`Problem`; it never changes an answer (a cached
result is the one that would have been computed), it only saves the work and counts it for the report.

A per-batch overhead (``Planner(batch_overhead_ms=…)``) is part of every batch duration here (:meth:`batch_ms`), so
every amortised runtime, ``b_max`` and the capacity estimates include it.

**Audits.** With ``Planner(audit_fraction=f)`` (online threshold tuning, ``serve --tune``) every stage after the
first also runs the audited share ``f`` of the early exits before it (:meth:`Problem.reach`): the demand, the
capacity estimates, the LP and the expected batches all include that work, and the plan records ``f``. (SP4's
simulations do not replay audits; the LP's utilisation bound carries them.)

**Batch caps: one meaning for the batch.** Each model gets a batch cap (:meth:`Problem.cap`) that goes into the plan
(``GearReplica.max_batch``), so the simulator and every runtime never form a larger batch (the policy's
:func:`~cascadeserve.policy.batch_size` applies it). By default (:func:`default_batch_caps`) it is the batch size
with the lowest per-sample cost among those whose runtime (overhead included) fits in half the latency SLO (a
request may wait for the previous batch and then run in its own), never above the model's
:attr:`~cascadeserve.profile.ModelProfile.batch_limit` (its declared ``max_batch`` or largest profiled batch) nor
the planner's ``max_batch``. Without a cap, a free replica takes its whole queue; where per-sample cost *grows*
with batch size (small encoders on a CPU), a longer queue makes a costlier batch and the backlog runs away. The
capacity model prices exactly the batch the runtime can form: ``t_opt`` (SP2's pre-filter, SP3's placement and LP
fallback, :meth:`Problem.capacity_qps`) is the per-sample cost at the cap, and the expected batch of every stage
(:meth:`Problem.stage_batches`) is bounded by its cap.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import numpy as np

from cascadeserve.plan import SLO, Device
from cascadeserve.planner.lp import Balance, balance
from cascadeserve.planner.search import Candidate
from cascadeserve.planner.workload import QpsDistribution, qps_ranges
from cascadeserve.profile import Profile

__all__ = ["Memo", "Options", "Problem", "RepKey", "best_batch", "default_batch_caps", "make_problem"]

RepKey = tuple[str, int]  # (model, device index): one replica


@dataclass(frozen=True)
class Options:
    """The :class:`~cascadeserve.planner.Planner` parameters that one fit reads (see its docstring)."""

    levels: int
    seed: int
    search_method: str
    max_batch: int
    sim_requests: int
    check_duration_s: float | None
    alpha: float
    batch_overhead_ms: float
    batch_caps: tuple[tuple[str, int], ...] = ()  # fixed per-model caps overriding the default rule
    tick_s: float = 0.1  # the producer's QPS measurement window (SP4 checks above each range's top by its noise)
    audit_fraction: float = 0.0  # online tuning's audited share of early exits: they also run the later stages
    max_busy: float = 1.0  # SP4: the busiest device's simulated busy fraction at a range's check load (headroom)
    backend: Literal["local", "ray"] = "local"  # where the plan is served: on Ray, SP4's checks pay process hops
    qps_min_arrivals: int = 0  # the plan's QPS meter window (GearPlan.qps_min_arrivals); SP4's noise allowance


def best_batch(ms: np.ndarray, latency_ms: float | None) -> int:
    """The batch size (1-based index into ``ms``, the milliseconds of batches 1..n) with the lowest per-sample
    cost among those that run within half of ``latency_ms`` (all of them without a latency SLO); 1 when none does.
    Ties go to the smaller batch (same throughput, shorter batches)."""
    sizes = np.arange(1, len(ms) + 1)
    ok = sizes if latency_ms is None else sizes[ms <= latency_ms / 2]
    if not len(ok):
        return 1
    per = ms[ok - 1] / ok
    return int(ok[int(np.argmin(per))])


def default_batch_caps(
    profile: Profile,
    latency_ms: float | None,
    *,
    overhead_ms: float = 0.0,
    max_batch: int | None = None,
    models: Sequence[str] | None = None,
) -> dict[str, int]:
    """The planner's batch cap of each model (see the module docstring): the cheapest batch per sample that runs
    within half the latency SLO, at most the model's ``batch_limit`` and ``max_batch``."""
    out: dict[str, int] = {}
    for name in profile.model_names if models is None else models:
        m = profile.model(name)
        limit = m.batch_limit if max_batch is None else max(1, min(m.batch_limit, max_batch))
        ms = np.asarray(m.runtime.ms_at(np.arange(1, limit + 1)), dtype=np.float64) + overhead_ms
        out[name] = best_batch(ms, latency_ms)
    return out


@dataclass
class Memo:
    """LP and simulation results of one fit, keyed by everything they depend on, and the work they took.

    ``lp_solves`` and ``simulations`` in the report are the numbers of LPs HiGHS solved and of distinct
    simulations: each miss stores exactly one entry, so they are the sizes of ``lp_raw`` and ``sims``.
    """

    lp: dict[tuple[Any, ...], Balance] = field(default_factory=dict)
    lp_raw: dict[tuple[bytes, bytes], np.ndarray] = field(default_factory=dict)  # HiGHS answers by normalised LP
    sims: dict[tuple[Any, ...], tuple[bool, float, float]] = field(default_factory=dict)  # keeps up, p95, busy
    sim_requests: int = 0  # requests replayed by all simulations (a cache hit replays none)


@dataclass(frozen=True, eq=False)
class Problem:
    """The fixed inputs of one fit and the arithmetic over them. Build it with :func:`make_problem`.

    ``eq=False``: two problems are never compared, and numpy weights would make a generated ``__eq__`` ambiguous.
    """

    profile: Profile
    devices: tuple[Device, ...]
    slo: SLO
    max_qps: float
    options: Options
    dist: QpsDistribution
    ranges: tuple[tuple[float, float], ...]  # (low, high) QPS per range, ascending; one gear each
    weights: np.ndarray  # time weight per range (SP2's objective), summing to one
    memo: Memo = field(default_factory=Memo, init=False, repr=False)
    # Memoised pure functions of the fields above (filled lazily; they never change an answer).
    _t_cache: dict[tuple[str, int], float] = field(default_factory=dict, init=False, repr=False)
    _b_max_cache: dict[str, int] = field(default_factory=dict, init=False, repr=False)

    # -- plain views -------------------------------------------------------------------------------------------
    @property
    def n_dev(self) -> int:
        return len(self.devices)

    @cached_property
    def n_local(self) -> int:
        """This host's devices (not an upstream stage's)."""
        return sum(1 for d in self.devices if d.upstream is None)

    @property
    def n_ranges(self) -> int:
        return len(self.ranges)

    @property
    def latency_ms(self) -> float | None:
        """The latency SLO in ms, or ``None`` under an accuracy SLO (the submodules branch on this)."""
        return self.slo.value if self.slo.kind == "p95_ms" else None

    @property
    def overhead_ms(self) -> float:
        return self.options.batch_overhead_ms

    # -- runtimes ----------------------------------------------------------------------------------------------
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

    def cap(self, model: str) -> int:
        """``model``'s batch cap: the most samples one of its batches takes in the plan (module docstring)."""
        hit = self._b_max_cache.get(model)
        if hit is not None:
            return hit
        fixed = dict(self.options.batch_caps)
        if model in fixed:
            b = max(1, min(int(fixed[model]), max(1, self.options.max_batch)))
        else:
            b = default_batch_caps(
                self.profile,
                self.latency_ms,
                overhead_ms=self.overhead_ms,
                max_batch=max(1, self.options.max_batch),
                models=(model,),
            )[model]
        self._b_max_cache[model] = b
        return b

    def b_max(self, model: str) -> int:
        """Largest batch the runtime forms for ``model``, hence the largest minimum queue SP4 may give it: its cap."""
        return self.cap(model)

    def t_worst(self, model: str) -> float:
        """Pessimistic seconds per sample: the costliest amortised batch within the cap (SP4's runaway test)."""
        key = (model, -1)  # batch sizes are positive, so -1 marks this entry of the runtime cache
        v = self._t_cache.get(key)
        if v is None:
            v = self._t_cache[key] = max(self.t(model, b) for b in range(1, self.cap(model) + 1))
        return v

    def t_opt(self, model: str) -> float:
        """Optimistic seconds per sample: the amortised cost at the cap, the cheapest batch the runtime forms."""
        return self.t(model, self.cap(model))

    def stage_batches(self, c: Candidate, base: int) -> dict[str, float]:
        """Expected batch per model when the first stage fires batches of ``base``: a later stage receives the
        uncertain part of each first-stage batch in one chunk (§4.5); no batch exceeds its model's cap."""
        pairs = enumerate(zip(c.models, self.reach(c), strict=True))
        return {
            m: float(min(self.cap(m), base)) if k == 0 else min(float(self.cap(m)), max(1.0, base * f))
            for k, (m, f) in pairs
        }

    def runtimes_at(self, c: Candidate, base: int) -> dict[str, float]:
        return {m: self.t(m, b) for m, b in self.stage_batches(c, base).items()}

    def runtimes_opt(self, c: Candidate) -> dict[str, float]:
        return {m: self.t_opt(m) for m in c.models}

    # -- demand and capacity -----------------------------------------------------------------------------------
    def reach(self, c: Candidate) -> tuple[float, ...]:
        """The fraction of requests each stage of ``c`` runs on, audits included: with online tuning a fraction
        ``f`` of the early exits before stage ``k`` also run it (off the critical path, but on the devices), so
        stage ``k`` sees ``reach_k + f·(1 - reach_k)`` (:class:`~cascadeserve.policy.tuning.AuditSampler`)."""
        f = self.options.audit_fraction
        if not f:
            return c.reach
        return tuple(r if k == 0 else r + f * (1.0 - r) for k, r in enumerate(c.reach))

    def load(self, c: Candidate) -> tuple[float, ...]:
        """:meth:`reach` with each request weighed by its token cost at the stage (``Candidate.load``): what a
        stage's device time is proportional to. Audits add ``f·(1 - load_k)`` (the exits' work, mean 1 overall)."""
        f = self.options.audit_fraction
        if not f:
            return c.load
        return tuple(w if k == 0 else w + f * (1.0 - w) for k, w in enumerate(c.load))

    def demand(self, c: Candidate, qps: float) -> dict[str, float]:
        """Requests per second each model of ``c`` sees at ``qps`` (a later stage sees only what reaches it), each
        counted by its token cost there (:meth:`load`): the demand on its devices."""
        return {m: qps * f for m, f in zip(c.models, self.load(c), strict=True)}

    def work_opt(self, c: Candidate) -> float:
        return sum(f * self.t_opt(m) for m, f in zip(c.models, self.load(c), strict=True))

    def may_hold(self, model: str, device: int) -> bool:
        """Whether ``model`` may be placed on device ``device`` (an upstream stage on its own device only)."""
        return self.devices[device].holds(self.profile.model(model))

    def capacity_ok(self, c: Candidate, qps: float) -> bool:
        """Whether ``c`` could carry ``qps`` on all devices at optimistic runtimes (SP2's cheap pre-filter): this
        host's stages on this host's devices, each upstream stage on its own one."""
        local = remote = 0.0
        for m, f in zip(c.models, self.load(c), strict=True):
            work = qps * f * self.t_opt(m)
            if self.profile.model(m).upstream:
                remote = max(remote, work)
            else:
                local += work
        return local <= self.n_local * (1.0 + 1e-9) and remote <= 1.0 + 1e-9

    def lp(self, c: Candidate, qps: float, runtime: Mapping[str, float], placement: Sequence[RepKey]) -> Balance:
        """SP3's load-balancing LP (Eq. 5) for ``c`` at ``qps`` over ``placement``, memoised."""
        key = (c.cascade, round(qps, 9), tuple(sorted(runtime.items())), tuple(placement))
        hit = self.memo.lp.get(key)
        if hit is None:
            hit = balance(
                [m for m, _ in placement],
                [d for _, d in placement],
                [runtime.get(m, 0.0) for m, _ in placement],
                self.demand(c, qps),
                self.n_dev,
                solved=self.memo.lp_raw,
            )
            self.memo.lp[key] = hit
        return hit

    def capacity_qps(self, c: Candidate) -> tuple[float, str]:
        """About how many QPS cascade ``c`` can carry with every model on every device it fits, batching as the
        SLO allows; and the model that saturates first (for messages in the user's terms)."""
        fits = [
            (m, d)
            for d, dev in enumerate(self.devices)
            for m in c.models
            if self.profile.model(m).memory_mb <= dev.memory_mb and dev.holds(self.profile.model(m))
        ]
        bal = self.lp(c, 1.0, self.runtimes_opt(c), fits)
        load = dict(zip(c.models, self.load(c), strict=True))
        worst = max(c.models, key=lambda m: load[m] * self.t_opt(m))
        return (1.0 / bal.u if bal.u > 0 and math.isfinite(bal.u) else 0.0), worst


def make_problem(
    profile: Profile,
    devices: Sequence[Device],
    slo: SLO,
    max_qps: float,
    options: Options,
    n_ranges: int,
    qps_dist: str | QpsDistribution,
) -> Problem:
    """The problem of one fit: ``n_ranges`` equal QPS ranges up to ``max_qps``, weighted by ``qps_dist``."""
    ranges = qps_ranges(max_qps, n_ranges)
    dist = QpsDistribution.parse(qps_dist)
    return Problem(
        profile=profile,
        devices=tuple(devices),
        slo=slo,
        max_qps=max_qps,
        options=options,
        dist=dist,
        ranges=tuple(ranges),
        weights=dist.weights(max_qps, len(ranges)),
    )
