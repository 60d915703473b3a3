"""The planner end to end on small real and synthetic profiles."""

from __future__ import annotations

import numpy as np
import pytest

from cascadeserve.errors import InfeasibleError
from cascadeserve.plan import SLO, Device, Gear, GearPlan
from cascadeserve.planner import SUBMODULES, Planner
from cascadeserve.profile import Profile
from cascadeserve.simulate import simulate
from cascadeserve.traces import poisson


def _devices(n: int, mb: float) -> list[Device]:
    return [Device(name=f"dev{i}", memory_mb=mb) for i in range(n)]


def _one_gear(plan: GearPlan, g: Gear) -> GearPlan:
    top = Gear(**{**g.model_dump(), "qps_low": 0.0})
    return plan.model_copy(update={"gears": (top,)})


def _fit(profile: Profile, slo: SLO, qps: float, n_dev: int = 2, mb: float = 1000.0, ranges: int = 4) -> Planner:
    return Planner(n_ranges=ranges, seed=1).fit(profile, _devices(n_dev, mb), slo, qps)


def test_plan_is_feasible_in_simulation_for_every_range(real_profile: Profile) -> None:
    slo = SLO(kind="p95_ms", value=10.0)
    pl = _fit(real_profile, slo, 3000, n_dev=2, mb=4.0)
    plan = pl.plan_
    assert plan is not None and pl.report_ is not None
    plan.check_against(real_profile)  # memory fits
    assert pl.report_.converged and not pl.report_.hit_iteration_cap
    assert [(g.qps_low, g.qps_high) for g in plan.gears] == [(0, 750), (750, 1500), (1500, 2250), (2250, 3000)]
    for g in plan.gears:
        # fresh arrivals (another seed, longer) at the range's top: the SLO holds and the prediction is close
        res = simulate(real_profile, _one_gear(plan, g), poisson(g.qps_high, 3.0, seed=123).arrivals)
        p95 = res.percentile_ms(95)
        assert p95 <= slo.value
        assert g.predicted_p95_ms is not None and abs(p95 - g.predicted_p95_ms) <= 0.25 * g.predicted_p95_ms + 0.5
        assert g.predicted_accuracy is not None and 0 < g.predicted_accuracy <= 1


def test_the_whole_plan_meets_the_slo_on_a_bursty_trace(real_profile: Profile) -> None:
    from cascadeserve.traces import zipf

    slo = SLO(kind="p95_ms", value=10.0)
    plan = _fit(real_profile, slo, 3000, n_dev=2, mb=4.0).plan_
    assert plan is not None
    res = simulate(real_profile, plan, zipf(3000, 10.0, seed=5).arrivals)
    assert res.percentile_ms(95) <= slo.value
    assert res.completed == len(res.arrivals)


@pytest.mark.parametrize("qps", [2000.0, 6000.0])
def test_a_tighter_slo_never_yields_higher_accuracy(toy_profile: Profile, qps: float) -> None:
    accs = []
    for latency in (40.0, 20.0, 10.0, 6.0):
        try:
            pl = _fit(toy_profile, SLO(kind="p95_ms", value=latency), qps, n_dev=2, mb=350.0)
        except InfeasibleError:
            accs.append(-1.0)  # infeasible counts as the worst
            continue
        assert pl.report_ is not None
        accs.append(pl.report_.plan_accuracy)
    assert accs == sorted(accs, reverse=True)
    assert accs[0] > 0


def test_downgrades_go_to_high_load_first(toy_profile: Profile) -> None:
    pl = _fit(toy_profile, SLO(kind="p95_ms", value=15.0), 4000, n_dev=2, mb=350.0, ranges=5)
    assert pl.plan_ is not None
    acc = [g.predicted_accuracy for g in pl.plan_.gears]
    assert acc == sorted(acc, reverse=True)  # accuracy never rises with load


def test_accuracy_slo_is_met_with_time_weighted_accuracy(toy_profile: Profile) -> None:
    pl = _fit(toy_profile, SLO(kind="accuracy", value=0.8), 2000, n_dev=2, mb=1000.0)
    assert pl.plan_ is not None and pl.report_ is not None
    assert pl.report_.plan_accuracy >= 0.8
    assert pl.plan_.slo == SLO(kind="accuracy", value=0.8)
    assert pl.plan_.qps_scale == 1.0  # planned on the distribution it assumes
    w = np.arange(1, 5, dtype=float) ** -1.1
    acc = np.array([g.predicted_accuracy for g in pl.plan_.gears], dtype=float)
    assert float((w / w.sum()) @ acc) == pytest.approx(pl.report_.plan_accuracy, abs=1e-5)


def test_accuracy_slo_above_the_best_cascade_is_infeasible(toy_profile: Profile) -> None:
    with pytest.raises(InfeasibleError, match="most accurate cascade"):
        _fit(toy_profile, SLO(kind="accuracy", value=0.99999), 100)


def test_unreachable_latency_slo_names_the_saturated_model(toy_profile: Profile) -> None:
    pl = Planner(n_ranges=4)
    with pytest.raises(InfeasibleError) as info:
        pl.fit(toy_profile, _devices(1, 1000.0), SLO(kind="p95_ms", value=5.0), 50_000)
    msg = str(info.value)
    assert msg.startswith("p95 ≤ 5 ms is unreachable at")
    assert "on 1 device" in msg and "saturates model m0 at about" in msg and "add devices or relax the SLO" in msg
    assert pl.report_ is not None and not pl.report_.feasible and pl.report_.message == msg


def test_a_model_that_fits_nowhere_is_avoided(toy_profile: Profile) -> None:
    # m2 (300 MB) does not fit 250 MB devices: the plan must live without it
    pl = _fit(toy_profile, SLO(kind="p95_ms", value=50.0), 1000, n_dev=2, mb=250.0)
    assert pl.plan_ is not None
    assert all("m2" not in g.models for g in pl.plan_.gears)
    pl.plan_.check_against(toy_profile)


def test_report_counts_the_loop(toy_profile: Profile) -> None:
    pl = _fit(toy_profile, SLO(kind="p95_ms", value=30.0), 1000)
    rep = pl.report_
    assert rep is not None and rep.feasible and rep.converged
    assert set(rep.submodule_calls) == set(SUBMODULES) and set(rep.submodule_s) == set(SUBMODULES)
    assert rep.iterations == sum(rep.submodule_calls.values())
    assert rep.frontier_size >= 2 and rep.frontier_method == "exact"
    assert rep.planner_s > 0 and rep.simulations > 0
    assert pl.plan_ is not None and pl.plan_.alpha == 8.0


def test_same_seed_same_plan(toy_profile: Profile) -> None:
    a = _fit(toy_profile, SLO(kind="p95_ms", value=20.0), 3000).plan_
    b = _fit(toy_profile, SLO(kind="p95_ms", value=20.0), 3000).plan_
    assert a is not None and b is not None and a.to_json() == b.to_json()


# -- per-batch overhead ---------------------------------------------------------------------------------------------


def _flat_profile() -> Profile:
    """One model ``m``: 2 ms per sample at any batch size (no batching gain), 10 MB."""
    from cascadeserve.profile import ModelProfile, RuntimeCurve

    n = 100
    labels = np.zeros(n, dtype=np.int64)
    m = ModelProfile("m", 10.0, RuntimeCurve((1, 64), (2.0, 128.0)))
    return Profile("flat", (m,), np.arange(n), labels, labels[None, :].copy(), np.ones((1, n)))


def _fit_flat(overhead_ms: float | None) -> Planner:
    kw = {} if overhead_ms is None else {"batch_overhead_ms": overhead_ms}
    pl = Planner(n_ranges=2, seed=1, **kw)
    return pl.fit(_flat_profile(), _devices(1, 100.0), SLO(kind="p95_ms", value=20.0), 300.0)


def test_zero_overhead_plans_exactly_as_without_it(toy_profile: Profile) -> None:
    slo = SLO(kind="p95_ms", value=20.0)
    a = Planner(n_ranges=4, seed=1).fit(toy_profile, _devices(2, 1000.0), slo, 3000).plan_
    b = Planner(n_ranges=4, seed=1, batch_overhead_ms=0.0).fit(toy_profile, _devices(2, 1000.0), slo, 3000).plan_
    assert a is not None and b is not None and a.to_json() == b.to_json()
    assert b.batch_overhead_ms == 0.0


def test_negative_overhead_is_rejected() -> None:
    with pytest.raises(ValueError, match="batch_overhead_ms"):
        Planner(batch_overhead_ms=-0.1)


def test_a_planned_overhead_is_carried_and_simulated() -> None:
    prof = _flat_profile()
    base, with_ov = _fit_flat(None).plan_, _fit_flat(0.5).plan_
    assert base is not None and with_ov is not None
    assert base.batch_overhead_ms == 0.0 and with_ov.batch_overhead_ms == 0.5
    # same gears and triggers (work-conserving batching keeps up either way) ...
    assert [(g.qps_low, g.qps_high) for g in with_ov.gears] == [(0.0, 150.0), (150.0, 300.0)]
    assert all(rg.min_queue == 1 for g in with_ov.gears for rg in g.replicas)
    # ... but every predicted p95 includes the overhead's cost
    for g0, g1 in zip(base.gears, with_ov.gears, strict=True):
        assert g0.predicted_p95_ms is not None and g1.predicted_p95_ms is not None
        assert g1.predicted_p95_ms > g0.predicted_p95_ms
    for g in with_ov.gears:
        arrivals = poisson(g.qps_high, 10.0, seed=123).arrivals
        res = simulate(prof, _one_gear(with_ov, g), arrivals)
        p95 = res.percentile_ms(95)
        assert g.predicted_p95_ms is not None and p95 <= min(20.0, g.predicted_p95_ms + 0.5)
        # simulate charges the plan's overhead: the same gear without it is faster
        free = simulate(prof, _one_gear(with_ov, g).model_copy(update={"batch_overhead_ms": 0.0}), arrivals)
        assert free.percentile_ms(95) < p95


def test_a_large_overhead_makes_a_feasible_load_infeasible() -> None:
    assert _fit_flat(0.0).plan_ is not None  # 2 ms per sample: 300 QPS use 60 % of the device
    # With 6 ms per batch, the largest batch within half the SLO is 2 (2·2 + 6 = 10 ms ≤ 20 / 2), so a sample costs
    # at best (4 + 6) / 2 = 5 ms: one device carries 200 QPS, not 300.
    with pytest.raises(InfeasibleError, match=r"saturates model m at about 200 QPS"):
        _fit_flat(6.0)


@pytest.mark.parametrize(
    ("mb", "plan_models", "warnings"),
    [
        (1000.0, ("m1", "m2"), []),  # the best cascade on 1 GB is m1 > m2, by choice, not for memory
        (250.0, ("m1",), ["model m2 needs 300 MB and fits on no device (1 device of 250 MB): the plan leaves it out"]),
        (
            350.0,
            ("m2",),
            [
                "model m1 (200 MB) was left out of the plan for memory: the cascades that use it could not be placed "
                "on 1 device of 350 MB beside the other models the plan needs"
            ],
        ),
    ],
)
def test_models_memory_leaves_out_are_named(
    toy_profile: Profile, mb: float, plan_models: tuple[str, ...], warnings: list[str]
) -> None:
    # m0, m1, m2 need 100, 200 and 300 MB; the most accurate cascade uses all three
    pl = Planner(n_ranges=2, sim_requests=2000).fit(toy_profile, _devices(1, mb), SLO(kind="p95_ms", value=100), 50)
    assert pl.plan_ is not None and pl.report_ is not None
    assert tuple(sorted(pl.plan_.models())) == plan_models
    assert pl.report_.warnings == warnings
    assert pl.plan_.notes.get("warnings") == (" | ".join(warnings) or None)
