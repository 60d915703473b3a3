"""The dataflow dispatch decision: a key's holder when one exists, else the least-loaded worker; ties to the
lowest index."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cascadeserve.policy.dispatch import DispatchDecision, pick_worker


def test_exact_choices() -> None:
    assert pick_worker([2, 0, 0]) == DispatchDecision(1, False)
    assert pick_worker([2, 0, 0], holders={0}) == DispatchDecision(0, True)
    assert pick_worker([3, 5, 1], holders={0, 1}) == DispatchDecision(0, True)
    assert pick_worker([1, 1], holders={7}) == DispatchDecision(0, False)  # a stale holder index is ignored
    with pytest.raises(ValueError, match="no worker"):
        pick_worker([])


@given(st.lists(st.integers(0, 9), min_size=1, max_size=8), st.sets(st.integers(0, 9)))
def test_the_choice_is_a_least_loaded_holder_or_worker(loads: list[int], holders: set[int]) -> None:
    d = pick_worker(loads, holders)
    valid = {h for h in holders if h < len(loads)}
    pool = valid or set(range(len(loads)))
    assert d.worker in pool and d.local == bool(valid)
    assert loads[d.worker] == min(loads[w] for w in pool)
    assert d.worker == min(w for w in pool if loads[w] == loads[d.worker])
