"""The decision kernels: each compiled twin decides exactly as the Python function it is compiled from, the public
API delegates to them, and compiling works without a writable cache."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from tests.property import property_settings

from cascadeserve.policy import (
    AimdBatchLimit,
    BatchDecision,
    BatchTrigger,
    GearSelector,
    batch_size,
    next_batch,
    sure_mask,
)
from cascadeserve.policy import kernels as k
from cascadeserve.policy.adaptive import capped_trigger
from cascadeserve.policy.routing import SmoothWeightedRoundRobin

TIMES = st.sampled_from([-math.inf, 0.0, 0.001, 0.0015, 0.1, 1.0, math.inf])
COUNTS = st.integers(-1, 12)
TWINS = k.compiled()


@property_settings(max_examples=200, deadline=None)
@given(TIMES, TIMES, TIMES, st.sampled_from([0.0, 0.001, 0.1, math.inf]))
def test_fire_time_twin_agrees(now: float, first: float, mth: float, wait: float) -> None:
    assert TWINS["fire_time"](now, first, mth, wait) == k.fire_time(now, first, mth, wait)


@property_settings(max_examples=200, deadline=None)
@given(st.integers(0, 20), COUNTS, COUNTS)
def test_take_count_twin_agrees(present: int, max_batch: int, cap: int) -> None:
    assert TWINS["take_count"](present, max_batch, cap) == k.take_count(present, max_batch, cap)
    trig = BatchTrigger(1, None, None if max_batch < 0 else max_batch)
    assert batch_size(trig, present, None if cap < 0 else cap) == k.take_count(present, max_batch, cap)


@property_settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 40), st.sampled_from([0.001, 0.004, 0.0041, 0.02]), st.integers(1, 4), st.sampled_from([0.5, 0.9])
)
def test_aimd_twin_agrees_and_the_limit_delegates(cap: int, runtime: float, step: int, backoff: float) -> None:
    """Clipper's AIMD rule against a 4 ms target: +step up to the ceiling within it (equal counts as within),
    floor(cap * backoff) but at least 1 over it; the compiled twin and ``AimdBatchLimit`` give the same cap."""
    ceiling = 30
    want = min(ceiling, cap + step) if runtime <= 0.004 else max(1, math.floor(cap * backoff))
    assert k.aimd_next(cap, runtime, 0.004, step, backoff, ceiling) == want
    assert TWINS["aimd_next"](cap, runtime, 0.004, step, backoff, ceiling) == want
    limit = AimdBatchLimit(0.004, step=step, backoff=backoff, start=min(cap, ceiling), ceiling=ceiling)
    if cap <= ceiling:
        assert limit.observe(2, runtime).limit == want and limit.limit(2) == want and limit.limit(0) == cap


def test_capped_min_queue_twin_agrees() -> None:
    for mq, cap in ((8, -1), (8, 3), (8, 8), (3, 8), (1, 1)):
        assert TWINS["capped_min_queue"](mq, cap) == k.capped_min_queue(mq, cap) == (mq if cap < 0 else min(mq, cap))
        trig = BatchTrigger(mq, 0.01, None)
        if cap >= 1:
            assert capped_trigger(trig, cap).min_queue == min(mq, cap)


CANDS = st.tuples(TIMES, TIMES, st.integers(0, 2), st.integers(0, 4))


@property_settings(max_examples=200, deadline=None)
@given(st.lists(CANDS, min_size=1, max_size=6))
def test_prefer_is_the_tie_break_of_next_batch(cands: list[tuple[float, float, int, int]]) -> None:
    best = cands[0]
    twin = cands[0]
    for c in cands:
        best = k.prefer(best, c)
        twin = TWINS["prefer"](twin, c)
    assert best == twin == min(cands)  # tuple order: fire time, oldest head, generation, replica
    assert next_batch(cands) == (None if best[0] == math.inf else BatchDecision(*best))


@property_settings(max_examples=200, deadline=None)
@given(st.sampled_from([0.0, 0.3, 1.0, math.nan]), st.sampled_from([0.0, 0.3, 0.31, 1.0, k.LAST_STAGE]))
def test_exit_rule_twin_agrees_nan_included(c: float, thr: float) -> None:
    expect = thr == k.LAST_STAGE or c >= thr
    assert bool(TWINS["is_sure"](c, thr)) == expect == bool(k.is_sure(c, thr))
    table = np.array([[thr]])
    assert TWINS["stage_exits"](table, 0, 0, c) == expect
    assert sure_mask(np.array([c, c]), thr).tolist() == [expect, expect]


@property_settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(0, 1000), min_size=1, max_size=6).map(sorted),
    st.floats(0, 2000),
    st.integers(0, 5),
    st.integers(0, 50),
)
def test_gear_selector_twin_agrees(highs: list[float], qps: float, current: int, q0: int) -> None:
    current = min(current, len(highs) - 1)
    arr = np.asarray(highs)
    assert TWINS["select_gear"](arr, 1.5, 8.0, current, qps, q0) == k.select_gear(highs, 1.5, 8.0, current, qps, q0)
    sel = GearSelector(highs, alpha=8.0, qps_scale=1.5)
    d = sel.decide(current, qps, q0)
    assert (d.gear, d.target, d.held) == k.select_gear(highs, 1.5, 8.0, current, qps, q0)


def test_the_small_rules_twins_agree() -> None:
    seq = SmoothWeightedRoundRobin([0.2, 0.5, 0.3]).sequence
    pos = 0
    for _ in range(25):
        assert TWINS["swrr_pick"](seq, pos) == k.swrr_pick(seq, pos)
        pos = k.swrr_pick(seq, pos)[1]
    gears = np.array([2, 0, 1])
    for t in (-3, 0, 1, 2, 3, 50):
        assert TWINS["scheduled_gear"](gears, t) == k.scheduled_gear(gears, t)
    for count, elapsed in ((0, 0.1), (7, 0.1), (7, 0.0)):
        assert TWINS["qps_rate"](count, elapsed) == k.qps_rate(count, elapsed)
    for n, in_flight, cap in ((5, 0, -1), (5, 3, 6), (5, 9, 6), (5, 0, 10)):
        assert (
            TWINS["admitted"](n, in_flight, cap)
            == k.admitted(n, in_flight, cap)
            == max(0, min(n, n if cap < 0 else cap - in_flight))
        )


def test_compiling_without_a_cache_location_falls_back() -> None:
    """A function whose source file numba cannot locate has no cache: it compiles per process, and works."""
    scope: dict[str, object] = {}
    exec(compile("def twice(x):\n    return 2 * x\n", "<no file>", "exec"), scope)
    assert k._njit(scope["twice"])(21) == 42  # type: ignore[arg-type]


@property_settings(max_examples=200, deadline=None)
@given(st.booleans(), st.booleans(), TIMES, TIMES)
def test_batch_membership_twin_agrees(has_f: bool, has_a: bool, tf: float, ta: float) -> None:
    want = has_f and (not has_a or tf <= ta)
    assert TWINS["takes_forwarded"](has_f, has_a, tf, ta) == k.takes_forwarded(has_f, has_a, tf, ta) == want
