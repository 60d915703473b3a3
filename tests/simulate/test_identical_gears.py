"""Neighbouring gears that serve alike are one gear: no switch between them, in the selector, in both simulator
loops, in a gear schedule and in the counts (the planner often gives every range the same gear)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from tests.simulate.sim_helpers import assert_same_result
from tests.simulate.test_engine import two_gear_plan

from cascadeserve.plan import Gear, GearPlan
from cascadeserve.policy import GearSchedule, GearSelector, PlanTables
from cascadeserve.profile import Profile
from cascadeserve.simulate import simulate

# 20 QPS for 2 s, 400 QPS for 2 s, 20 QPS for 4 s (uniform arrivals): one step up and one back down.
STEP = np.concatenate([np.arange(40) / 20, 2 + np.arange(800) / 400, 4 + np.arange(80) / 20])


def split(plan: GearPlan, gear: int, at: list[float]) -> GearPlan:
    """``plan`` with gear ``gear`` cut at the QPS values ``at`` into identical gears (same serving settings)."""
    g = plan.gears[gear]
    edges = [g.qps_low, *at, g.qps_high]
    pieces = tuple(g.model_copy(update={"qps_low": lo, "qps_high": hi}) for lo, hi in itertools.pairwise(edges))
    return plan.model_copy(update={"gears": plan.gears[:gear] + pieces + plan.gears[gear + 1 :]})


def one_gear(plan: GearPlan, gear: int, top: float | None = None) -> GearPlan:
    """``plan`` with gear ``gear`` alone, from 0 to ``top`` QPS (default: the plan's top)."""
    g: Gear = plan.gears[gear].model_copy(update={"qps_low": 0.0, "qps_high": top or plan.max_qps})
    return plan.model_copy(update={"gears": (g,)})


def test_gear_runs_group_neighbours_that_serve_alike(toy_profile: Profile) -> None:
    plan = two_gear_plan(toy_profile)
    assert plan.gear_runs == ((0, 0), (1, 1))
    aab = split(plan, 0, [50.0])
    assert aab.gear_runs == ((0, 1), (2, 2))
    aaaa = split(one_gear(plan, 0), 0, [25.0, 50.0, 75.0])
    assert aaaa.gear_runs == ((0, 3),)
    # A predicted p95 is no serving setting: it does not split a run.
    g = aaaa.gears[2].model_copy(update={"predicted_p95_ms": 12.5})
    assert aaaa.model_copy(update={"gears": (*aaaa.gears[:2], g, aaaa.gears[3])}).gear_runs == ((0, 3),)
    # Shares from separate LP solves differ in the last bits: still alike; a real difference is not.
    for eps, runs in ((1e-12, ((0, 3),)), (1e-3, ((0, 1), (2, 2), (3, 3)))):
        rep = g.replicas[0].model_copy(update={"share": g.replicas[0].share - eps})
        near = g.model_copy(update={"replicas": (rep, *g.replicas[1:])})
        assert aaaa.model_copy(update={"gears": (*aaaa.gears[:2], near, aaaa.gears[3])}).gear_runs == runs
    # A different batch trigger does.
    rep = g.replicas[0].model_copy(update={"min_queue": 3})
    other = g.model_copy(update={"replicas": (rep, *g.replicas[1:])})
    assert aaaa.model_copy(update={"gears": (*aaaa.gears[:2], other, aaaa.gears[3])}).gear_runs == (
        (0, 1),
        (2, 2),
        (3, 3),
    )


def test_the_selector_answers_the_first_gear_of_a_run() -> None:
    sel = GearSelector([100.0, 100.0, 10_000.0])  # gears A, A, B with A's run topped at 100 QPS
    assert [sel.lookup(q) for q in (0.0, 60.0, 99.9, 100.0, 5000.0, 20_000.0)] == [0, 0, 0, 2, 2, 2]
    top = GearSelector([100.0, 10_000.0, 10_000.0])  # A, B, B: above the top the last run's first gear
    assert [top.lookup(q) for q in (50.0, 150.0, 9_999.0, 10_000.0, 1e9)] == [0, 1, 1, 1, 1]
    # Hysteresis compares first gears of runs: from B down to A is a move down, held under a backlog.
    assert sel.decide(2, 50.0, q0=100).gear == 2
    assert sel.decide(2, 50.0, q0=0).gear == 0


@pytest.mark.parametrize("engine", ["auto", "reference"])
def test_four_identical_gears_switch_never(toy_profile: Profile, engine: str) -> None:
    # planned up to 100 QPS: the step's 400 QPS lies above every gear (the last run's first gear serves it)
    single = one_gear(two_gear_plan(toy_profile), 0, top=100.0)
    four = split(single, 0, [25.0, 50.0, 75.0])
    res = simulate(toy_profile, four, STEP, record_batches=True, engine=engine)  # type: ignore[arg-type]
    assert res.gear_switches == 0
    assert set(res.tick_gear.tolist()) == {0} and set(res.gear.tolist()) == {0}
    assert res.summary()["gear_ticks"] == {0: len(res.tick_gear)}
    # The very run of the one-gear plan, to the bit.
    assert_same_result(res, simulate(toy_profile, single, STEP, record_batches=True, engine=engine))  # type: ignore[arg-type]


@pytest.mark.parametrize("engine", ["auto", "reference"])
def test_gears_a_a_b_switch_only_at_the_a_b_boundary(toy_profile: Profile, engine: str) -> None:
    two = two_gear_plan(toy_profile)  # A below 100 QPS, B above
    aab = split(two, 0, [50.0])
    res = simulate(toy_profile, aab, STEP, record_batches=True, engine=engine)  # type: ignore[arg-type]
    ref = simulate(toy_profile, two, STEP, record_batches=True, engine=engine)  # type: ignore[arg-type]
    assert res.gear_switches == ref.gear_switches == 2  # up once at the step, down once after it
    assert set(res.tick_gear.tolist()) == {0, 2}
    # Gear 2 of the three is gear 1 of the two; everything else is the same run.
    assert np.array_equal(np.where(res.tick_gear == 2, 1, res.tick_gear), ref.tick_gear)
    assert np.array_equal(np.where(res.gear == 2, 1, res.gear), ref.gear)
    assert np.array_equal(res.finish, ref.finish) and np.array_equal(res.answer_row, ref.answer_row)


def test_a_schedule_naming_identical_gears_switches_only_between_distinct_ones(toy_profile: Profile) -> None:
    aab = split(two_gear_plan(toy_profile), 0, [50.0])
    tables = PlanTables(aab, {m: toy_profile.index(m) for m in toy_profile.model_names})
    policy = tables.gear_policy(GearSchedule([0, 1, 0, 1, 2, 2, 1]))
    assert policy.schedule is not None and policy.schedule.gears.tolist() == [0, 0, 0, 0, 2, 2, 0]
    arr = np.arange(70) / 10  # 10 QPS for 7 s: the schedule alone picks the gear
    res = simulate(toy_profile, aab, arr, gear_schedule=GearSchedule([0] * 10 + [1] * 10 + [2] * 10 + [1] * 40))
    assert res.gear_switches == 2
    with pytest.raises(ValueError, match="names gear 3"):
        tables.gear_policy(GearSchedule([0, 3]))
