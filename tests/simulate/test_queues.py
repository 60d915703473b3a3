"""The simulator's queue operations: :func:`take_batch` takes the oldest samples and loses none."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadeserve.policy import batch_members
from cascadeserve.simulate.queues import Forwarded, take_batch


def _take(
    f: Forwarded, pend_ids: np.ndarray, pend_t: np.ndarray, p: int, k: int, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    m = batch_members(size, f, pend_t[p:k])
    return take_batch(f, pend_ids, p, m), pend_ids, pend_t, p + m.arrived


def test_a_capped_batch_mixes_forwarded_and_new_samples_oldest_first() -> None:
    f = Forwarded()
    f.push(np.array([10, 11]), 0.2)  # forwarded at 0.2
    f.push(np.array([12]), 0.5)
    pend_ids = np.array([1, 2, 3, 4])
    pend_t = np.array([0.1, 0.3, 0.4, 0.9])
    ids, p_ids, p_t, pos = _take(f, pend_ids, pend_t, 0, 3, 3)  # 3 arrived by the start, batch of 3
    assert ids.tolist() == [1, 10, 11]
    assert (p_ids[pos:].tolist(), p_t[pos:].tolist()) == ([2, 3, 4], [0.3, 0.4, 0.9])  # back at the front, in order
    assert f.n == 1 and f.oldest == 0.5


def test_the_whole_queue_and_the_pending_only_cases() -> None:
    f = Forwarded()
    ids, p_ids, _, pos = _take(f, np.array([5, 6, 7]), np.array([0.0, 0.1, 0.2]), 1, 3, 1)
    assert ids.tolist() == [6] and pos == 2 and p_ids.tolist() == [5, 6, 7]
    f.push(np.array([9]), 0.05)
    ids, _, _, pos = _take(f, np.array([5, 6, 7]), np.array([0.0, 0.1, 0.2]), 1, 3, 3)
    assert ids.tolist() == [9, 6, 7] and pos == 3 and f.n == 0


@settings(max_examples=200, deadline=None)
@given(
    fwd=st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=4), max_size=4),
    new=st.lists(st.integers(0, 5), max_size=8),
    later=st.integers(0, 3),
    data=st.data(),
)
def test_a_batch_is_the_oldest_samples_and_nothing_is_lost(
    fwd: list[list[int]], new: list[int], later: int, data: st.DataObject
) -> None:
    f = Forwarded()
    times: dict[int, float] = {}
    nid = 0
    t = 0.0
    for chunk in fwd:  # chunks are pushed in time order; times are tenths so that ties happen
        t += 0.1 * len(chunk)
        ids = np.arange(nid, nid + len(chunk))
        nid += len(chunk)
        f.push(ids, t)
        times.update((int(i), t) for i in ids)
    new_t = np.sort(np.array(new, dtype=np.float64) / 10.0)
    new_t = np.concatenate([new_t, new_t[-1:] + 1.0 + np.arange(later)]) if len(new_t) else np.arange(later) + 1.0
    pend_ids = np.arange(1000, 1000 + len(new_t))
    times.update((int(i), float(x)) for i, x in zip(pend_ids, new_t, strict=True))
    k = len(new)  # the first ``k`` pending samples have arrived by the batch's start
    present = f.n + k
    if present == 0:
        return
    size = data.draw(st.integers(1, present))
    before = set(times)
    ids, p_ids, p_t, pos = _take(f, pend_ids, new_t, 0, k, size)
    kept_f = [int(i) for c, _ in f.chunks for i in c]
    rest = kept_f + p_ids[pos:].tolist()
    assert len(ids) == size and len(set(ids.tolist())) == size
    assert set(ids.tolist()) | set(rest) == before and not set(ids.tolist()) & set(rest)  # nothing lost or doubled
    arrived_rest = kept_f + [i for i in p_ids[pos:].tolist() if times[i] <= new_t[k - 1]] if k else kept_f
    if arrived_rest:
        assert max(times[int(i)] for i in ids) <= min(times[i] for i in arrived_rest)  # oldest first
    assert np.all(np.diff(p_t[pos:]) >= 0)  # the pending queue stays in arrival order
    assert [times[i] for i in p_ids[pos:].tolist()] == p_t[pos:].tolist()
