"""The simulator with load-drift scaling and plan swaps: when the swap happens, who serves what, nothing lost."""

from __future__ import annotations

import numpy as np
import pytest

from cascadeserve.cascade import Cascade
from cascadeserve.plan import SLO, Device, GearPlan, fixed_plan
from cascadeserve.policy import PlanTables
from cascadeserve.policy.replan import DriftSettings
from cascadeserve.policy.tuning import OnlineTuning
from cascadeserve.profile import Profile
from cascadeserve.simulate import simulate
from cascadeserve.simulate.replan import simulate_replanning


def _plan(profile: Profile, models: tuple[str, ...], acc: float) -> GearPlan:
    p = fixed_plan(profile, Cascade(models, (0.5,) * (len(models) - 1)), (Device(name="d0", memory_mb=1000),))
    gears = tuple(
        p.gears[0].model_copy(
            update={"qps_low": 25.0 * i, "qps_high": 25.0 * (i + 1), "predicted_accuracy": acc, "predicted_p95_ms": 5}
        )
        for i in range(4)
    )
    return p.model_copy(
        update={"gears": gears, "slo": SLO(kind="p95_ms", value=50), "notes": {"qps_weights": "0.7,0.2,0.05,0.05"}}
    )


def test_a_drift_swaps_the_plan_and_every_request_is_answered_once(toy_profile: Profile) -> None:
    old, new = _plan(toy_profile, ("m0",), 0.6), _plan(toy_profile, ("m0", "m1"), 0.7)
    arr = np.sort(np.random.default_rng(1).uniform(0.0, 20.0, 1600))  # ~80 QPS: range 3, far from 0.7/0.2/...
    calls: list[np.ndarray] = []

    def replanner(weights: np.ndarray, current: GearPlan) -> GearPlan:
        calls.append(weights)
        assert current is old
        return new

    s = DriftSettings(mode="auto", window_ticks=50, min_ticks=20, threshold=0.3, cooldown_s=1000.0, check_every=10)
    run = simulate_replanning(toy_profile, old, arr, settings=s, replanner=replanner, delay_s=3.0)
    # the first check at tick 20 (2.0 s) drifts; the re-plan is ready 3 s later, at the tick of 5.0 s
    assert len(calls) == 1 and run.swap_times == [pytest.approx(5.0)]
    assert run.events[0].started == pytest.approx(2.0) and run.events[0].verdict is not None
    assert run.events[0].verdict.action == "swap"
    r = run.result
    assert r.unanswered == 0 and np.all(np.isfinite(r.finish)) and np.all(r.finish >= r.arrivals)
    before = arr < 5.0
    assert np.all(run.plan_of[before] == 0) and np.all(run.plan_of[~before] == 1)
    m1 = toy_profile.index("m1")
    assert not np.any(r.answer_row[before] == m1)  # the old plan's requests finish on its one-model cascade
    assert np.any(r.answer_row[~before] == m1)
    assert len(r.tick_times) == 200 and np.all(np.diff(r.tick_times) > 0)


def test_off_is_the_plain_simulation(toy_profile: Profile) -> None:
    plan = _plan(toy_profile, ("m0", "m1"), 0.7)
    arr = np.sort(np.random.default_rng(2).uniform(0.0, 10.0, 700))

    def never(weights: np.ndarray, current: GearPlan) -> GearPlan:
        raise AssertionError("off never re-plans")

    run = simulate_replanning(
        toy_profile, plan, arr, settings=DriftSettings(mode="off", min_ticks=5, check_every=5), replanner=never
    )
    plain = simulate(toy_profile, plan, arr)
    assert run.swap_times == [] and np.array_equal(run.result.finish, plain.finish)
    assert np.array_equal(run.result.answer_row, plain.answer_row)


def test_a_failed_or_worse_replan_keeps_the_plan(toy_profile: Profile) -> None:
    old, worse = _plan(toy_profile, ("m0", "m1"), 0.7), _plan(toy_profile, ("m0",), 0.6)
    arr = np.sort(np.random.default_rng(3).uniform(0.0, 12.0, 1000))
    s = DriftSettings(mode="auto", window_ticks=50, min_ticks=20, threshold=0.3, cooldown_s=4.0, check_every=10)
    run = simulate_replanning(toy_profile, old, arr, settings=s, replanner=lambda w, p: worse, delay_s=1.0)
    assert run.swap_times == [] and run.events and all(e.verdict and e.verdict.action == "keep" for e in run.events)
    failed = simulate_replanning(toy_profile, old, arr, settings=s, replanner=lambda w, p: None, delay_s=1.0)
    assert failed.swap_times == [] and failed.events and all(e.verdict is None for e in failed.events)
    assert failed.result.unanswered == 0


def test_with_tuning_each_plan_in_force_runs_its_own_tuner(toy_profile: Profile) -> None:
    old, new = _plan(toy_profile, ("m0", "m1"), 0.6), _plan(toy_profile, ("m0", "m1"), 0.7)
    new = new.model_copy(update={"gears": tuple(g.model_copy(update={"thresholds": (0.4,)}) for g in new.gears)})
    arr = np.sort(np.random.default_rng(4).uniform(0.0, 20.0, 1600))
    rows = {m: toy_profile.index(m) for m in toy_profile.model_names}
    built: list[GearPlan] = []

    def tuning_for(p: GearPlan) -> OnlineTuning:
        built.append(p)
        # target 0: every periodic re-tune may trade accuracy for work, so each segment's tuner acts
        return OnlineTuning.for_plan(
            PlanTables(p, rows), toy_profile, target=0.0, audit_fraction=0.5, period_s=1.0, min_records=20
        )

    s = DriftSettings(mode="auto", window_ticks=50, min_ticks=20, threshold=0.3, cooldown_s=1000.0, check_every=10)
    run = simulate_replanning(
        toy_profile, old, arr, settings=s, replanner=lambda w, p: new, delay_s=3.0, tuning_for=tuning_for
    )
    assert run.swap_times == [pytest.approx(5.0)] and built == [old, new]  # one fresh tuner per plan in force
    r = run.result
    assert r.unanswered == 0 and np.all(r.finish >= r.arrivals)
    at = [c.at for c in r.threshold_changes]
    assert at == sorted(at) and any(t < 5.0 for t in at) and any(t >= 5.0 for t in at)  # times on the run's clock
    # the new plan's tuner starts from the new plan's thresholds, not from where the old one's tuner left off
    first_new = next(c for c in r.threshold_changes if c.at >= 5.0)
    assert first_new.old == new.gears[first_new.gear].thresholds
