"""The batch trigger: the length rule, the max-wait rule, and ready()/fire_time() agreeing exactly."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.property import property_settings

from cascadeserve.policy import (
    BatchDecision,
    BatchMembers,
    BatchTrigger,
    batch_members,
    batch_size,
    drain_trigger,
    next_batch,
)


def test_length_rule() -> None:
    t = BatchTrigger(min_queue=3)
    assert [t.needed(q) for q in range(5)] == [3, 2, 1, 0, 0]
    assert not t.ready(0, math.inf, 100.0)
    assert not t.ready(2, 0.0, 100.0)  # no max-wait: a short queue waits forever
    assert t.ready(3, 0.0, 0.0)
    assert t.ready(4, 0.0, 0.0)
    assert t.deadline(5.0) == math.inf


def test_default_fires_on_any_sample() -> None:
    t = BatchTrigger()
    assert (t.min_queue, t.max_wait_s, t.max_batch) == (1, None, None)
    assert not t.ready(0, 0.0, 0.0)
    assert t.ready(1, 0.0, 0.0)


def test_max_wait_rule_flushes_a_short_queue() -> None:
    t = BatchTrigger(min_queue=8, max_wait_s=0.05)
    assert t.deadline(1.0) == 1.05
    assert not t.ready(2, 1.0, 1.04)
    assert t.ready(2, 1.0, 1.05)
    assert t.ready(1, 1.0, 2.0)
    assert not t.ready(0, 1.0, 2.0)  # an empty queue never fires


def test_fire_time() -> None:
    t = BatchTrigger(min_queue=4, max_wait_s=0.5)
    assert t.fire_time(0.0, 1.0, 1.2) == 1.2  # the 4th sample arrives before the deadline
    assert t.fire_time(0.0, 1.0, 3.0) == 1.5  # the deadline comes first
    assert t.fire_time(0.0, 1.0, math.inf) == 1.5
    assert t.fire_time(2.0, 1.0, 1.2) == 2.0  # already due: fire now
    assert BatchTrigger(min_queue=4).fire_time(0.0, 1.0, math.inf) == math.inf


def test_take_caps_the_batch() -> None:
    assert BatchTrigger().take(100) == 100
    assert BatchTrigger(max_batch=32).take(100) == 32
    assert BatchTrigger(max_batch=32).take(5) == 5


def test_next_batch_orders_by_fire_time_then_oldest_head_then_generation_then_replica() -> None:
    assert next_batch([(0.5, 0.1, 0, 0), (0.2, 0.3, 0, 1), (0.4, 0.0, 0, 2)]) == BatchDecision(0.2, 0.3, 0, 1)
    # same fire time: the oldest head wins, then the older generation, then the lower replica index
    assert next_batch([(0.2, 0.3, 0, 0), (0.2, 0.1, 0, 4), (0.2, 0.1, 0, 2)]) == BatchDecision(0.2, 0.1, 0, 2)
    assert next_batch([(0.2, 0.1, 1, 0), (0.2, 0.1, 0, 3)]) == BatchDecision(0.2, 0.1, 0, 3)


def test_next_batch_never_fires_a_queue_that_cannot_fire() -> None:
    assert next_batch([]) is None
    assert next_batch([(math.inf, 0.0, 0, 0), (math.inf, 0.1, 0, 1)]) is None
    assert next_batch([(math.inf, 0.0, 0, 0), (3.0, 0.1, 0, 1)]) == BatchDecision(3.0, 0.1, 0, 1)


def test_batch_size_applies_the_plan_cap_then_the_adaptive_cap() -> None:
    assert batch_size(BatchTrigger(), 100) == 100
    assert batch_size(BatchTrigger(max_batch=32), 100) == 32
    assert batch_size(BatchTrigger(max_batch=32), 100, 8) == 8
    assert batch_size(BatchTrigger(), 5, 8) == 5
    assert drain_trigger(16) == BatchTrigger(1, None, 16)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 12), st.integers(1, 6), st.none() | st.floats(0.0, 3.0), st.floats(0.0, 5.0), st.floats(0, 5))
def test_fire_time_known_agrees_with_ready(
    queued: int, min_queue: int, max_wait: float | None, oldest: float, now: float
) -> None:
    """The runtime's view (only the queue as it is now): fire now exactly when ready(), else at the deadline."""
    trig = BatchTrigger(min_queue=min_queue, max_wait_s=max_wait)
    now = max(now, oldest)  # the head entered before now
    fire = trig.fire_time_known(now, queued, oldest)
    assert (fire == now) == trig.ready(queued, oldest, now)
    if fire > now:
        assert fire == (trig.deadline(oldest) if queued else math.inf)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.floats(0.0, 10.0), min_size=1, max_size=12),
    st.integers(1, 6),
    st.none() | st.floats(0.0, 3.0),
    st.floats(0.0, 12.0),
    st.floats(0.0, 1.0),
)
def test_ready_is_false_just_before_fire_time_and_true_at_it(
    arrivals: list[float], min_queue: int, max_wait: float | None, now: float, frac: float
) -> None:
    """For known arrivals (the simulator's view), fire_time is exactly when ready() first holds."""
    times = sorted(arrivals)
    trig = BatchTrigger(min_queue=min_queue, max_wait_s=max_wait)
    first = times[0]
    mth = times[min_queue - 1] if len(times) >= min_queue else math.inf

    def queued(t: float) -> int:
        return sum(a <= t for a in times)

    fire = trig.fire_time(now, first, mth)
    assert fire >= now
    if math.isinf(fire):
        assert max_wait is None and len(times) < min_queue
        assert not trig.ready(queued(1e9), first, 1e9)
        return
    assert trig.ready(queued(fire), first, fire)
    start = max(now, first)
    if fire > start:
        just_before = float(np.nextafter(fire, -math.inf))
        assert not trig.ready(queued(just_before), first, just_before)
        t = start + frac * (fire - start)
        if t < fire:
            assert not trig.ready(queued(t), first, t)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 50), st.integers(1, 10), st.none() | st.integers(1, 20))
def test_take_never_exceeds_the_queue_or_the_cap(queued: int, min_queue: int, max_batch: int | None) -> None:
    n = BatchTrigger(min_queue=min_queue, max_batch=max_batch).take(queued)
    assert 0 <= n <= queued
    assert max_batch is None or n <= max_batch
    assert n in (queued, max_batch)


def test_batch_members_takes_the_oldest_forwarded_first_on_a_tie() -> None:
    fwd, new = np.array([0.2, 0.2, 0.5]), np.array([0.1, 0.2, 0.4])
    assert batch_members(3, fwd, new) == BatchMembers(2, 1, (False, True, True))  # 0.1, then 0.2 forwarded twice
    assert batch_members(6, fwd, new) == BatchMembers(3, 3)  # the whole queue: forwarded first
    assert batch_members(2, fwd, new[:0]) == BatchMembers(2, 0)
    assert batch_members(2, fwd[:0], new) == BatchMembers(0, 2)


@property_settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 6), max_size=6).map(sorted),
    st.lists(st.integers(0, 6), max_size=6).map(sorted),
    st.data(),
)
def test_batch_members_are_a_stable_sort_by_entry_time(fwd: list[int], new: list[int], data: st.DataObject) -> None:
    """A capped batch is the ``size`` first of a stable sort by entry time, forwarded before new; the whole queue
    lists the forwarded samples first. Either way, each source gives its front."""
    present = len(fwd) + len(new)
    size = data.draw(st.integers(0, present))
    m = batch_members(size, np.array(fwd, dtype=float), np.array(new, dtype=float))
    tagged = sorted([(t, 0, i) for i, t in enumerate(fwd)] + [(t, 1, i) for i, t in enumerate(new)])[:size]
    assert (m.forwarded, m.arrived) == (sum(s == 0 for _, s, _ in tagged), sum(s == 1 for _, s, _ in tagged))
    if m.order is not None:
        assert list(m.order) == [s == 0 for _, s, _ in tagged]
