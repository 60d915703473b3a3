"""SP3's greedy placement: never exceeds memory, keeps required replicas, says when nothing fits."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadeserve.planner import Load, PlacementError, balance, place_replicas
from cascadeserve.planner.placement import min_max_util


@settings(max_examples=60, deadline=None)
@given(
    mem=st.lists(st.floats(10, 400), min_size=1, max_size=4),
    n_dev=st.integers(1, 5),
    dev_mem=st.floats(400, 900),
    qps=st.floats(1, 2000),
)
def test_placement_never_exceeds_memory(mem: list[float], n_dev: int, dev_mem: float, qps: float) -> None:
    models = {f"m{i}": m for i, m in enumerate(mem)}
    load = Load({m: qps / (i + 1) for i, m in enumerate(models)}, {m: 1e-4 * (i + 1) for i, m in enumerate(models)})
    try:
        reps = place_replicas(models, [dev_mem] * n_dev, [load])
    except PlacementError:
        return  # nothing fits; the error is the right answer
    for d in range(n_dev):
        assert sum(models[m] for m, dd in reps if dd == d) <= dev_mem + 1e-6
    for m in models:  # every needed model keeps a replica
        assert any(mm == m for mm, _ in reps)
    assert len(set(reps)) == len(reps)


def test_everything_stays_when_it_fits() -> None:
    reps = place_replicas({"a": 100, "b": 200}, [1000, 1000], [Load({"a": 10, "b": 5}, {"a": 1e-3, "b": 2e-3})])
    assert sorted(reps) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]


def test_pruning_keeps_the_load_balanced() -> None:
    # two devices each fit one model: one of each, not two of the same
    reps = place_replicas({"a": 100, "b": 100}, [150, 150], [Load({"a": 100, "b": 100}, {"a": 1e-3, "b": 1e-3})])
    assert sorted(m for m, _ in reps) == ["a", "b"]


def test_required_replicas_are_kept() -> None:
    load = Load({"a": 10, "b": 10}, {"a": 1e-3, "b": 1e-3})
    reps = place_replicas({"a": 100, "b": 100}, [150, 150, 150], [load], required={"b": 2})
    assert sum(1 for m, _ in reps if m == "b") == 2
    with pytest.raises(PlacementError):
        place_replicas({"a": 100, "b": 100}, [150, 150], [load], required={"b": 2})


def test_a_model_too_big_for_every_device() -> None:
    with pytest.raises(PlacementError) as info:
        place_replicas({"a": 100, "big": 5000}, [1000], [Load({"a": 1, "big": 1}, {"a": 1e-3, "big": 1e-3})])
    assert info.value.models == ("big",)


@settings(max_examples=150, deadline=None)
@given(
    n_dev=st.integers(1, 6),
    holds=st.lists(st.lists(st.booleans(), min_size=6, max_size=6), min_size=4, max_size=4),
    demand=st.lists(st.one_of(st.just(0.0), st.floats(1.0, 5000.0)), min_size=4, max_size=4),
    runtime=st.lists(st.floats(1e-4, 5e-3), min_size=4, max_size=4),
)
def test_the_closed_form_u_is_the_lps_optimum(
    n_dev: int, holds: list[list[bool]], demand: list[float], runtime: list[float]
) -> None:
    """Placement prunes by u from Hall's condition instead of an LP per candidate: they must agree."""
    models = [f"m{i}" for i in range(4)]
    reps = [(m, d) for i, m in enumerate(models) for d in range(n_dev) if holds[i][d]]
    load = Load(dict(zip(models, demand, strict=True)), dict(zip(models, runtime, strict=True)))
    hall = min_max_util(reps, load)
    lp = balance([m for m, _ in reps], [d for _, d in reps], [load.runtime_s[m] for m, _ in reps], load.demand, n_dev)
    assert hall is not None
    if math.isinf(lp.u):
        assert math.isinf(hall)  # a model with demand and no replica
    else:
        assert hall == pytest.approx(lp.u, rel=1e-9, abs=1e-12)


def test_the_closed_form_u_on_a_small_case() -> None:
    # a on devices 0 and 1, b on device 1 only: b's work (0.6) fills device 1 beyond a's fair half (0.5 each),
    # so a moves to device 0: u = max(W_b / 1, (W_a + W_b) / 2) = max(0.6, 0.8) = 0.8
    load = Load({"a": 1000.0, "b": 300.0}, {"a": 1e-3, "b": 2e-3})
    assert min_max_util([("a", 0), ("a", 1), ("b", 1)], load) == pytest.approx(0.8)
    assert min_max_util([("a", 0)], load) == math.inf  # b has demand and no replica
    assert min_max_util([("a", 0)], Load({"a": 0.0}, {"a": 1e-3})) == 0.0
