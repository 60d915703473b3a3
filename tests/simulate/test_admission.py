"""The simulator applies the admission policy: a simulated plan sheds what the server would shed."""

from __future__ import annotations

import numpy as np
import pytest
from tests.runtime.runtime_helpers import two_gear_plan

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.policy import AdmissionPolicy, WaitBudget
from cascadeserve.profile import Profile
from cascadeserve.simulate import simulate


def test_a_burst_past_the_bound_is_shed_and_the_rest_answered(toy_profile: Profile) -> None:
    plan = fixed_plan(toy_profile, Cascade(("m0",), ()), (Device(name="d0", memory_mb=1000),), min_queue=1)
    arrivals = np.full(50, 0.01)  # 50 at once, in the first tick
    res = simulate(toy_profile, plan, arrivals, admission=AdmissionPolicy(8))
    assert res.shed is not None and res.n_shed == 42
    assert not res.shed[:8].any() and res.shed[8:].all()  # admitted in arrival order
    assert res.completed == 8 and res.unanswered == 0
    summary = res.summary()
    assert summary["shed"] == 42 and np.isfinite(summary["p99_ms"])
    # a later tick, once the first eight are answered, admits again
    later = simulate(toy_profile, plan, np.concatenate([arrivals, np.full(5, 1.0)]), admission=AdmissionPolicy(8))
    assert later.n_shed == 42 and later.completed == 13
    # without a policy nothing is shed, and the result says so
    free = simulate(toy_profile, plan, arrivals)
    assert free.shed is None and free.n_shed == 0 and free.completed == 50


def test_admission_by_time_in_the_simulator(toy_profile: Profile) -> None:
    plan = fixed_plan(toy_profile, Cascade(("m0",), ()), (Device(name="d0", memory_mb=1000),), min_queue=1)
    policy = AdmissionPolicy(None, budget=WaitBudget(100.0, 0.05, 2.0))  # 10 may be in flight
    res = simulate(toy_profile, plan, np.full(40, 0.01), admission=policy)
    assert res.n_shed == 30 and res.completed == 10


@pytest.mark.parametrize("engine", ["compiled", "reference"])
def test_each_arrival_is_admitted_against_the_answers_given_before_it(toy_profile: Profile, engine: str) -> None:
    """One slot; m0 answers in 1 ms: an arrival while the first runs is shed, one after its answer is admitted, and
    one at the very instant of an answer is shed (at one instant arrivals come before device events)."""
    plan = fixed_plan(toy_profile, Cascade(("m0",), ()), (Device(name="d0", memory_mb=1000),), min_queue=1)
    arrivals = np.array([0.0, 0.0005, 0.002, 0.003, 0.0035])
    res = simulate(toy_profile, plan, arrivals, admission=AdmissionPolicy(1), engine=engine)  # type: ignore[arg-type]
    assert res.shed is not None and res.shed.tolist() == [False, True, False, True, False]
    assert res.finish[~res.shed].tolist() == pytest.approx([0.001, 0.003, 0.0045])
    assert res.tick_qps.tolist() == [0.0]  # one tick: nothing measured yet


@pytest.mark.parametrize("engine", ["compiled", "reference"])
def test_the_gear_follows_the_offered_load_not_the_admitted(toy_profile: Profile, engine: str) -> None:
    """100 arrivals at one instant of the first tick with room for 2: the meter reads 1,000 QPS (not the 20
    admitted), so the producer takes the fast gear (above 30 QPS) and the next arrival is admitted under it.
    Metering only what admission let in would read an overload as a light load and keep the costly gear."""
    plan = two_gear_plan(low_high=30.0)
    arrivals = np.concatenate([np.full(100, 0.05), [0.15]])
    res = simulate(toy_profile, plan, arrivals, admission=AdmissionPolicy(2), engine=engine)  # type: ignore[arg-type]
    assert res.n_shed == 98
    assert res.tick_qps[1] == pytest.approx(1000.0)
    assert res.tick_gear[1] == 1
    assert res.gear[-1] == 1 and not res.shed[-1]
