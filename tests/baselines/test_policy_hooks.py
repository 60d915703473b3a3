"""The AIMD batch limit and the gear schedule: exact decisions, and the simulator driving them."""

from __future__ import annotations

import pytest
from tests.baselines.tiny import tiny_profile

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.policy import AimdBatchLimit, GearSchedule
from cascadeserve.simulate import simulate
from cascadeserve.traces import constant


def test_aimd_trajectory() -> None:
    a = AimdBatchLimit(0.010, step=2, backoff=0.5, start=1, ceiling=6)
    assert a.limit(3) == 1
    assert [a.observe(3, 0.005).limit for _ in range(4)] == [3, 5, 6, 6]
    d = a.observe(3, 0.020)
    assert (d.limit, d.increased) == (3, False)
    assert a.limit(0) == 1  # replicas are independent
    assert a.observe(3, 0.5).limit == 1
    assert a.observe(3, 0.5).limit == 1  # never below 1


def test_aimd_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError):
        AimdBatchLimit(0.0)
    with pytest.raises(ValueError):
        AimdBatchLimit(0.01, backoff=1.0)


def test_gear_schedule_holds_last_entry() -> None:
    s = GearSchedule([0, 1, 1, 0])
    assert [s.gear_at(t) for t in (-1, 0, 1, 3, 10)] == [0, 0, 1, 0, 0]
    with pytest.raises(ValueError):
        GearSchedule([])


def test_simulator_caps_batches_at_the_aimd_limit() -> None:
    prof = tiny_profile()
    plan = fixed_plan(prof, Cascade(("slow",), ()), [Device(name="d0", memory_mb=100)])
    arr = constant(400, 2.0, arrival="uniform").arrivals  # 2x overload: queues are long
    free = simulate(prof, plan, arr, record_batches=True)
    limited = simulate(prof, plan, arr, record_batches=True, batch_limit=AimdBatchLimit(0.02, step=1, backoff=0.5))
    assert max(b.size for b in free.batches) > 40
    # a batch of the slow model takes 5 ms per sample, so the 20 ms target keeps batches at or below 4 + one step
    assert max(b.size for b in limited.batches) <= 5
    assert limited.completed == len(arr)
