"""SP4's device headroom (``Planner(max_busy=…)``): a gear is accepted only while its busiest device, simulated at
the range's check load, stays at or under the bound; the plan records it and re-plans keep it."""

from __future__ import annotations

import numpy as np
import pytest

from cascadeserve.errors import InfeasibleError
from cascadeserve.plan import SLO, Device, Gear, GearPlan
from cascadeserve.planner import Planner
from cascadeserve.planner.batching import check_load
from cascadeserve.planner.replan import replan
from cascadeserve.policy.qps import check_qps
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve

SLO_50 = SLO(kind="p95_ms", value=50.0)
ONE_DEVICE = (Device(name="dev0", memory_mb=1000.0),)


def _flat(ms: float = 2.0) -> Profile:
    """One model: ``ms`` per sample at any batch size (no batching gain), so a device at ``q`` QPS is ``q·ms``
    busy whatever batches form."""
    n = 100
    labels = np.zeros(n, dtype=np.int64)
    m = ModelProfile("m", 10.0, RuntimeCurve((1, 64), (ms, 64 * ms)))
    return Profile("flat", (m,), np.arange(n), labels, labels[None, :].copy(), np.ones((1, n)))


def _busy(profile: Profile, plan: GearPlan, g: Gear, qps: float) -> float:
    one = plan.model_copy(update={"gears": (Gear(**{**g.model_dump(), "qps_low": 0.0}),)})
    return check_load(profile, one, qps, 5.0, seed=7).busy_max


def test_the_default_asks_for_no_headroom_and_the_plan_says_so() -> None:
    plan = Planner(n_ranges=2, seed=1).fit(_flat(), ONE_DEVICE, SLO_50, 350.0).plan_
    assert plan is not None and plan.max_busy == 1.0
    # the top range runs the device 70 % busy (2 ms x 350 QPS), which no headroom forbids
    assert _busy(_flat(), plan, plan.gears[-1], 350.0) == pytest.approx(0.7, abs=0.03)


def test_a_range_busier_than_the_headroom_cannot_be_planned_and_the_error_says_why() -> None:
    with pytest.raises(InfeasibleError, match="at most 60% busy"):
        Planner(n_ranges=2, seed=1, max_busy=0.6).fit(_flat(), ONE_DEVICE, SLO_50, 350.0)
    plan = Planner(n_ranges=2, seed=1, max_busy=0.8).fit(_flat(), ONE_DEVICE, SLO_50, 350.0).plan_
    assert plan is not None and plan.max_busy == 0.8


def test_headroom_moves_the_busy_ranges_to_cheaper_cascades(toy_profile: Profile) -> None:
    free = Planner(n_ranges=4, seed=1).fit(toy_profile, ONE_DEVICE, SLO_50, 600.0).plan_
    kept = Planner(n_ranges=4, seed=1, max_busy=0.6).fit(toy_profile, ONE_DEVICE, SLO_50, 600.0).plan_
    assert free is not None and kept is not None

    def busy(plan: GearPlan, r: int) -> float:
        g = plan.gears[r]
        return _busy(toy_profile, plan, g, check_qps(g.qps_high, plan.tick_ms / 1000.0, top=r == len(plan.gears) - 1))

    # without headroom every range keeps m1 -> m2, and the top one runs the device more than 90 % busy
    assert all(g.models == ("m1", "m2") for g in free.gears) and busy(free, 3) > 0.9
    # with it, the busiest ranges give up accuracy for device time, and every gear holds the bound at its check load
    assert kept.gears[0] == free.gears[0]  # far from the bound: unchanged
    for r in (2, 3):
        assert (kept.gears[r].predicted_accuracy or 1.0) < (free.gears[r].predicted_accuracy or 0.0)
    assert all(busy(kept, r) <= 0.6 + 0.03 for r in range(4))
    # each gear carries the busy fraction SP4 accepted it at, which a fresh simulation reproduces
    assert all(g.predicted_busy is not None and g.predicted_busy <= 0.6 for g in kept.gears)
    assert free.gears[3].predicted_busy == pytest.approx(busy(free, 3), abs=0.05)


def test_a_replan_keeps_the_headroom_and_the_audited_share(toy_profile: Profile) -> None:
    planner = Planner(n_ranges=4, seed=1, max_busy=0.6, audit_fraction=0.05)
    old = planner.fit(toy_profile, ONE_DEVICE, SLO_50, 600.0).plan_
    assert old is not None
    new = replan(toy_profile, old, [0.1, 0.2, 0.3, 0.4])
    assert new.max_busy == 0.6 and new.audit_fraction == 0.05


@pytest.mark.parametrize("bad", [0.0, -0.5, 1.5, float("nan")])
def test_a_headroom_outside_0_1_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="max_busy"):
        Planner(max_busy=bad)
