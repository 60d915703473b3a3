"""The simulator's Clipper hooks: cache hits answered on arrival (never batched), slowdowns, the plan's batching."""

from __future__ import annotations

import numpy as np
import pytest

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.policy.cache import PredictionCache
from cascadeserve.profile import Profile
from cascadeserve.profile.slowdown import Slowdown, Slowdowns
from cascadeserve.simulate import simulate

DEV = (Device(name="d0", memory_mb=1000),)


def test_a_hit_is_answered_at_arrival_and_never_batched(toy_profile: Profile) -> None:
    plan = fixed_plan(toy_profile, Cascade(("m0", "m1"), (0.5,)), DEV)
    arr = np.array([0.0, 0.0005, 0.01, 0.25, 0.35, 0.36])
    # sample 5 again before its first answer (m0 takes 1 ms): a miss; after it, in the same tick: a hit
    samples = np.array([5, 5, 5, 6, 6, 7])
    cache: PredictionCache[int] = PredictionCache(8)
    res = simulate(toy_profile, plan, arr, record_batches=True, cache=cache, samples=samples)
    assert res.cached is not None
    assert res.cached.tolist() == [False, False, True, False, True, False]
    assert res.finish[2] == arr[2] and res.finish[4] == arr[4]  # zero latency
    assert res.answer_row[2] == res.answer_row[0] and res.correct[4] == res.correct[3]
    assert sum(b.size for b in res.batches if b.row == 0) == 4  # the hits reached no queue
    assert (cache.hits, cache.misses, len(cache)) == (2, 4, 3)


def test_samples_pick_the_records(toy_profile: Profile) -> None:
    plan = fixed_plan(toy_profile, Cascade(("m0", "m1"), (0.5,)), DEV)
    arr = np.array([0.0, 0.3])
    res = simulate(toy_profile, plan, arr, samples=np.array([9, 9]))
    ref = simulate(toy_profile, plan, np.zeros(10))
    assert res.answer_row.tolist() == [ref.answer_row[9]] * 2
    with pytest.raises(ValueError, match="samples"):
        simulate(toy_profile, plan, arr, samples=np.array([0, toy_profile.n_samples]))


def test_a_slowdown_doubles_the_batches_that_start_after_it(toy_profile: Profile) -> None:
    plan = fixed_plan(toy_profile, Cascade(("m0",), ()), DEV)
    slow = Slowdowns.of(Slowdown("d0", at_s=0.5, factor=2.0))
    res = simulate(toy_profile, plan, [0.0, 1.0], record_batches=True, slowdowns=slow)
    before, after = res.batches
    assert before.end - before.start == pytest.approx(0.001)  # m0: 1 ms for one sample
    assert after.end - after.start == pytest.approx(0.002)
    assert slow.factor("d0", 0.49) == 1.0 and slow.factor("d1", 9.0) == 1.0


def test_the_plan_batching_field_caps_batches(toy_profile: Profile) -> None:
    plan = fixed_plan(toy_profile, Cascade(("m0",), ()), DEV)
    arr = np.linspace(0.0, 0.05, 400)  # 8000 QPS: whole-queue batches grow large
    free = simulate(toy_profile, plan, arr, record_batches=True)
    aimd = simulate(
        toy_profile, plan.model_copy(update={"batching": "aimd", "batch_target_ms": 3.0}), arr, record_batches=True
    )
    assert max(b.size for b in free.batches) > 16
    # m0 takes 3 ms at batch 8: AIMD keeps batches near it (one step past, then 10 % back)
    assert max(b.size for b in aimd.batches) <= 12
    assert aimd.batches[0].size == 1  # it starts at 1 and grows
