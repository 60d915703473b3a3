"""A workload's per-batch overhead reaches every system: its plans carry it and its own estimates include it."""

from __future__ import annotations

import dataclasses

import pytest
from tests.baselines.tiny import workload

from cascadeserve.baselines import CocktailPlus, DynBa, MSPlus, Workload, all_systems
from cascadeserve.traces import constant


def _with_overhead(w: Workload, ms: float) -> Workload:
    return dataclasses.replace(w, batch_overhead_ms=ms)


def test_every_system_deploys_plans_that_carry_the_overhead() -> None:
    w = _with_overhead(workload(constant(100, 2.0, arrival="uniform"), accs=(0.6,)), 0.7)
    assert w.with_trace(w.trace).batch_overhead_ms == 0.7
    for system in all_systems():
        deps = [system.deploy(w, 2, cfg) for cfg in system.configs(w, 2)[:3]]
        deps_ok = [d for d in deps if d is not None]
        assert deps_ok, system.name
        assert all(d.plan.batch_overhead_ms == 0.7 for d in deps_ok), system.name


def test_a_negative_overhead_is_rejected() -> None:
    with pytest.raises(ValueError, match="batch_overhead_ms"):
        _with_overhead(workload(constant(100, 2.0)), -1.0)


def test_dynba_needs_another_device_with_a_large_overhead() -> None:
    # slow: 5 ms per sample at any batch. Without overhead one device serves 200 QPS, so 2 carry 300 QPS. With 20 ms
    # per batch, the largest batch within half the 100 ms SLO is 6 (5·6 + 20 = 50 ms): 120 QPS per device, so 300 QPS
    # need 3 devices.
    w0 = workload(constant(300, 3.0, arrival="uniform"))
    w20 = _with_overhead(w0, 20.0)
    cfg = {"model": "slow", "batching": "planner", "slo_ms": 100.0}
    dep = DynBa().deploy(w0, 2, cfg)
    assert dep is not None and dep.plan.batch_overhead_ms == 0.0
    assert DynBa().deploy(w20, 2, cfg) is None
    dep = DynBa().deploy(w20, 3, cfg)
    assert dep is not None and dep.plan.batch_overhead_ms == 20.0


def test_msplus_and_cocktail_capacities_include_the_overhead() -> None:
    w0 = workload(constant(100, 2.0, arrival="uniform"), lats=(50.0,))
    ms_cfg = {"slo_ms": 50.0, "headroom": 0.8, "aimd_target": 0.5}
    # MS+: slow in batches within 25 ms: 5 (25 ms) -> 200 QPS x 0.8; with 5 ms per batch, 4 (20 + 5 ms) -> 160 x 0.8
    d0, d5 = MSPlus().deploy(w0, 1, ms_cfg), MSPlus().deploy(_with_overhead(w0, 5.0), 1, ms_cfg)
    assert d0 is not None and d5 is not None
    assert d0.notes["switch_qps"] == pytest.approx([160.0]) and d5.notes["switch_qps"] == pytest.approx([128.0])
    # Cocktail+: slow in batches within 50 ms: 10 -> 200 QPS per device; with 10 ms per batch, 8 (40 + 10) -> 160
    ck_cfg = {"ensemble": "slow:majority", "slo_ms": 100.0, "utilisation": 0.9, "interval_s": 5.0}
    c0 = CocktailPlus().deploy(w0, 2, ck_cfg)
    c10 = CocktailPlus().deploy(_with_overhead(w0, 10.0), 2, ck_cfg)
    assert c0 is not None and c10 is not None and c10.plan.batch_overhead_ms == 10.0
    assert c0.notes["capacity_qps_per_device"] == pytest.approx(200.0)
    assert c10.notes["capacity_qps_per_device"] == pytest.approx(160.0)
