"""The planner is never worse than a static cascade: where one cascade with fixed thresholds meets the SLO on N
devices, so does the planner's plan, at least as accurately (real HiGHS, the real simulator, small profiles)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cascadeserve.cascade import Cascade
from cascadeserve.errors import InfeasibleError
from cascadeserve.plan import SLO, Device
from cascadeserve.planner import Planner, search_cascades, static_cascades, static_plan
from cascadeserve.planner.static import replay_accuracy
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve
from cascadeserve.simulate import simulate
from cascadeserve.traces import poisson


def random_profile(seed: int, n_models: int, n: int = 300) -> Profile:
    """``n_models`` models of rising cost and accuracy with random runtimes; scores correlate with correctness."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    models, scores = [], {}
    for i in range(n_models):
        ms1 = float(rng.uniform(0.2, 1.0)) * (i + 1) ** 2
        ms64 = ms1 * float(rng.uniform(4.0, 40.0))
        models.append(ModelProfile(f"m{i}", 10.0, RuntimeCurve((1, 64), (ms1, ms64))))
        scores[f"m{i}"] = rng.random((n, 3)) + np.eye(3)[labels] * (i + 1) * float(rng.uniform(0.2, 0.5))
    return Profile.from_scores("rand", models, labels, scores, device="synthetic", source="tests/planner/test_static")


def devices(n: int) -> list[Device]:
    return [Device(name=f"dev{i}", memory_mb=100.0) for i in range(n)]


def best_static_replay(profile: Profile, n_dev: int, slo_ms: float, arrivals: np.ndarray) -> float | None:
    """The no-switching ablation's answer: the highest replay accuracy of a static cascade (its frontier picks and
    every model alone) that meets ``slo_ms`` on ``arrivals`` with ``n_dev`` devices; ``None`` when none does."""
    cands = static_cascades(search_cascades(profile)) + [Cascade((m,), ()) for m in profile.model_names]
    best = None
    for c in cands:
        plan = static_plan(profile, c, devices(n_dev), overhead_ms=0.0)
        assert plan is not None
        res = simulate(profile, plan, arrivals)
        if res.percentile_ms(95) <= slo_ms and (best is None or res.accuracy > best):
            best = res.accuracy
    return best


def test_replay_accuracy_is_the_simulated_one() -> None:
    prof = random_profile(3, 3)
    arrivals = poisson(50.0, 10.0, seed=1).arrivals  # light load: every request answered
    for c in static_cascades(search_cascades(prof)):
        plan = static_plan(prof, c, devices(2), overhead_ms=0.0)
        assert plan is not None
        assert simulate(prof, plan, arrivals).accuracy == pytest.approx(replay_accuracy(prof, c, len(arrivals)))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    n_models=st.integers(2, 3),
    n_dev=st.integers(1, 2),
    slo_ms=st.sampled_from([10.0, 30.0, 100.0]),
    load=st.floats(0.3, 1.5),
)
def test_the_planner_meets_the_slo_wherever_a_static_cascade_does(
    seed: int, n_models: int, n_dev: int, slo_ms: float, load: float
) -> None:
    prof = random_profile(seed, n_models)
    # the load: a fraction of what the most accurate model alone serves on the devices at its best batch
    top = prof.models[-1].runtime
    qps = load * n_dev * 64 / (float(top.ms_at(64)) / 1000.0)
    trace = poisson(qps, 2.0, seed=seed)
    arrivals = trace.arrivals
    static = best_static_replay(prof, n_dev, slo_ms, arrivals)
    planner = Planner(n_ranges=3, sim_requests=1500, trace_rounds=1, seed=seed)
    slo = SLO(kind="p95_ms", value=slo_ms)
    try:
        planner.fit(prof, devices(n_dev), slo, float(max(1, trace.max_qps)), check_arrivals=arrivals)
    except InfeasibleError:
        assert static is None
        return
    assert planner.plan_ is not None
    if static is None:
        return
    res = simulate(prof, planner.plan_, arrivals)
    assert res.percentile_ms(95) <= slo_ms
    assert res.accuracy >= static - 1e-12


def test_where_algorithm_1_finds_no_plan_on_one_device_the_static_cascade_is_the_plan() -> None:
    # Three models' worth of random profile, p95 ≤ 100 ms at 90 % of what m1 alone serves on one device: Algorithm 1
    # declares it infeasible, while m1 alone, work-conserving, meets it on the replay (the no-switching ablation).
    prof = random_profile(3, 2)
    qps = 0.9 * 64 / (float(prof.models[-1].runtime.ms_at(64)) / 1000.0)
    trace = poisson(qps, 2.0, seed=3)
    static = best_static_replay(prof, 1, 100.0, trace.arrivals)
    assert static is not None
    planner = Planner(n_ranges=3, sim_requests=1500, trace_rounds=1, seed=3)
    planner.fit(prof, devices(1), SLO(kind="p95_ms", value=100.0), float(trace.max_qps), check_arrivals=trace.arrivals)
    assert planner.plan_ is not None and planner.report_ is not None
    assert [g.models for g in planner.plan_.gears] == [("m1",)]
    assert planner.report_.static_cascade.startswith("static cascade m1: Algorithm 1 found no plan")
    assert planner.plan_.notes["static_cascade"] == planner.report_.static_cascade
    res = simulate(prof, planner.plan_, trace.arrivals)
    assert res.percentile_ms(95) <= 100.0 and res.accuracy == static


def test_without_a_gear_plan_each_range_still_takes_the_best_static_cascade_that_holds_there() -> None:
    """Two real LLMs at 6.6 QPS on 2 CPU devices (the committed profile): Algorithm 1 finds no plan, and one static
    cascade for every load would escalate as little at 1 QPS as at the peak. Each range instead takes the most
    accurate static cascade that holds at its top: more escalations at low load, fewer near the peak."""
    from pathlib import Path

    from cascadeserve.profile import load_profile

    prof = load_profile(Path(__file__).resolve().parents[2] / "profiles" / "llm-sst2")
    slo = SLO(kind="p95_ms", value=2500.0)
    hw = [Device(name=f"d{i}", memory_mb=16000.0) for i in range(2)]
    planner = Planner(n_ranges=8).fit(prof, hw, slo, 6.6)
    plan = planner.plan_
    assert plan is not None
    assert "Algorithm 1 found no plan" in plan.notes["static_cascade"]
    runs = [plan.gears[lo] for lo, _ in plan.gear_runs]
    assert len(runs) >= 2  # gears, not one static cascade
    assert runs[0].models == ("smollm2-135m", "gemma3-270m")  # at the base load the small model escalates
    assert plan.gears[-1].models == ("smollm2-135m",)  # at the peak it answers alone
    accuracy = [replay_accuracy(prof, Cascade(g.models, g.thresholds), 0) for g in plan.gears]
    assert accuracy == sorted(accuracy, reverse=True)  # fewer prompts escalate as the load rises, never more
    assert all(g.predicted_p95_ms is not None and g.predicted_p95_ms <= slo.value for g in plan.gears)
    assert accuracy[0] > accuracy[-1]  # the base load's gear is more accurate than the peak's
    assert plan.qps_min_arrivals == planner.qps_min_arrivals  # the meter its ranges were judged with
    # the plan as served holds the SLO at the base load and at the peak, every request answered
    for qps in (runs[0].qps_high, plan.max_qps):
        arrivals = poisson(qps, 60.0, seed=1).arrivals
        sim = simulate(prof, plan, arrivals)
        assert sim.completed == len(arrivals)
        assert sim.percentile_ms(95) <= slo.value
