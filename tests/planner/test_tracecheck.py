"""The planner's trace check: replay the plan on its trace, re-plan against a tighter internal SLO while it misses."""

from __future__ import annotations

import math

import pytest

from cascadeserve.errors import InfeasibleError
from cascadeserve.plan import SLO, Device
from cascadeserve.planner import Planner
from cascadeserve.planner.tracecheck import (
    ACCURACY_MARGIN,
    LATENCY_MARGIN,
    MAX_ACCURACY_STEP,
    MAX_LATENCY_STEP,
    SloSearch,
    shortfall,
)
from cascadeserve.profile import Profile
from cascadeserve.simulate import simulate
from cascadeserve.traces import zipf


def _devices(n: int, mb: float) -> list[Device]:
    return [Device(name=f"dev{i}", memory_mb=mb) for i in range(n)]


def test_the_slo_search_steps_in_proportion_then_bisects() -> None:
    lat = SLO(kind="p95_ms", value=20.0)
    search = SloSearch(lat)
    first = search.next(lat, p95_ms=25.0, accuracy=0.9)  # a 25 % miss: 20 · 20/25 · (1 − margin)
    assert first is not None and first.value == pytest.approx(20.0 * 0.8 * (1 - LATENCY_MARGIN))
    # met at 15.68 after missing at 20: bisect (geometrically) between the two
    mid = search.next(first, p95_ms=14.0, accuracy=0.9)
    assert mid is not None and mid.value == pytest.approx(math.sqrt(20.0 * first.value))
    # an overload misses by far more than its SLO is off: the step is bounded
    blown = SloSearch(lat).next(lat, p95_ms=1500.0, accuracy=0.9)
    assert blown is not None and blown.value == pytest.approx(20.0 / MAX_LATENCY_STEP)
    # slack loosens, also bounded
    slack = SloSearch(lat).next(lat, p95_ms=5.0, accuracy=0.9)
    assert slack is not None and slack.value == pytest.approx(20.0 * MAX_LATENCY_STEP)
    acc = SLO(kind="accuracy", value=0.60)
    up = SloSearch(acc).next(acc, p95_ms=1.0, accuracy=0.597)
    assert up is not None and up.value == pytest.approx(0.603 + ACCURACY_MARGIN)
    down = SloSearch(acc).next(acc, p95_ms=1.0, accuracy=0.70)
    assert down is not None and down.value == pytest.approx(0.60 - MAX_ACCURACY_STEP)
    # a replay that meets the SLO almost exactly: another plan would be the same plan
    assert SloSearch(acc).next(acc, p95_ms=1.0, accuracy=0.6 + ACCURACY_MARGIN / 2) is None
    assert shortfall(lat, 19.0, 0.0) < 0 < shortfall(lat, 21.0, 0.0)
    assert shortfall(acc, 1.0, 0.61) < 0 < shortfall(acc, 1.0, 0.59)


def test_a_latency_plan_that_misses_on_its_trace_is_replanned_until_it_meets(toy_profile: Profile) -> None:
    slo, hw, arrivals = SLO(kind="p95_ms", value=20.0), _devices(2, 1000.0), zipf(4000, 10.0, seed=1).arrivals
    plain = Planner(n_ranges=4, seed=1).fit(toy_profile, hw, slo, 4000).plan_
    assert plain is not None
    first = simulate(toy_profile, plain, arrivals)
    assert first.percentile_ms(95) > slo.value  # the scenario: Algorithm 1's per-range checks pass, the trace misses

    # Algorithm 1 with its trace check alone (the static floor keeps a static cascade here: see test_static.py)
    pl = Planner(n_ranges=4, seed=1, static_floor=False).fit(toy_profile, hw, slo, 4000, check_arrivals=arrivals)
    assert pl.plan_ is not None and pl.report_ is not None and pl.report_.trace_check is not None
    check = pl.report_.trace_check
    assert check.met and check.rounds >= 1 and check.requests == len(arrivals) and check.planned_for < slo.value
    assert pl.plan_.slo == slo  # the plan states the user's SLO, its notes the internal one
    assert pl.plan_.notes["planned_for"] == str(SLO(kind="p95_ms", value=check.planned_for))
    again = simulate(toy_profile, pl.plan_, arrivals)  # the replay the check reports, recomputed
    assert again.percentile_ms(95) == pytest.approx(check.p95_ms) and again.percentile_ms(95) <= slo.value
    assert again.accuracy == pytest.approx(check.accuracy)
    # searching both ways keeps a plan at least as accurate as stopping at the first that meets the SLO
    stop_early = Planner(n_ranges=4, seed=1, trace_loosen=False, static_floor=False)
    first_met = stop_early.fit(toy_profile, hw, slo, 4000, check_arrivals=arrivals)
    assert first_met.report_ is not None and first_met.report_.trace_check is not None
    assert first_met.report_.trace_check.met and first_met.report_.trace_check.rounds >= 1
    assert check.accuracy >= first_met.report_.trace_check.accuracy


def test_an_accuracy_plan_that_falls_short_on_its_trace_is_replanned(real_profile: Profile) -> None:
    slo, hw, arrivals = SLO(kind="accuracy", value=0.556), _devices(2, 4.0), zipf(2000, 10.0, seed=2).arrivals
    plain = Planner(n_ranges=4, seed=1).fit(real_profile, hw, slo, 2000).plan_
    assert plain is not None
    first = simulate(real_profile, plain, arrivals)
    assert first.accuracy < slo.value

    pl = Planner(n_ranges=4, seed=1).fit(real_profile, hw, slo, 2000, check_arrivals=arrivals)
    assert pl.plan_ is not None and pl.report_ is not None and pl.report_.trace_check is not None
    check = pl.report_.trace_check
    assert check.met and check.rounds >= 1 and check.planned_for > slo.value
    assert simulate(real_profile, pl.plan_, arrivals).accuracy >= slo.value
    assert pl.plan_.slo == slo and "trace check met" in pl.plan_.notes["trace_check"]
    stop_early = Planner(n_ranges=4, seed=1, trace_loosen=False)
    first_met = stop_early.fit(real_profile, hw, slo, 2000, check_arrivals=arrivals)
    assert first_met.report_ is not None and first_met.report_.trace_check is not None
    assert first_met.report_.trace_check.planned_for == pytest.approx(
        slo.value + (slo.value - first.accuracy) + ACCURACY_MARGIN
    )
    assert check.p95_ms <= first_met.report_.trace_check.p95_ms  # the fastest plan that meets the SLO is kept


# These look at the trace check of Algorithm 1's plan, so the static floor (test_static.py) is off.
def test_when_no_tighter_plan_exists_the_closest_plan_is_kept_and_the_miss_reported(toy_profile: Profile) -> None:
    slo, hw, arrivals = SLO(kind="p95_ms", value=10.0), _devices(2, 1000.0), zipf(8000, 10.0, seed=1).arrivals
    plain = Planner(n_ranges=4, seed=1, static_floor=False).fit(toy_profile, hw, slo, 8000).plan_
    pl = Planner(n_ranges=4, seed=1, static_floor=False).fit(toy_profile, hw, slo, 8000, check_arrivals=arrivals)
    assert pl.report_ is not None and pl.report_.trace_check is not None and pl.plan_ is not None and plain is not None
    check = pl.report_.trace_check
    assert not check.met and check.rounds == 0 and check.planned_for == slo.value
    assert check.p95_ms > slo.value and "MISSED" in pl.plan_.notes["trace_check"]
    assert pl.plan_.gears == plain.gears and pl.report_.feasible


def test_zero_rounds_replays_and_reports_without_replanning(toy_profile: Profile) -> None:
    slo, hw, arrivals = SLO(kind="p95_ms", value=20.0), _devices(2, 1000.0), zipf(4000, 10.0, seed=1).arrivals
    plain = Planner(n_ranges=4, seed=1, static_floor=False).fit(toy_profile, hw, slo, 4000).plan_
    once = Planner(n_ranges=4, seed=1, trace_rounds=0, static_floor=False)
    pl = once.fit(toy_profile, hw, slo, 4000, check_arrivals=arrivals)
    assert pl.report_ is not None and pl.report_.trace_check is not None and pl.plan_ is not None and plain is not None
    assert not pl.report_.trace_check.met and pl.report_.trace_check.rounds == 0
    assert pl.plan_.gears == plain.gears
    with pytest.raises(ValueError, match="trace_rounds"):
        Planner(trace_rounds=-1)


def test_an_infeasible_user_slo_still_raises(toy_profile: Profile) -> None:
    arrivals = zipf(4000, 5.0, seed=1).arrivals
    with pytest.raises(InfeasibleError):
        Planner(n_ranges=4, seed=1).fit(
            toy_profile, _devices(1, 1000.0), SLO(kind="p95_ms", value=0.01), 4000, check_arrivals=arrivals
        )
