"""Each baseline is feasible where it should be on a tiny profile, and behaves as its paper description says."""

from __future__ import annotations

import numpy as np
from tests.baselines.tiny import tiny_profile, voters_profile, workload

from cascadeserve.baselines import (
    CascadeServe,
    CocktailPlus,
    DynBa,
    MSPlus,
    NoCascade,
    NoSwitching,
    Workload,
    ensemble_profile,
)
from cascadeserve.profile import Vote
from cascadeserve.profile.vote import vote_records
from cascadeserve.traces import constant, step


def test_dynba_with_enough_devices_meets_a_loose_slo() -> None:
    w = workload(constant(300, 3.0, arrival="uniform"))
    outs = DynBa().run(w, 4)  # 4 x 200 QPS of capacity for the slow model
    best = [o for o in outs if o.config["model"] == "slow" and o.meets(100.0, 0.9)]
    assert best, outs
    # one device (200 QPS of capacity) cannot carry 300 QPS of the slow model
    assert not any(o.meets(100.0, 0.9) for o in DynBa().run(w, 1))


def test_msplus_switches_to_the_cheaper_model_under_a_step() -> None:
    w = workload(step(50, 1500, 5.0, 10.0, arrival="uniform"), lats=(50.0,))
    ms = MSPlus()
    dep = ms.deploy(w, 1, {"slo_ms": 50.0, "headroom": 0.8, "aimd_target": 0.5})
    assert dep is not None and dep.aimd_target_s == 0.025
    res = dep.simulate(w.trace.arrivals)
    names = np.array(dep.profile.model_names)[res.answer_row]
    before = names[(w.trace.arrivals > 1.0) & (w.trace.arrivals < 4.5)]
    after = names[w.trace.arrivals > 6.0]
    assert (before == "slow").all()
    assert (after == "fast").mean() > 0.95
    # the tick admitted under the slow model right after the step leaves a backlog; once it drains, the SLO holds
    late = res.latency_s[w.trace.arrivals > 7.0]
    assert np.percentile(late, 95) < 0.050


def test_cocktail_scales_up_ahead_of_a_step_and_pays_for_it() -> None:
    w = workload(step(50, 600, 5.0, 10.0, arrival="uniform"))
    c = CocktailPlus()
    cfg = {"ensemble": "slow:majority", "slo_ms": 100.0, "utilisation": 0.9, "interval_s": 5.0}
    dep = c.deploy(w, 8, cfg)
    assert dep is not None and dep.schedule is not None and dep.provisioned is not None
    g = dep.schedule.gears
    assert g[10] == 0 and g[60] >= 3  # 1 device at 50 QPS, >= 4 at 600 QPS (200 QPS per device)
    # the new devices are paid for while they load (1 s + warm-up before t = 5 s)
    assert dep.provisioned[45] > g[45] + 1
    o = dep.outcome(dep.simulate(w.trace.arrivals))
    assert o.meets(100.0, 0.9)
    assert 1 < o.mean_devices < o.peak_devices <= 8


def test_ensemble_votes() -> None:
    prof = tiny_profile()
    assert (vote_records(prof, Vote(("slow",), "majority"))[0] == prof.predictions[1]).all()
    ens = ensemble_profile(prof)
    assert "slow:majority" in ens.model_names


def test_ablations_run() -> None:
    w = workload(constant(100, 2.0, arrival="uniform"), accs=(0.6,))
    assert any(o.meets(100.0, 0.6) for o in NoSwitching().run(w, 1))
    outs = NoCascade().run(w, 1)
    assert outs and all(o.accuracy >= 0.6 - 0.01 for o in outs)


def test_planner_based_systems_replay_their_plan_on_the_compared_trace() -> None:
    # every system that uses the gear planner gets the same trace check (nothing special-cased for cascadeserve)
    w = workload(step(50, 600, 2.0, 4.0, arrival="uniform"), lats=(50.0,), accs=(0.9,))
    deps = [
        CascadeServe().deploy(w, 4, {"slo": "p95_ms", "value": 50.0}),
        CascadeServe().deploy(w, 4, {"slo": "accuracy", "value": 0.9}),
        NoCascade().deploy(w, 4, {"slo": "p95_ms", "value": 50.0}),
        DynBa().deploy(w, 4, {"model": "slow", "batching": "planner", "slo_ms": 50.0}),
    ]
    for dep in deps:
        assert dep is not None
        note = dep.plan.notes["trace_check"]
        assert f"over {len(w.trace):,} requests" in note
        o = dep.outcome(dep.simulate(w.trace.arrivals))
        assert ("trace check met" in note) == o.meets(50.0, 0.0 if dep.plan.slo.kind == "p95_ms" else 0.9 + 5e-4)


def test_cascadeserve_plans_each_slo_with_its_vote_stage_and_without() -> None:
    prof = voters_profile()
    target = round(float(prof.accuracies.max()) + 0.03, 4)  # above every model alone
    # 400 requests: each of the 400 samples once, so a replay's accuracy is the profile's
    w = Workload(prof, constant(200, 2.0, arrival="uniform"), (100.0,), (target,), device_memory_mb=100.0)
    cs = CascadeServe()
    cfgs = cs.configs(w, 1)
    plain = [{"slo": "p95_ms", "value": 100.0}, {"slo": "accuracy", "value": target}]
    assert cfgs == [{**c, "votes": 1} for c in plain] + plain  # with the vote first
    voted = cs.deploy(w, 1, cfgs[1])
    assert voted is not None and any(Vote.parse(m, prof.model_names) for m in voted.plan.models())
    assert voted.outcome(voted.simulate(w.trace.arrivals)).meets(100.0, target)
    alone = cs.deploy(w, 1, cfgs[3])  # single models only: the target is out of reach
    assert alone is None or not alone.outcome(alone.simulate(w.trace.arrivals)).meets(100.0, target)
    assert NoCascade().configs(w, 1) == plain  # the ablation keeps single models
    assert CascadeServe().configs(workload(constant(100, 2.0)), 1)[0] == {"slo": "p95_ms", "value": 100.0}
