"""PlanTables: a gear plan compiled to integer tables; and forwarding by certainty."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.property import property_settings

from cascadeserve.plan import DEFAULT_MAX_WAIT_MS, Device, Gear, GearPlan, GearReplica, Replica
from cascadeserve.policy import (
    LAST_STAGE,
    BatchTrigger,
    PlanTables,
    Route,
    SmoothWeightedRoundRobin,
    batch_size,
    is_sure,
    sure_mask,
)
from cascadeserve.policy.forwarding import sure_list

# Model rows as a profile might number them: "x" is in the profile but in no gear.
ROWS = {"x": 0, "a": 1, "b": 2, "c": 3}


def three_stage_plan() -> GearPlan:
    replicas = (
        Replica(model="a", device="d0"),  # 0
        Replica(model="b", device="d0"),  # 1
        Replica(model="a", device="d1"),  # 2
        Replica(model="c", device="d1"),  # 3
        Replica(model="b", device="d1"),  # 4
    )
    g0 = Gear(
        qps_low=0,
        qps_high=100,
        models=("a", "b", "c"),
        thresholds=(0.7, 0.4),
        replicas=(
            GearReplica(model="a", device="d0", min_queue=2, share=0.75),
            GearReplica(model="a", device="d1", min_queue=3, share=0.25),
            GearReplica(model="b", device="d0", min_queue=4, share=1.0),
            GearReplica(model="b", device="d1", min_queue=9, share=0.0),
            GearReplica(model="c", device="d1", min_queue=5, share=1.0),
        ),
    )
    g1 = Gear(
        qps_low=100,
        qps_high=300,
        models=("a", "c"),
        thresholds=(0.9,),
        replicas=(
            GearReplica(model="a", device="d1", min_queue=6, share=1.0),
            GearReplica(model="c", device="d1", min_queue=7, share=1.0),
        ),
    )
    return GearPlan(
        profile="p",
        devices=(Device(name="d0", memory_mb=1000), Device(name="d1", memory_mb=1000)),
        replicas=replicas,
        gears=(g0, g1),
        alpha=4.0,
        qps_scale=1.5,
        max_wait_ms=20.0,
        max_batch=16,
    )


def test_thresholds_next_rows_and_stages() -> None:
    t = PlanTables(three_stage_plan(), ROWS)
    assert t.n_gears == 2
    inf = LAST_STAGE
    np.testing.assert_array_equal(t.threshold, [[inf, 0.7, 0.4, inf], [inf, 0.9, inf, inf]])
    np.testing.assert_array_equal(t.next_row, [[-1, 2, 3, -1], [-1, 3, -1, -1]])
    np.testing.assert_array_equal(t.stage, [[-1, 0, 1, 2], [-1, 0, -1, 1]])
    np.testing.assert_array_equal(t.first_row, [1, 1])
    assert t.threshold[0, 3] == -math.inf


def test_replica_and_device_indices() -> None:
    t = PlanTables(three_stage_plan(), ROWS)
    assert (t.n_replicas, t.n_devices) == (5, 2)
    np.testing.assert_array_equal(t.replica_row, [1, 2, 1, 3, 2])
    np.testing.assert_array_equal(t.replica_device, [0, 0, 1, 1, 1])
    assert t.device_replicas == ((0, 1), (2, 3, 4))


def test_routes_skip_zero_shares() -> None:
    t = PlanTables(three_stage_plan(), ROWS)
    assert t.route(0, 1) == Route(replicas=(0, 2), shares=(0.75, 0.25))
    assert t.route(0, 2) == Route(replicas=(1,), shares=(1.0,))  # b@d1 has share 0
    assert t.route(0, 3) == Route(replicas=(3,), shares=(1.0,))
    assert t.route(1, 1) == Route(replicas=(2,), shares=(1.0,))
    assert t.first_stage_replicas(0) == (0, 2)
    assert t.first_stage_replicas(1) == (2,)
    router = t.route(0, 1).router()
    assert isinstance(router, SmoothWeightedRoundRobin)
    assert router.pick_many(4).tolist() == [0, 0, 1, 0]  # indices into the route: 3:1


def test_new_routers_are_fresh_and_independent() -> None:
    t = PlanTables(three_stage_plan(), ROWS)
    r1, r2 = t.new_routers(), t.new_routers()
    assert [r1.admit(0) for _ in range(3)] == [0, 0, 2]  # replicas of a in gear 0, shares 3:1
    assert r2.admit(0) == 0  # r2 has its own state
    assert r1.admit(0) == 0 and r1.admit(0) == 0
    assert r1.forward(0, 1) == 1  # after a, b (share 0 on d1) in gear 0
    assert r1.forward(1, 1) == 3  # gear 1 skips b: a -> c
    ids = np.arange(8, dtype=np.int64)
    groups = t.new_routers().split(0, 1, ids)
    assert [(r, g.tolist()) for r, g in groups] == [(0, [0, 1, 3, 4, 5, 7]), (2, [2, 6])]
    assert t.new_routers().split_list(0, 1, ids.tolist()) == [(r, g.tolist()) for r, g in groups]
    assert t.new_routers().admit_split(0, ids)[1][1].tolist() == [2, 6]


def _two_device_pair(backend: str) -> GearPlan:
    """a then b, each with a replica on d0 and d1 sharing its load half and half."""
    gear = Gear(
        qps_low=0,
        qps_high=100,
        models=("a", "b"),
        thresholds=(0.5,),
        replicas=tuple(GearReplica(model=m, device=d, share=0.5) for m in ("a", "b") for d in ("d0", "d1")),
    )
    return GearPlan(
        profile="p",
        devices=(Device(name="d0", memory_mb=1000), Device(name="d1", memory_mb=1000)),
        replicas=tuple(Replica(model=m, device=d) for m in ("a", "b") for d in ("d0", "d1")),
        gears=(gear,),
        backend=backend,  # type: ignore[arg-type]
    )


def test_forwards_share_one_router_locally_and_one_per_device_on_ray() -> None:
    # replicas: 0 a@d0, 1 a@d1, 2 b@d0, 3 b@d1. Batches of a on d0 and d1 take turns being unsure.
    sources = [0, 1, 0, 1, 0, 1]
    local = PlanTables(_two_device_pair("local"), ROWS)
    assert local.forward_lane.tolist() == [0, 0, 0, 0]
    routers = local.new_routers()
    # one process, one router: b's replicas alternate across the two sources, so each b queue gets every other one
    assert [routers.forward(0, 1, s) for s in sources] == [2, 3, 2, 3, 2, 3]
    ray = PlanTables(_two_device_pair("ray"), ROWS)
    assert ray.forward_lane.tolist() == [0, 1, 0, 1]
    routers = ray.new_routers()
    # each device's server alternates on its own: both send their first unsure sample to b@d0, then both to b@d1
    assert [routers.forward(0, 1, s) for s in sources] == [2, 2, 3, 3, 2, 2]
    assert routers.admit(0) == 0 and routers.admit(0) == 1  # new requests: the front end's one router


def test_failover_takes_the_next_replica_of_the_model_on_another_device() -> None:
    t = PlanTables(three_stage_plan(), ROWS)
    assert t.failover(0, 0, lost_device=0) == 2  # a@d0 lost: a@d1
    assert t.failover(0, 2, lost_device=1) == 0  # a@d1 lost: wraps to a@d0
    assert t.failover(1, 2, lost_device=1) == 2  # gear 1 routes a to d1 only: wait for it


def test_q0_sums_the_first_stage_of_the_gear() -> None:
    t = PlanTables(three_stage_plan(), ROWS)
    lengths = [5, 100, 7, 100, 100]
    assert t.q0(0, lengths.__getitem__) == 12
    assert t.q0(1, lengths.__getitem__) == 7


def test_exits_use_each_samples_gear_and_the_last_stage_answers_nan() -> None:
    t = PlanTables(three_stage_plan(), ROWS)
    cert = np.array([0.8, 0.8, np.nan, 0.1])
    np.testing.assert_array_equal(t.exits(1, cert, np.array([0, 1, 0, 0])), [True, False, False, False])
    np.testing.assert_array_equal(t.exits(3, cert, np.array([0, 1, 0, 1])), [True] * 4)  # c is last everywhere
    assert t.exits_list(3, [math.nan], [0]) == [True] and t.exits_list(1, [math.nan], [0]) == [False]
    assert t.exits_list(1, [0.7, 0.7], [0, 1]) == [True, False]


def test_a_plan_without_max_wait_gets_the_default_so_no_queue_starves() -> None:
    plan = three_stage_plan().model_copy(update={"max_wait_ms": None})
    t = PlanTables(plan, ROWS)
    assert t.triggers[0][0].max_wait_s == DEFAULT_MAX_WAIT_MS / 1000.0
    assert t.triggers_for(0, draining=True) == (BatchTrigger(1, None, 16),) * 5


def test_triggers_per_gear_and_replica() -> None:
    t = PlanTables(three_stage_plan(), ROWS)
    mq = [[trig.min_queue for trig in gear] for gear in t.triggers]
    # replicas: a@d0, b@d0, a@d1, c@d1, b@d1; a replica outside a gear defaults to 1
    assert mq == [[2, 4, 3, 5, 9], [1, 1, 6, 7, 1]]
    assert t.triggers[0][0] == BatchTrigger(min_queue=2, max_wait_s=0.02, max_batch=16)


def test_selector_comes_from_the_plan() -> None:
    t = PlanTables(three_stage_plan(), ROWS)
    assert (t.selector.n_gears, t.selector.alpha, t.selector.qps_scale) == (2, 4.0, 1.5)
    assert t.selector.lookup(66.0) == 0  # 99 after scaling
    assert t.selector.lookup(67.0) == 1


def test_sure_mask() -> None:
    cert = np.array([0.1, 0.5, 0.9, 0.0])
    np.testing.assert_array_equal(sure_mask(cert, 0.5), [False, True, True, False])
    np.testing.assert_array_equal(sure_mask(cert, LAST_STAGE), [True] * 4)
    np.testing.assert_array_equal(sure_mask(cert, np.array([0.2, 0.6, LAST_STAGE, 0.0])), [False, False, True, True])
    assert sure_mask(cert, 0.5).dtype == bool


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=20),
    st.lists(st.sampled_from([LAST_STAGE, 0.0, 0.3, 0.5, 1.0]), min_size=20, max_size=20),
)
def test_sure_mask_and_is_sure_agree_and_the_last_stage_always_answers(cert: list[float], thr: list[float]) -> None:
    c = np.array(cert)
    t = np.array(thr[: len(cert)])
    mask = sure_mask(c, t)
    assert mask.tolist() == [is_sure(a, b) for a, b in zip(cert, t.tolist(), strict=True)]
    assert mask.tolist() == sure_list(cert, t.tolist())
    assert sure_mask(c, float(t[0])).tolist() == sure_list(cert, float(t[0]))
    assert mask[t == LAST_STAGE].all()
    assert sure_mask(c, LAST_STAGE).all()


def test_a_replica_cap_bounds_its_trigger_and_its_drain_below_the_plan_wide_one() -> None:
    plan = three_stage_plan()
    g0 = plan.gears[0]
    capped = tuple(gr.model_copy(update={"max_batch": {"a": 4, "c": 64}.get(gr.model)}) for gr in g0.replicas)
    plan = plan.model_copy(update={"gears": (g0.model_copy(update={"replicas": capped}), plan.gears[1])})
    t = PlanTables(plan, ROWS)
    # replicas: a@d0, b@d0, a@d1, c@d1, b@d1; the plan-wide cap is 16
    assert [trig.max_batch for trig in t.triggers[0]] == [4, 16, 4, 16, 16]
    assert [trig.max_batch for trig in t.triggers_for(0, draining=True)] == [4, 16, 4, 16, 16]
    assert t.triggers_for(0, draining=True)[0] == BatchTrigger(1, None, 4)
    assert [trig.max_batch for trig in t.triggers[1]] == [16] * 5  # gear 1 sets no replica cap
    assert t.batch_cap(0, 0) == 4 and t.batch_cap(1, 2) == 16
    assert batch_size(t.triggers[0][0], 100) == 4 and batch_size(t.triggers[0][0], 100, 2) == 2


@property_settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 1), min_size=1, max_size=40))
def test_forward_split_routes_each_sample_by_its_gear_as_one_by_one_forwarding_does(gears: list[int]) -> None:
    t = PlanTables(three_stage_plan(), ROWS)
    row = ROWS["a"]
    ids = list(range(100, 100 + len(gears)))
    one_by_one: dict[int, list[int]] = {}
    seq = t.new_routers()
    for i, g in zip(ids, gears, strict=True):
        one_by_one.setdefault(seq.forward(g, row), []).append(i)
    arrays = t.new_routers().forward_split(row, np.array(ids), np.array(gears))
    lists = t.new_routers().forward_split_list(row, ids, gears)
    assert {rr: sub.tolist() for rr, sub in arrays} == one_by_one == dict(lists)
