"""Replays and planner fits remembered while a cost grid runs: the same answers as computing them, fewer runs."""

from __future__ import annotations

from pathlib import Path

from tests.baselines.tiny import workload

from cascadeserve.baselines import DynBa, NoSwitching
from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device
from cascadeserve.planner import search_cascades, static_cascades, static_plan
from cascadeserve.profile import load_profile
from cascadeserve.simulate import memo, simulate
from cascadeserve.traces import build_trace, constant

ROOT = Path(__file__).resolve().parents[2]


def test_a_remembered_replay_is_the_simulated_one_and_a_repeat_is_not_simulated() -> None:
    w = workload(constant(400, 3.0), lats=(100.0,), accs=(0.9,))
    dep = DynBa().deploy(w, 2, {"model": "slow", "batching": "min_queue=1"})
    assert dep is not None
    res = simulate(dep.profile, dep.plan, w.trace.arrivals)
    before = memo.stats()
    with memo.remembering() as store:
        first = memo.replay(dep.profile, dep.plan, w.trace.arrivals)
        second = memo.replay(dep.profile, dep.plan, w.trace.arrivals)
        assert len(store) == 1
    after = memo.stats()
    assert first == second == (res.percentile_ms(95), res.accuracy)
    assert after["misses"] - before["misses"] == 1 and after["hits"] - before["hits"] == 1
    # another plan (one device instead of two) is another key
    other = DynBa().deploy(w, 1, {"model": "slow", "batching": "min_queue=1"})
    assert other is not None
    with memo.remembering() as store:
        memo.replay(dep.profile, dep.plan, w.trace.arrivals)
        memo.replay(other.profile, other.plan, w.trace.arrivals)
        assert len(store) == 2


def test_dynba_and_no_switching_share_their_single_model_planner_fits() -> None:
    w = workload(constant(300, 2.0), lats=(100.0,), accs=(0.9,))
    cfg = {"model": "slow", "batching": "planner", "slo_ms": 100.0}
    alone = NoSwitching().evaluate(w, 2, {"models": ["slow"], "thresholds": [], **cfg})
    with memo.remembering():
        DynBa().evaluate(w, 2, cfg)
        hits = memo.stats()["hits"]
        shared = NoSwitching().evaluate(w, 2, {"models": ["slow"], "thresholds": [], **cfg})
        assert memo.stats()["hits"] >= hits + 2  # the fit, then its replay
    assert alone is not None and shared is not None
    assert (shared.p95_ms, shared.accuracy) == (alone.p95_ms, alone.accuracy)


def test_a_miss_proved_on_the_first_quarter_is_a_miss_of_the_full_replay() -> None:
    prof = load_profile(ROOT / "profiles" / "tweets-bert-v100")
    tr = build_trace("synthetic:spike:base=1500,peak=6000,at=3,width=4,duration=12", seed=0)
    proved = 0
    for cascade in static_cascades(search_cascades(prof)) + [Cascade((m,), ()) for m in prof.model_names]:
        for d in (1, 2):
            plan = static_plan(
                prof, cascade, [Device(name=f"d{i}", memory_mb=32500.0) for i in range(d)], overhead_ms=0
            )
            assert plan is not None
            for lat in (20.0, 50.0):
                if memo.late_on_prefix(prof, plan, tr.arrivals, lat):
                    proved += 1
                    assert simulate(prof, plan, tr.arrivals).percentile_ms(95) > lat
    assert proved > 0  # the spike overloads some of them within its first quarter
