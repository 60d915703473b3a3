"""The planner's quality harness (paper §6.5): Pareto fronts, hypervolume, planner vs exhaustive vs random."""

from __future__ import annotations

import pytest

from cascadeserve.cascade import Cascade
from cascadeserve.errors import CascadeServeError
from cascadeserve.eval.quality import Point, compare_planner, hypervolume, pareto_points, planner_time_sweep
from cascadeserve.plan import SLO, Device
from cascadeserve.profile import Profile


def _pt(name: str, p95: float, acc: float) -> Point:
    return Point(Cascade((name,), ()), p95, acc)


def test_the_front_keeps_the_points_nothing_beats_fastest_first() -> None:
    pts = [_pt("a", 1.0, 0.5), _pt("b", 2.0, 0.4), _pt("c", 3.0, 0.9), _pt("d", 2.5, 0.7)]
    assert [p.cascade.models[0] for p in pareto_points(pts)] == ["a", "d", "c"]


def test_hypervolume_is_the_dominated_area_up_to_the_reference() -> None:
    pts = [_pt("a", 1.0, 0.5), _pt("c", 3.0, 0.9)]
    # (3 - 1) · (0.5 - 0.4) + (4 - 3) · (0.9 - 0.4)
    assert hypervolume(pts, 4.0, 0.4) == pytest.approx(0.2 + 0.5)
    assert hypervolume([], 4.0, 0.4) == 0.0


def test_compare_planner_scores_all_three_methods(toy_profile: Profile) -> None:
    devs = [Device(name=f"dev{i}", memory_mb=1000.0) for i in range(2)]
    res = compare_planner(toy_profile, devs, 300.0, levels=3, n_slos=4, duration_s=0.5)
    assert res["space_size"] == 3 + 3 * 3 + 1 * 9  # singles, pairs at 3 levels, the triple at 3 × 3 levels
    assert 0 < res["hypervolume_fraction"] <= 1.0 + 1e-9
    assert res["frontiers"]["exhaustive"] and res["planner_s"] > 0
    assert res["load"] == "300 QPS (given)" and res["batch_caps"] == {"m0": 64, "m1": 64, "m2": 64}
    # the sweep starts at the true minimum p95, rounded up, so the fastest point meets the tightest SLO
    fastest = min(p["p95_ms"] for p in res["frontiers"]["exhaustive"])
    assert fastest <= res["slos_ms"][0] < fastest + 0.001


def test_the_harness_marks_a_backlogged_point_infeasible_for_every_method(toy_profile: Profile) -> None:
    # one device: m2 alone carries about 64 / 30 ms = 2,100 QPS, so at 3,000 QPS its queue grows without bound
    dev = [Device(name="d", memory_mb=1000.0)]
    res = compare_planner(toy_profile, dev, 3000.0, levels=3, n_slos=3, duration_s=1.0)
    assert res["infeasible_points"] > 0
    for method in ("exhaustive", "planner", "random"):
        front = res["frontiers"][method]
        assert all(p["feasible"] for p in front)
        assert ["m2"] not in [p["models"] for p in front]
    assert res["reference"]["p95_ms"] < 1000.0  # no backlog sets the reference point


def test_the_default_load_is_stated(toy_profile: Profile) -> None:
    dev = [Device(name="d", memory_mb=1000.0)]
    res = compare_planner(toy_profile, dev, levels=2, n_slos=2, duration_s=0.3)
    assert res["max_qps"] > 0 and res["load"].startswith(f"{res['max_qps']:,.0f} QPS (default: what 1 device(s)")


def test_compare_planner_needs_every_model_on_every_device(toy_profile: Profile) -> None:
    with pytest.raises(CascadeServeError, match="every model on every device"):
        compare_planner(toy_profile, [Device(name="d", memory_mb=100.0)], 300.0, levels=3)


def test_the_time_sweep_reports_one_row_per_range_count(toy_profile: Profile) -> None:
    devs = [Device(name=f"dev{i}", memory_mb=1000.0) for i in range(2)]
    res = planner_time_sweep(toy_profile, devs, SLO(kind="p95_ms", value=20.0), 1000.0, n_ranges=(1, 2))
    assert [r["n_ranges"] for r in res["runs"]] == [1, 2]
    assert all(r["feasible"] and r["iterations"] > 0 for r in res["runs"])
