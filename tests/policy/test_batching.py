"""The batch trigger: the length rule, the max-wait rule, and ready()/fire_time() agreeing exactly."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadeserve.policy import BatchTrigger, choose_replica, earliest_replica


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


def test_choose_replica_prefers_the_longest_wait_then_the_lower_index() -> None:
    assert choose_replica([(0.3, 0), (0.1, 2), (0.2, 1)]) == 2
    assert choose_replica([(0.1, 3), (0.1, 1)]) == 1
    assert choose_replica([(5.0, 7)]) == 7


def test_earliest_replica_orders_by_fire_time_then_like_choose_replica() -> None:
    assert earliest_replica([(0.5, 0.1, 0), (0.2, 0.3, 1), (0.4, 0.0, 2)]) == (0.2, 0.3, 1)
    # same fire time: the oldest head wins, then the lower index (as choose_replica)
    assert earliest_replica([(0.2, 0.3, 0), (0.2, 0.1, 4), (0.2, 0.1, 2)]) == (0.2, 0.1, 2)
    ready = [(0.2, 0.3, 0), (0.2, 0.1, 4), (0.2, 0.1, 2)]
    assert earliest_replica(ready)[2] == choose_replica([(old, r) for _, old, r in ready])


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
