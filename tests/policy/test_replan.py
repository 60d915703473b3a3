"""Load drift while serving: planned weights, the online scale, when a re-plan starts, and the swap verdict."""

from __future__ import annotations

import numpy as np
import pytest

from cascadeserve.cascade import Cascade
from cascadeserve.plan import SLO, Device, GearPlan, fixed_plan
from cascadeserve.policy.drift import scale_factor
from cascadeserve.policy.replan import (
    DriftSettings,
    LoadDrift,
    PlanScore,
    judge_replan,
    plan_in_force,
    plan_score,
    planned_weights,
    scaling_applies,
    weight_quantiles,
)
from cascadeserve.profile import Profile


def _plan(profile: Profile, accs: list[float], *, slo: SLO | None, notes: dict[str, str] | None = None) -> GearPlan:
    """A plan of len(accs) gears over [0, 10·len) QPS with the given predicted accuracies (p95 = 10·(1 - acc))."""
    base = fixed_plan(profile, Cascade(("m0",), ()), (Device(name="d0", memory_mb=1000),))
    g0 = base.gears[0]
    gears = tuple(
        g0.model_copy(
            update={
                "qps_low": 10.0 * i,
                "qps_high": 10.0 * (i + 1),
                "predicted_accuracy": a,
                "predicted_p95_ms": 10 * (1 - a),
            }
        )
        for i, a in enumerate(accs)
    )
    return base.model_copy(update={"gears": gears, "slo": slo, "notes": notes or {}})


def test_planned_weights_come_from_the_note_else_zipf(toy_profile: Profile) -> None:
    p = _plan(toy_profile, [0.9, 0.8, 0.7], slo=None, notes={"qps_weights": "1,1,2"})
    assert planned_weights(p).tolist() == [0.25, 0.25, 0.5]
    z = planned_weights(_plan(toy_profile, [0.9, 0.8], slo=None, notes={"qps_dist": "zipf (exponent 2)"}))
    assert z.tolist() == pytest.approx([0.8, 0.2])
    default = planned_weights(_plan(toy_profile, [0.9, 0.8], slo=None, notes={"qps_weights": "1,x"}))
    assert default[0] / default[1] == pytest.approx(2**1.1)


def test_weight_quantiles_invert_the_piecewise_uniform_cdf() -> None:
    q = weight_quantiles(np.array([0.5, 0.0, 0.5]), 30.0, 4)  # probabilities 1/8, 3/8, 5/8, 7/8
    assert q.tolist() == pytest.approx([2.5, 7.5, 22.5, 27.5])


def test_scaling_applies_to_accuracy_slo_plans_only(toy_profile: Profile) -> None:
    assert scaling_applies(_plan(toy_profile, [0.9], slo=SLO(kind="accuracy", value=0.8)))
    assert not scaling_applies(_plan(toy_profile, [0.9], slo=SLO(kind="p95_ms", value=50)))
    assert not scaling_applies(_plan(toy_profile, [0.9], slo=None))


def test_load_drift_estimates_the_scale_and_decides_on_schedule(toy_profile: Profile) -> None:
    plan = _plan(
        toy_profile, [0.9, 0.8, 0.7, 0.6], slo=SLO(kind="accuracy", value=0.8), notes={"qps_weights": "4,3,2,1"}
    )
    s = DriftSettings(mode="auto", window_ticks=50, min_ticks=20, threshold=0.3, cooldown_s=100.0, check_every=10)
    d = LoadDrift(plan, s)
    out = [d.tick(35.0, 0.1 * k) for k in range(1, 20)]
    assert all(t.scale == 1.0 and t.drift is None for t in out)  # 19 ticks: before min_ticks nothing is estimated
    t20 = d.tick(35.0, 2.0)  # the 20th tick is a check: all at 35 QPS (the last range), far from 4:3:2:1
    assert t20.drift is not None and t20.drift.action == "replan"
    assert t20.drift.measured == (0.0, 0.0, 0.0, 1.0) and t20.drift.distance == pytest.approx(0.9)
    expected = scale_factor(np.full(20, 35.0), weight_quantiles(np.array([0.4, 0.3, 0.2, 0.1]), 40.0))
    assert t20.scale == pytest.approx(expected) and expected < 1.0
    assert all(d.tick(35.0, 2.0 + 0.1 * k).drift is None for k in range(1, 30))  # cooling down
    # a latency-SLO plan is never scaled
    lat = LoadDrift(_plan(toy_profile, [0.9, 0.8], slo=SLO(kind="p95_ms", value=5)), s)
    assert [lat.tick(19.0, 0.1 * k).scale for k in range(1, 41)] == [1.0] * 40


def test_load_drift_follows_a_new_plan(toy_profile: Profile) -> None:
    zipf = _plan(toy_profile, [0.9, 0.8, 0.7, 0.6], slo=SLO(kind="accuracy", value=0.8))
    s = DriftSettings(mode="notify", window_ticks=40, min_ticks=10, threshold=0.3, cooldown_s=0.0, check_every=5)
    d = LoadDrift(zipf, s)
    decisions = [d.tick(35.0, 0.1 * k).drift for k in range(1, 11)]
    assert decisions[-1] is not None and decisions[-1].action == "notify"
    fitted = zipf.model_copy(update={"notes": {"qps_weights": "0,0,0,1"}})
    d.replanned(fitted)
    assert d.scale == pytest.approx(1.0, abs=0.05)  # the plan's own distribution: (almost) nothing to scale
    assert all(d.tick(35.0, 2 + 0.1 * k).drift is None for k in range(1, 20))


def test_plan_score_looks_gears_up_with_the_scale_and_counts_overload(toy_profile: Profile) -> None:
    plan = _plan(toy_profile, [0.9, 0.8, 0.7], slo=None)
    s = plan_score(plan, np.array([5.0, 15.0, 25.0, 35.0]))
    assert s.accuracy == pytest.approx((0.9 + 0.8 + 0.7 + 0.7) / 4) and s.overload == 0.25  # 35 > the top
    # ranges 0-10, 10-20, 20-30 at the one-tick meter: SP4 held the first at 10 + sqrt(10 / 0.1) = 20 QPS and the
    # second at 20 + sqrt(200) = 34.1 QPS; only a reading past that is overloaded
    half = plan_score(plan, np.array([15.0, 25.0]), 0.5)  # looked up as 7.5 and 12.5: gears 0 and 1
    assert half.accuracy == pytest.approx(0.85) and half.overload == 0.0  # within the meter's noise of the tops
    third = plan_score(plan, np.array([21.0, 35.0, 30.0]), 1 / 3)  # looked up as 7, 11.7 and 10: gears 0, 1, 1
    assert third.overload == pytest.approx(2 / 3)  # 21 > 20 on gear 0 and 35 > 34.1 on gear 1; 30 < 34.1 is held
    stretched = plan.model_copy(update={"qps_min_arrivals": 20})  # a 2 s window at 10 QPS: sd sqrt(5) = 2.2
    assert plan_score(stretched, np.array([15.0]), 0.5).overload == 1.0  # 15 > 12.2 on gear 0


def test_judge_replan_prefers_what_the_slo_asks_for(toy_profile: Profile) -> None:
    acc_slo = _plan(toy_profile, [0.9], slo=SLO(kind="accuracy", value=0.8))
    lat_slo = _plan(toy_profile, [0.9], slo=SLO(kind="p95_ms", value=5))
    miss, meet_slow, meet_fast = PlanScore(0.7, 1, 0, 1), PlanScore(0.85, 9, 0, 1), PlanScore(0.82, 3, 0, 1)
    assert judge_replan("auto", acc_slo, miss, acc_slo, meet_slow).action == "swap"
    assert judge_replan("auto", acc_slo, meet_slow, acc_slo, meet_fast).action == "swap"  # both meet: lower p95
    assert judge_replan("auto", acc_slo, meet_fast, acc_slo, meet_slow).action == "keep"
    assert judge_replan("notify", acc_slo, miss, acc_slo, meet_slow).action == "notify"
    assert judge_replan("off", acc_slo, miss, acc_slo, meet_slow).action == "keep"
    assert judge_replan("auto", lat_slo, meet_fast, lat_slo, meet_slow).action == "swap"  # latency SLO: accuracy
    overloaded = PlanScore(0.95, 3, 0.5, 1)
    assert judge_replan("auto", lat_slo, overloaded, lat_slo, meet_slow).action == "swap"  # overload first
    assert judge_replan("auto", lat_slo, miss, lat_slo, PlanScore(float("nan"), 1, 0, 1)).action == "keep"


def test_plan_in_force_is_the_plan_at_admission() -> None:
    assert [plan_in_force([10.0, 20.0], t) for t in (0.0, 9.99, 10.0, 19.0, 20.0, 99.0)] == [0, 0, 1, 1, 2, 2]
    assert plan_in_force([], 5.0) == 0


def test_judge_replan_puts_no_overload_first_under_either_slo(toy_profile: Profile) -> None:
    acc_slo = _plan(toy_profile, [0.9], slo=SLO(kind="accuracy", value=0.8))
    lat_slo = _plan(toy_profile, [0.9], slo=SLO(kind="p95_ms", value=5))
    meets_overloaded = PlanScore(0.85, 3, 0.2, 1)  # meets the accuracy SLO, but a fifth of the ticks overload
    misses_carries = PlanScore(0.75, 2, 0.0, 1)  # misses it, carries every tick
    # accuracy SLO: carrying the load outranks meeting the SLO, both ways round
    v = judge_replan("auto", acc_slo, meets_overloaded, acc_slo, misses_carries)
    assert v.action == "swap" and v.reason.startswith("better (accuracy 0.7500, p95 2.0 ms, overload 0.0%")
    assert judge_replan("auto", acc_slo, misses_carries, acc_slo, meets_overloaded).action == "keep"
    # less overload wins even when neither carries everything; equal overload falls back to the SLO's order
    assert judge_replan("auto", acc_slo, PlanScore(0.9, 1, 0.3, 1), acc_slo, PlanScore(0.7, 9, 0.1, 1)).action == "swap"
    assert judge_replan("auto", acc_slo, PlanScore(0.7, 1, 0.1, 1), acc_slo, PlanScore(0.9, 9, 0.1, 1)).action == "swap"
    assert (
        judge_replan("auto", acc_slo, PlanScore(0.9, 1, 0.1, 1), acc_slo, PlanScore(0.85, 2, 0.1, 1)).action == "keep"
    )
    # an overload difference under the rounding grain (0.1%) does not count: the SLO decides
    assert (
        judge_replan("auto", acc_slo, PlanScore(0.7, 1, 0.0, 1), acc_slo, PlanScore(0.9, 9, 0.0004, 1)).action == "swap"
    )
    # latency SLO: the same order (it was already overload first), then accuracy
    assert judge_replan("auto", lat_slo, meets_overloaded, lat_slo, misses_carries).action == "swap"
    assert judge_replan("auto", lat_slo, misses_carries, lat_slo, meets_overloaded).action == "keep"
    assert (
        judge_replan("auto", lat_slo, PlanScore(0.7, 1, 0.0, 1), lat_slo, PlanScore(0.71, 90, 0.0, 1)).action == "swap"
    )
