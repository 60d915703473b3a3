"""Re-planning when the load drifts: the per-tick scaling, when to re-plan, and whether a new plan is better.

:mod:`cascadeserve.policy.drift` has the statistics (appendix C.2's least-squares factor, the KS distance, the
detector). This module turns them into the decisions the producer applies every tick, identically in the simulator
(:mod:`cascadeserve.simulate.replan`) and in the runtime (:mod:`cascadeserve.runtime.replanner`):

* :class:`LoadDrift` takes each tick's measured QPS. Every ``check_every`` ticks (1 s at the default 100 ms tick),
  once ``min_ticks`` are measured, it re-estimates the **scale factor** (when scaling applies, see
  :func:`scaling_applies`: plans with an accuracy SLO, as in the paper) from the window's QPS against the plan's
  distribution, and asks the detector whether the window's distribution over the plan's ranges is more than
  ``threshold`` (KS distance) away from the plan's weights. The factor it returns is what the gear selector
  multiplies measured QPS by *from the next tick on*; before the first estimate it is the plan's own ``qps_scale``.
* A plan's distribution is :func:`planned_weights`: the ``qps_weights`` note the planner writes, or, for a plan
  without one, Zipf over its gears with the exponent in its ``qps_dist`` note (1.1, the planner's default).
* After a background re-plan, :func:`judge_replan` compares the new plan's predicted objective with the current
  plan's under the measured QPS (:func:`plan_score`) and says ``swap`` (``--replan auto``), ``notify``
  (``--replan notify``: expose it, keep serving) or ``keep`` (not better).
* :func:`plan_in_force` is the swap rule: a request is served to the end by the plan in force when it was
  admitted (the runtime's generations; the simulator's segments), so nothing in flight changes routing mid-way.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from cascadeserve.plan import GearPlan
from cascadeserve.policy.drift import DriftDecision, LoadDriftDetector, scale_factor
from cascadeserve.policy.qps import check_qps

__all__ = [
    "REPLAN_MODES",
    "DriftSettings",
    "LoadDrift",
    "LoadTick",
    "PlanScore",
    "ReplanMode",
    "ReplanVerdict",
    "judge_replan",
    "plan_in_force",
    "plan_score",
    "planned_weights",
    "scaling_applies",
    "weight_quantiles",
]

ReplanMode = Literal["auto", "notify", "off"]
REPLAN_MODES: tuple[ReplanMode, ...] = ("auto", "notify", "off")
_ZIPF_NOTE = re.compile(r"zipf \(exponent ([0-9.eE+-]+)\)")


def planned_weights(plan: GearPlan) -> np.ndarray:
    """The time weight per gear range that ``plan`` was made for (its ``qps_weights`` note; else Zipf)."""
    n = len(plan.gears)
    note = plan.notes.get("qps_weights")
    if note:
        try:
            w = np.array([float(x) for x in note.split(",")], dtype=np.float64)
        except ValueError:
            w = np.zeros(0)
        if len(w) == n and np.all(w >= 0) and w.sum() > 0:
            return np.asarray(w / w.sum())
    exponent = 1.1
    m = _ZIPF_NOTE.search(plan.notes.get("qps_dist", ""))
    if m:
        exponent = float(m.group(1))
    w = np.arange(1, n + 1, dtype=np.float64) ** -exponent
    return np.asarray(w / w.sum())


def weight_quantiles(weights: np.ndarray, max_qps: float, n: int = 999) -> np.ndarray:
    """``n`` evenly spaced quantiles of the QPS distribution with ``weights`` over equal ranges of [0, max_qps],
    uniform inside each range: the "planned QPS samples" that :func:`~cascadeserve.policy.drift.scale_factor`
    matches the measured ones against."""
    w = np.asarray(weights, dtype=np.float64)
    cdf = np.concatenate([[0.0], np.cumsum(w / w.sum())])
    edges = np.linspace(0.0, float(max_qps), len(w) + 1)
    ps = (np.arange(n, dtype=np.float64) + 0.5) / n
    return np.asarray(np.interp(ps, cdf, edges))


def scaling_applies(plan: GearPlan) -> bool:
    """Appendix C.2 scales measured QPS for accuracy SLOs only: a latency-SLO plan meets its SLO at any QPS, and
    scaling its QPS down would pick gears too slow for the real load."""
    return plan.slo is not None and plan.slo.kind == "accuracy"


@dataclass(frozen=True, slots=True)
class LoadTick:
    """One tick's load decisions: the QPS scale from the next tick on, and a drift decision (or none)."""

    scale: float
    drift: DriftDecision | None


@dataclass(frozen=True, slots=True)
class DriftSettings:
    """How drift is watched (``serve --replan-*`` options); times are in producer ticks."""

    mode: ReplanMode = "off"
    window_ticks: int = 36_000  # one hour at 100 ms
    min_ticks: int = 3_000  # five minutes before the first estimate or decision
    threshold: float = 0.25  # KS distance between measured and planned range weights
    cooldown_s: float = 600.0  # after a drift decision, the next one waits this long
    check_every: int = 10  # ticks between estimates and decisions (1 s at 100 ms)
    scaling: bool | None = None  # None: scaling_applies(plan)

    @classmethod
    def from_seconds(
        cls,
        mode: ReplanMode,
        *,
        tick_ms: float,
        window_s: float,
        min_s: float,
        threshold: float,
        cooldown_s: float,
        check_s: float = 1.0,
        scaling: bool | None = None,
    ) -> DriftSettings:
        """Settings from seconds (the CLI's units) at a plan's producer tick."""
        tick = tick_ms / 1000.0
        return cls(
            mode=mode,
            window_ticks=max(1, round(window_s / tick)),
            min_ticks=max(1, round(min_s / tick)),
            threshold=threshold,
            cooldown_s=cooldown_s,
            check_every=max(1, round(check_s / tick)),
            scaling=scaling,
        )


class LoadDrift:
    """The producer's load-drift state (module docstring): feed it every tick's QPS, apply what it returns."""

    __slots__ = ("_planned_q", "_ticks", "detector", "scale", "scaling", "settings")

    def __init__(self, plan: GearPlan, settings: DriftSettings | None = None) -> None:
        s = settings or DriftSettings()
        if s.check_every < 1:
            raise ValueError("check_every must be at least 1 tick")
        self.settings = s
        self.detector = LoadDriftDetector(
            planned_weights(plan),
            plan.max_qps,
            mode=s.mode,
            window_ticks=s.window_ticks,
            min_ticks=s.min_ticks,
            threshold=s.threshold,
            cooldown_s=s.cooldown_s,
        )
        self.scaling = scaling_applies(plan) if s.scaling is None else s.scaling
        self.scale = plan.qps_scale
        self._planned_q = weight_quantiles(self.detector.planned, plan.max_qps)
        self._ticks = 0

    def window(self) -> np.ndarray:
        """The measured QPS of the ticks in the window, oldest first."""
        return self.detector.samples()

    def tick(self, qps: float, now: float) -> LoadTick:
        """Tick ``now`` measured ``qps``: the scale to use from the next tick on, and whether the load drifted."""
        det = self.detector
        det.observe(qps)
        self._ticks += 1
        drift = None
        if self._ticks % self.settings.check_every == 0:
            if self.scaling and self._ticks >= det.min_ticks:
                self.scale = scale_factor(self.window(), self._planned_q)
            drift = det.decide(now)
        return LoadTick(self.scale, drift)

    def scale_for(self, plan: GearPlan) -> float:
        """The scale ``plan`` would be served with on the current window (its own when scaling does not apply)."""
        on = scaling_applies(plan) if self.settings.scaling is None else self.settings.scaling
        if not on or self._ticks < self.detector.min_ticks:
            return plan.qps_scale
        return scale_factor(self.window(), weight_quantiles(planned_weights(plan), plan.max_qps))

    def judge(self, current: GearPlan, new: GearPlan) -> ReplanVerdict:
        """Compare a finished re-plan with the plan in force on the window's measured QPS (:func:`judge_replan`),
        each looked up with the scale it would be served with."""
        q = self.window()
        cur = plan_score(current, q, self.scale if self.scaling else current.qps_scale)
        nxt = plan_score(new, q, self.scale_for(new))
        return judge_replan(self.settings.mode, current, cur, new, nxt)

    def replanned(self, plan: GearPlan) -> None:
        """``plan`` is in force now: measure drift against its distribution, and re-estimate the scale for it."""
        self.detector.replanned(planned_weights(plan))
        self.detector.max_qps = plan.max_qps
        self._planned_q = weight_quantiles(self.detector.planned, plan.max_qps)
        self.scaling = scaling_applies(plan) if self.settings.scaling is None else self.settings.scaling
        self.scale = plan.qps_scale
        if self.scaling and self._ticks >= self.detector.min_ticks:
            self.scale = scale_factor(self.window(), self._planned_q)


@dataclass(frozen=True, slots=True)
class PlanScore:
    """A plan's predicted objective under measured QPS samples (each sample: a tick's measured QPS)."""

    accuracy: float  # mean predicted accuracy of the gears the samples select
    p95_ms: float  # mean predicted p95 of those gears
    overload: float  # fraction of samples past the load their gear was checked at (policy.qps.check_qps)
    scale: float  # the QPS scale the samples were looked up with

    def describe(self) -> str:
        return f"accuracy {self.accuracy:.4f}, p95 {self.p95_ms:.1f} ms, overload {self.overload:.1%}"


def plan_score(plan: GearPlan, qps: np.ndarray, scale: float = 1.0) -> PlanScore:
    """Score ``plan`` on measured ``qps`` samples looked up with ``scale`` (the gear selector's lookup).

    A sample is overloaded when it measures more than the load its gear was checked at: the range's top plus the
    meter's noise there (:func:`~cascadeserve.policy.qps.check_qps`, what SP4 simulated). Without the noise
    allowance a scale a little under 1 (appendix C.2) counted every reading near a range's top, and a steady load
    read as 100 % overloaded under any plan, which left the verdict to chance."""
    q = np.asarray(qps, dtype=np.float64)
    if q.size == 0:
        q = np.zeros(1)
    highs = np.array([g.qps_high for g in plan.gears])
    tick_s, k, last = plan.tick_ms / 1000.0, plan.qps_min_arrivals, len(highs) - 1
    held = np.array([check_qps(h, tick_s, top=i == last, min_arrivals=k) for i, h in enumerate(highs)])
    idx = np.minimum(np.searchsorted(highs, q * scale, side="right"), last)
    acc = np.array([math.nan if g.predicted_accuracy is None else g.predicted_accuracy for g in plan.gears])
    p95 = np.array([math.nan if g.predicted_p95_ms is None else g.predicted_p95_ms for g in plan.gears])
    over = float(np.mean(q > held[idx] + 1e-9))
    return PlanScore(float(acc[idx].mean()), float(p95[idx].mean()), over, scale)


@dataclass(frozen=True, slots=True)
class ReplanVerdict:
    """What to do with a finished re-plan: ``swap`` it in, ``notify`` the operator, or ``keep`` the current one."""

    action: Literal["swap", "notify", "keep"]
    current: PlanScore
    new: PlanScore
    reason: str


def _key(plan: GearPlan, s: PlanScore) -> tuple[float, ...]:
    """Larger is better, in this order under either SLO: **less overload first** (a tick whose gear was planned for
    less QPS than it measures queues without bound, so the gear's predicted p95 is not held, and its predicted
    accuracy is moot; no serving engineer trades that for a better objective), then the SLO's own order: under a
    latency SLO, the accuracy; under an accuracy SLO, meeting it, then a lower p95 (when it is met) or a higher
    accuracy (when it is not)."""
    over = -round(s.overload, 3)
    if plan.slo is not None and plan.slo.kind == "accuracy":
        meets = 1.0 if s.accuracy >= plan.slo.value - 1e-9 else 0.0
        return (over, meets, -round(s.p95_ms, 3) if meets else s.accuracy)
    return (over, round(s.accuracy, 6))


def judge_replan(mode: ReplanMode, current: GearPlan, cur: PlanScore, new: GearPlan, nxt: PlanScore) -> ReplanVerdict:
    """Is ``new`` (scored ``nxt``) better than ``current`` (scored ``cur``) on the measured load, and what then?"""
    if any(math.isnan(x) for x in (cur.accuracy, cur.p95_ms, nxt.accuracy, nxt.p95_ms)):
        return ReplanVerdict("keep", cur, nxt, "a plan lacks predicted accuracy or p95: cannot compare")
    better = _key(current, nxt) > _key(current, cur)
    if not better:
        return ReplanVerdict("keep", cur, nxt, f"not better ({nxt.describe()} vs {cur.describe()})")
    why = f"better ({nxt.describe()} vs {cur.describe()})"
    if mode == "auto":
        return ReplanVerdict("swap", cur, nxt, why)
    return ReplanVerdict("notify" if mode == "notify" else "keep", cur, nxt, why)


def plan_in_force(swap_times: Sequence[float], admitted_at: float) -> int:
    """Which plan serves a request admitted at ``admitted_at``, to its end: the index of the last swap at or before
    it (0: the initial plan). A swap at ``t`` takes the arrivals from ``t`` on; earlier ones finish under the old."""
    return bisect.bisect_right(list(swap_times), admitted_at)
