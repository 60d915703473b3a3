"""The cost-grid search: the true minimum, on a predicate and on a profile where the answer is known; repeatability."""

from __future__ import annotations

import math

import pytest
from tests.baselines.tiny import workload

from cascadeserve.baselines import CascadeServe, CocktailPlus, DynBa
from cascadeserve.eval import compare, evaluate_system, grid_table, min_devices
from cascadeserve.traces import constant, step


@pytest.mark.parametrize("answer", [1, 2, 3, 5, 7, 8, 9, 15, 16, None])
def test_galloping_finds_the_minimum(answer: int | None) -> None:
    calls: list[int] = []

    def meets(d: int) -> bool:
        calls.append(d)
        return answer is not None and d >= answer

    assert min_devices(meets, 16) == answer
    assert len(calls) <= 9
    assert all(1 <= d <= 16 for d in calls)


def test_dynba_minimum_on_a_known_profile() -> None:
    # slow: 5 ms per sample at every batch size, so a device serves exactly 200 QPS; 500 QPS needs 3 devices
    # (2 devices fall behind by 100 QPS: after 4 s the backlog is 400 requests, p95 well over 500 ms).
    w = workload(constant(500, 4.0, arrival="uniform"), lats=(500.0,), accs=(0.9,))
    g = evaluate_system(DynBa(), w, 16)
    assert g.devices[(500.0, 0.9)] == 3
    assert set(g.outcomes) <= {1, 2, 3, 4}


def test_seeded_compare_is_repeatable() -> None:
    w = workload(constant(300, 2.0), lats=(50.0, 200.0), accs=(0.6, 0.9))
    a = compare(w, [CascadeServe(), DynBa()], 4).to_dict()
    b = compare(w, [CascadeServe(), DynBa()], 4).to_dict()
    for d in (a, b):
        d.pop("wall_s")
        d.pop("system_wall_s")
    assert a == b
    assert a["cells"][0]["devices"]["dynba"] is not None


def test_an_autoscaled_system_is_charged_its_mean_rounded_up_and_the_mean_is_reported() -> None:
    w = workload(step(50, 600, 5.0, 10.0, arrival="uniform"), lats=(100.0,), accs=(0.9,))
    res = compare(w, [CascadeServe(), CocktailPlus()], 8)
    out = res.to_dict()
    cell = out["cells"][0]
    best = res.grids["cocktail+"].best((100.0, 0.9))
    assert best is not None and 1 < best.mean_devices < best.peak_devices
    assert cell["devices"]["cocktail+"] == math.ceil(best.mean_devices)
    assert cell["mean_devices"] == {"cocktail+": round(best.mean_devices, 3)}  # fixed-device systems: no entry
    row = grid_table(out).splitlines()[2]
    assert f"| {math.ceil(best.mean_devices)} ({best.mean_devices:.2f}) |" in row
