"""Adaptive batching as a plan-level policy: the per-batch target and the limit each plan generation gets."""

from __future__ import annotations

import pytest

from cascadeserve.cascade import Cascade
from cascadeserve.plan import SLO, Device, GearPlan, fixed_plan
from cascadeserve.policy import AimdBatchLimit
from cascadeserve.policy.adaptive import batch_limit_for, batch_target_s
from cascadeserve.policy.quantile import QuantileBatchLimit
from cascadeserve.profile import Profile


def _plan(profile: Profile, **update: object) -> GearPlan:
    plan = fixed_plan(profile, Cascade(("m0", "m1"), (0.5,)), (Device(name="d0", memory_mb=1000),))
    return plan.model_copy(update=update)


def test_target_is_the_slo_over_twice_the_stages(toy_profile: Profile) -> None:
    plan = _plan(toy_profile, slo=SLO(kind="p95_ms", value=40.0), batching="aimd")
    assert batch_target_s(plan) == pytest.approx(0.010)  # 40 ms / (2 * 2 stages)
    assert batch_target_s(plan.model_copy(update={"batch_target_ms": 3.0})) == pytest.approx(0.003)
    with pytest.raises(ValueError, match="needs a latency target"):
        batch_target_s(_plan(toy_profile, batching="aimd"))


def test_each_call_builds_a_fresh_limit_of_the_plan_kind(toy_profile: Profile) -> None:
    plan = _plan(toy_profile, batch_target_ms=5.0)
    assert batch_limit_for(plan) is None  # "plan": the triggers alone
    a = batch_limit_for(plan, "aimd")
    assert isinstance(a, AimdBatchLimit) and a.target_s == pytest.approx(0.005) and a.backoff == 0.9
    assert a is not batch_limit_for(plan, "aimd")
    assert isinstance(batch_limit_for(plan.model_copy(update={"batching": "quantile"})), QuantileBatchLimit)


def test_the_plan_field_round_trips(toy_profile: Profile) -> None:
    plan = _plan(toy_profile, batching="quantile", batch_target_ms=4.0)
    back = GearPlan.from_json(plan.to_json())
    assert back.batching == "quantile" and back.batch_target_ms == 4.0
    with pytest.raises(Exception, match="batching"):
        GearPlan.model_validate({**plan.model_dump(), "batching": "fastest"})


def test_a_queue_never_waits_for_more_than_the_cap() -> None:
    from cascadeserve.policy.adaptive import capped_trigger
    from cascadeserve.policy.batching import BatchTrigger

    trig = BatchTrigger(16, 0.005, None)
    assert capped_trigger(trig, 32) is trig
    low = capped_trigger(trig, 4)
    assert (low.min_queue, low.max_wait_s, low.max_batch) == (4, 0.005, None)
    assert low.ready(4, 0.0, 0.0) and not trig.ready(4, 0.0, 0.0)
