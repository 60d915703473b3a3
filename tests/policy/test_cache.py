"""The prediction cache policy: LRU order, bounded size, epochs, and which plan swaps invalidate it."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadeserve.cascade import Cascade
from cascadeserve.plan import SLO, Device, fixed_plan
from cascadeserve.policy.cache import PredictionCache, input_key, swap_invalidates
from cascadeserve.profile import Profile


def test_lru_evicts_the_least_recently_used_and_counts() -> None:
    c: PredictionCache[str] = PredictionCache(2)
    assert c.store("a", "A").evicted == 0
    c.store("b", "B")
    assert c.lookup("a") == "A"  # a is now the most recent
    assert c.store("c", "C").evicted == 1  # so b goes
    assert "b" not in c and c.lookup("b") is None
    assert c.lookup("c") == "C" and c.lookup("a") == "A"
    assert (c.hits, c.misses, c.evictions, len(c)) == (3, 1, 1, 2)


def test_a_stale_epoch_is_not_stored() -> None:
    c: PredictionCache[int] = PredictionCache(4)
    epoch = c.epoch
    c.store(1, 10, epoch)
    c.invalidate()
    assert len(c) == 0 and c.invalidations == 1
    assert not c.store(2, 20, epoch).stored  # looked up before the swap, answered after it
    assert c.lookup(2) is None
    assert c.store(2, 20, c.epoch).stored


def test_input_key_is_the_bytes_with_dtype_and_shape() -> None:
    a = np.arange(4, dtype=np.float32)
    assert input_key(a) == input_key(a.copy())
    assert input_key(a) != input_key(a.astype(np.float64))
    assert input_key(a) != input_key(a.reshape(2, 2))
    assert input_key(np.int64(7)) == input_key(7) == 7


def test_only_a_swap_that_changes_the_cascades_invalidates(toy_profile: Profile) -> None:
    devs = (Device(name="d0", memory_mb=1000), Device(name="d1", memory_mb=1000))
    base = fixed_plan(toy_profile, Cascade(("m0", "m1"), (0.5,)), devs)
    moved = fixed_plan(
        toy_profile, Cascade(("m0", "m1"), (0.5,)), devs[:1], min_queue=4, slo=SLO(kind="p95_ms", value=9)
    )
    other_threshold = fixed_plan(toy_profile, Cascade(("m0", "m1"), (0.7,)), devs)
    other_model = fixed_plan(toy_profile, Cascade(("m0", "m2"), (0.5,)), devs)
    assert not swap_invalidates(base, moved)  # placement, triggers and SLO differ; the answers do not
    assert swap_invalidates(base, other_threshold)
    assert swap_invalidates(base, other_model)
    c: PredictionCache[int] = PredictionCache(3)
    c.store(1, 1)
    assert not c.on_swap(base, moved) and len(c) == 1
    assert c.on_swap(base, other_model) and len(c) == 0 and c.epoch == 1


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.lists(st.tuples(st.booleans(), st.integers(0, 8)), max_size=60))
def test_matches_a_reference_lru(capacity: int, ops: list[tuple[bool, int]]) -> None:
    c: PredictionCache[int] = PredictionCache(capacity)
    ref: OrderedDict[int, int] = OrderedDict()
    for is_store, k in ops:
        if is_store:
            c.store(k, k * 10)
            ref[k] = k * 10
            ref.move_to_end(k)
            if len(ref) > capacity:
                ref.popitem(last=False)
        else:
            want = ref.get(k)
            if want is not None:
                ref.move_to_end(k)
            assert c.lookup(k) == want
        assert len(c) == len(ref) <= capacity
        assert list(c._data) == list(ref)
