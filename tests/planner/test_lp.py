"""The load-balancing LP: a split that exists is found, capacity holds, absent models get no load."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadeserve.planner import balance

MODELS = ("a", "b", "c")


@st.composite
def instances(draw: st.DrawFn) -> tuple[list[str], list[int], np.ndarray, int, np.ndarray]:
    n_dev = draw(st.integers(1, 5))
    reps = draw(
        st.lists(st.tuples(st.sampled_from(MODELS), st.integers(0, n_dev - 1)), min_size=1, max_size=12, unique=True)
    )
    models = [m for m, _ in reps]
    devices = [d for _, d in reps]
    t = np.array(draw(st.lists(st.floats(1e-4, 1e-2), min_size=len(reps), max_size=len(reps))))
    q = np.array(draw(st.lists(st.floats(0.0, 500.0), min_size=len(reps), max_size=len(reps))))
    return models, devices, t, n_dev, q


def _util(devices: list[int], t: np.ndarray, q: np.ndarray, n_dev: int) -> np.ndarray:
    u = np.zeros(n_dev)
    np.add.at(u, np.asarray(devices), q * t)
    return u


@settings(max_examples=150, deadline=None)
@given(instances())
def test_a_split_that_exists_is_found_and_is_no_worse(
    inst: tuple[list[str], list[int], np.ndarray, int, np.ndarray],
) -> None:
    models, devices, t, n_dev, q = inst
    demand = {m: float(sum(q[i] for i in range(len(models)) if models[i] == m)) for m in set(models)}
    known_u = float(_util(devices, t, q, n_dev).max())
    bal = balance(models, devices, t, demand, n_dev)
    # the known split is one solution, so the optimum is at most as high
    assert bal.u <= known_u * (1 + 1e-6) + 1e-9
    for m, d in demand.items():
        served = sum(bal.q[i] for i in range(len(models)) if models[i] == m)
        assert served >= d * (1 - 1e-6) - 1e-6


@settings(max_examples=150, deadline=None)
@given(instances(), st.floats(0.1, 2.0))
def test_utilisation_never_exceeds_u(
    inst: tuple[list[str], list[int], np.ndarray, int, np.ndarray], scale: float
) -> None:
    models, devices, t, n_dev, _ = inst
    demand = {m: scale * 100.0 for m in set(models)}
    bal = balance(models, devices, t, demand, n_dev)
    util = _util(devices, t, bal.q, n_dev)
    assert np.all(util <= bal.u + 1e-9)
    assert np.allclose(util, bal.device_util)
    assert np.all(bal.q >= 0)
    if bal.feasible:
        assert np.all(util <= 1.0 + 1e-9)


@settings(max_examples=100, deadline=None)
@given(instances())
def test_replicas_of_an_absent_model_get_no_load(
    inst: tuple[list[str], list[int], np.ndarray, int, np.ndarray],
) -> None:
    models, devices, t, n_dev, _ = inst
    present = sorted(set(models))[:1]
    bal = balance(models, devices, t, {m: 50.0 for m in present}, n_dev)
    for i, m in enumerate(models):
        if m not in present:
            assert bal.q[i] == 0.0


def test_a_model_without_replicas_is_infeasible() -> None:
    bal = balance(["a"], [0], [0.001], {"a": 10.0, "b": 5.0}, 1)
    assert not bal.feasible and bal.u == float("inf")


def test_u_is_the_minimum_max_utilisation() -> None:
    # two devices, model a on both, b only on device 0: a's load moves to device 1
    bal = balance(["a", "a", "b"], [0, 1, 0], [0.001, 0.001, 0.001], {"a": 1000.0, "b": 500.0}, 2)
    assert abs(bal.u - 0.75) < 1e-6
    shares = bal.shares(["a", "a", "b"], "a")
    assert abs(shares[1] - 0.75) < 1e-6 and abs(sum(shares.values()) - 1) < 1e-9


def test_a_cached_solution_is_the_very_same_answer() -> None:
    """``solved`` caches HiGHS's answer by the normalised LP: the same cascade at twice the load normalises to
    the same LP, so the second call solves nothing and returns exactly twice the first's QPS."""
    models, devices, t = ["a", "a", "b"], [0, 1, 1], [1e-3, 1e-3, 2e-3]
    solved: dict[tuple[bytes, bytes], np.ndarray] = {}
    one = balance(models, devices, t, {"a": 100.0, "b": 50.0}, 2, solved=solved)
    assert len(solved) == 1
    fresh = balance(models, devices, t, {"a": 100.0, "b": 50.0}, 2)
    assert np.array_equal(one.q, fresh.q) and one.u == fresh.u
    two = balance(models, devices, t, {"a": 200.0, "b": 100.0}, 2, solved=solved)
    assert len(solved) == 1  # a hit
    assert np.array_equal(two.q, 2 * one.q)
    assert np.array_equal(two.q, balance(models, devices, t, {"a": 200.0, "b": 100.0}, 2).q)
