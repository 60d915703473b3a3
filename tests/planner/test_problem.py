"""Batch caps and the capacity model: one meaning for the batch a replica forms (planner, plan, simulator)."""

from __future__ import annotations

import numpy as np
import pytest

from cascadeserve.cascade import Cascade
from cascadeserve.plan import SLO, Device, fixed_plan
from cascadeserve.planner import Planner, default_batch_caps
from cascadeserve.planner.problem import best_batch, make_problem
from cascadeserve.planner.search import Candidate
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve
from cascadeserve.simulate import simulate
from cascadeserve.traces import poisson

# Per-sample cost 5.0, 4.7, 5.1, 5.3, 6.8, 9.4, 7.9 ms at batch 1..64: a small encoder on a CPU (tweets MiniLM-L3).
GROWING = {1: 5.0, 2: 9.4, 4: 20.3, 8: 42.6, 16: 109.3, 32: 301.1, 64: 508.1}


def _profile(curve: dict[int, float], *, max_batch: int | None = None, n: int = 400) -> Profile:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, n)
    scores = {"enc": rng.random((n, 2)) + np.eye(2)[labels]}
    model = ModelProfile("enc", 10.0, RuntimeCurve.from_mapping(curve), max_batch)
    return Profile.from_scores("growing", [model], labels, scores)


def _devices(n: int) -> list[Device]:
    return [Device(name=f"d{i}", memory_mb=100.0) for i in range(n)]


def test_the_default_cap_is_the_cheapest_batch_per_sample_within_half_the_slo() -> None:
    prof = _profile(GROWING)
    assert default_batch_caps(prof, 100.0) == {"enc": 2}  # 4.7 ms per sample at 2; larger batches cost more
    flat = _profile({1: 1.0, 8: 3.0, 64: 10.0})
    assert default_batch_caps(flat, 100.0) == {"enc": 64}  # cheapest at the largest profiled batch ...
    assert default_batch_caps(flat, 12.0) == {"enc": 32}  # ... unless it does not run within half the SLO (6 ms)
    assert default_batch_caps(flat, None, max_batch=16) == {"enc": 16}
    # past the largest profiled batch nothing is extrapolated unless the profile declares a larger max_batch
    assert default_batch_caps(_profile({1: 1.0, 8: 3.0, 64: 10.0}, max_batch=256), None) == {"enc": 256}
    assert default_batch_caps(_profile({1: 1.0, 8: 3.0, 64: 10.0}, max_batch=8), None) == {"enc": 8}
    assert best_batch(np.array([30.0, 50.0]), 10.0) == 1  # nothing fits: batch 1


def test_a_gear_whose_per_sample_cost_grows_never_forms_a_batch_above_its_cap() -> None:
    prof = _profile(GROWING)
    pl = Planner(n_ranges=2, seed=0).fit(prof, _devices(2), SLO(kind="p95_ms", value=100.0), 300.0)
    assert pl.plan_ is not None
    assert {gr.max_batch for g in pl.plan_.gears for gr in g.replicas} == {2}
    # overloaded far beyond what the plan was made for, batches stay at the cap ...
    res = simulate(prof, pl.plan_, poisson(600.0, 5.0, seed=1).arrivals, record_batches=True)
    sizes = [b.size for b in res.batches]
    assert max(sizes) == 2
    # ... where the same cascade without a cap takes the whole queue and the batches (and their cost) run away
    free = fixed_plan(prof, Cascade(("enc",), ()), _devices(2))
    sizes_free = [
        b.size for b in simulate(prof, free, poisson(600.0, 5.0, seed=1).arrivals, record_batches=True).batches
    ]
    assert max(sizes_free) > 16


def test_the_capacity_model_and_the_simulator_agree_on_the_batch_a_replica_forms() -> None:
    prof = _profile({1: 1.0, 8: 3.0, 64: 10.0})
    slo, devs = SLO(kind="p95_ms", value=40.0), _devices(1)
    planner = Planner(n_ranges=1, seed=0)
    problem = make_problem(prof, devs, slo, 1000.0, planner._options(prof), 1, "zipf")
    cap = problem.cap("enc")
    assert cap == 64 and problem.t_opt("enc") == pytest.approx(10.0 / 64 / 1000.0)
    cand = Candidate(Cascade(("enc",), ()), 0.5, 1.0, (1.0,))
    assert problem.stage_batches(cand, 500) == {"enc": 64.0}  # never more than the cap
    capacity, _ = problem.capacity_qps(cand)
    assert capacity == pytest.approx(6400.0)  # 64 samples per 10 ms
    plan = fixed_plan(prof, cand.cascade, devs, batch_caps={"enc": cap})
    # at 90 % of the modelled capacity the replica keeps up, forming batches up to the cap the model priced ...
    busy = simulate(prof, plan, poisson(0.9 * capacity, 3.0, seed=2).arrivals, record_batches=True)
    assert max(b.size for b in busy.batches) == cap and busy.percentile_ms(95) < 40.0
    # ... and 20 % above it a backlog builds (latency grows through the run)
    over = simulate(prof, plan, poisson(1.2 * capacity, 3.0, seed=2).arrivals, record_batches=True)
    lat = over.latency_s
    assert max(b.size for b in over.batches) == cap
    assert lat[-len(lat) // 10 :].mean() > 5 * lat[: len(lat) // 10].mean()


def test_the_plan_carries_each_models_cap_and_capacity_prices_it() -> None:
    prof = _profile(GROWING)
    # At the cap of 2, one device carries about 2 / 9.4 ms = 213 QPS; the batch of 64 (7.9 ms/sample) is never
    # priced, and neither is a linear extrapolation past 64.
    with pytest.raises(Exception, match="saturates model enc"):
        Planner(n_ranges=1).fit(prof, _devices(1), SLO(kind="p95_ms", value=2000.0), 240.0)
    pl = Planner(n_ranges=1).fit(prof, _devices(1), SLO(kind="p95_ms", value=2000.0), 150.0)
    assert pl.plan_ is not None and pl.plan_.gears[0].replicas[0].max_batch == 2


def test_fixed_caps_override_the_rule() -> None:
    prof = _profile({1: 1.0, 8: 3.0, 64: 10.0})
    pl = Planner(n_ranges=1, batch_caps={"enc": 8}).fit(prof, _devices(1), SLO(kind="p95_ms", value=40.0), 500.0)
    assert pl.plan_ is not None and pl.plan_.gears[0].replicas[0].max_batch == 8
    with pytest.raises(ValueError, match="batch caps"):
        Planner(batch_caps={"enc": 0})


def test_a_plan_with_audits_sizes_for_the_later_stages_they_run(toy_profile: Profile) -> None:
    """Online tuning audits a share f of the early exits: each later stage runs reach + f·(1 − reach) of the
    requests. The capacity model charges it, and the plan records f (serve --tune's default)."""
    slo, devs = SLO(kind="p95_ms", value=50.0), [Device(name="d0", memory_mb=1000.0)]
    cand = Candidate(Cascade(("m0", "m1", "m2"), (0.5, 0.5)), 0.9, 1.0, (1.0, 0.4, 0.1))
    plain = make_problem(toy_profile, devs, slo, 100.0, Planner(n_ranges=1)._options(toy_profile), 1, "zipf")
    audited = make_problem(
        toy_profile, devs, slo, 100.0, Planner(n_ranges=1, audit_fraction=0.1)._options(toy_profile), 1, "zipf"
    )
    assert audited.reach(cand) == pytest.approx((1.0, 0.46, 0.19)) and plain.reach(cand) == (1.0, 0.4, 0.1)
    assert audited.demand(cand, 100.0) == pytest.approx({"m0": 100.0, "m1": 46.0, "m2": 19.0})
    assert audited.work_opt(cand) > plain.work_opt(cand)
    assert audited.capacity_qps(cand)[0] < plain.capacity_qps(cand)[0]
    # a whole fit near capacity (SP4's simulations audit too): half the early exits audited leave no room for the
    # m1 -> m2 cascade at 1,000-2,000 QPS, so the planner gives up accuracy to carry the audit work
    fits = {f: Planner(n_ranges=2, seed=0, audit_fraction=f).fit(toy_profile, devs, slo, 2000.0) for f in (0.0, 0.5)}
    plans = {f: p.plan_ for f, p in fits.items()}
    assert plans[0.0] is not None and plans[0.5] is not None
    assert plans[0.0].audit_fraction == 0.0 and plans[0.5].audit_fraction == 0.5
    assert plans[0.0].gears[0].models == ("m1", "m2") and plans[0.5].gears[0].models == ("m2",)
    acc = {f: p.report_.plan_accuracy for f, p in fits.items() if p.report_ is not None}
    assert acc[0.5] < acc[0.0]
    with pytest.raises(ValueError, match="audit_fraction"):
        Planner(audit_fraction=1.5)
