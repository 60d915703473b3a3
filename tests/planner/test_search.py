"""SP1: exact branch-and-bound equals brute force; the frontier holds the cheapest and the most accurate."""

from __future__ import annotations

import numpy as np
import pytest
from tests.conftest import make_toy_profile

from cascadeserve.cascade import enumerate_frontier, evaluate
from cascadeserve.planner import search_cascades
from cascadeserve.planner.search import space_size
from cascadeserve.profile import Profile


def _points(front: list[tuple[float, float]]) -> list[tuple[float, float]]:
    return sorted((round(a, 9), round(w, 9)) for a, w in front)


@pytest.mark.parametrize(("n_models", "levels", "seed"), [(3, 10, 0), (4, 8, 1), (3, 20, 2)])
def test_exact_search_equals_brute_force(n_models: int, levels: int, seed: int) -> None:
    p = make_toy_profile(n=600, seed=seed, n_models=n_models)
    got = search_cascades(p, levels=levels)
    assert got.method == "exact"
    lv = np.round(np.linspace(0.0, 1.0, levels + 1), 9)
    want = enumerate_frontier(p, levels=lv)
    assert _points([(c.accuracy, c.work_ms) for c in got.candidates]) == _points([(a, w) for _, a, w in want])


def test_real_profile_exact_equals_brute_force(real_profile: Profile) -> None:
    got = search_cascades(real_profile, levels=10)
    want = enumerate_frontier(real_profile, levels=np.round(np.linspace(0.0, 1.0, 11), 9))
    assert _points([(c.accuracy, c.work_ms) for c in got.candidates]) == _points([(a, w) for _, a, w in want])


@pytest.mark.parametrize("method", ["exact", "random"])
def test_frontier_holds_cheapest_and_most_accurate(toy_profile: Profile, method: str) -> None:
    f = search_cascades(toy_profile, levels=10, method=method, samples=500)
    cheapest = toy_profile.by_cost(1)[0]
    assert f[0].models == (cheapest,)
    best_single = max(toy_profile.accuracies)
    assert f[len(f) - 1].accuracy >= best_single
    works = [c.work_ms for c in f.candidates]
    accs = [c.accuracy for c in f.candidates]
    assert works == sorted(works) and accs == sorted(accs)
    for c in f.candidates:  # the recorded figures are the replayed ones
        ev = evaluate(toy_profile, c.models, np.asarray([c.cascade.thresholds]).reshape(1, -1))
        assert c.accuracy == pytest.approx(float(ev.accuracy[0]))
        assert c.reach == pytest.approx(tuple(ev.reach[0]))


def test_large_families_fall_back_to_sampling() -> None:
    assert space_size(6, 20) <= 5_000_000 < space_size(7, 20)
    p = make_toy_profile(n=300, n_models=7)
    f = search_cascades(p, levels=20, samples=300)
    assert f.method == "random" and len(f) >= 1
