"""The admission and deadline decisions: accept, shed with a retry hint, refuse as too large; fall back or fail."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadeserve.policy import (
    DEFAULT_SLO_MS,
    AdmissionDecision,
    AdmissionPolicy,
    DeadlineDecision,
    DrainMeter,
    Readiness,
    WaitBudget,
    on_deadline,
    readiness,
)


def test_verdicts() -> None:
    p = AdmissionPolicy(4, retry_after_s=2.5)
    assert p.decide(4, 0) == AdmissionDecision("accept", 4, 0, 4)
    assert p.decide(1, 4) == AdmissionDecision("shed", 1, 4, 4, 2.5)
    assert p.decide(5, 0) == AdmissionDecision("too_large", 5, 0, 4)
    assert "exceeds the admission capacity of 4" in p.decide(5, 0).reason()
    assert p.decide(1, 4).reason() == "admission queue full (4 of 4 in flight)"
    assert AdmissionPolicy(None).decide(10**9, 10**9).accepted


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        AdmissionPolicy(0)
    with pytest.raises(ValueError, match="positive"):
        AdmissionPolicy(4, retry_after_s=0)


@given(st.integers(1, 50), st.integers(0, 60), st.integers(1, 60))
def test_accepted_calls_never_exceed_the_capacity_and_too_large_never_fits(cap: int, in_flight: int, n: int) -> None:
    d = AdmissionPolicy(cap).decide(n, min(in_flight, cap))
    assert d.accepted == (min(in_flight, cap) + n <= cap)
    assert (d.verdict == "too_large") == (n > cap)
    assert (d.retry_after_s is not None) == (d.verdict == "shed")


def test_deadline_falls_back_to_the_last_stage_that_ran_or_fails() -> None:
    assert on_deadline(2) == DeadlineDecision(2) and not on_deadline(2).fails
    assert on_deadline(None).fails


def test_admission_by_time_derives_the_bound_from_capacity_and_slo() -> None:
    # 160 QPS, p95 SLO 100 ms, at most 2 SLOs of wait: 32 requests may be in flight.
    budget = WaitBudget.from_plan(160.0, 100.0, max_wait_slos=2.0)
    assert budget.cap == 32 and budget.max_wait_s == pytest.approx(0.2)
    p = AdmissionPolicy(4096, budget=budget)
    assert p.limit == 32
    assert p.decide(32, 0).accepted
    shed = p.decide(10, 30)
    assert shed.verdict == "shed" and shed.capacity == 32
    assert shed.retry_after_s == 1.0  # 8 over the bound drain in 50 ms: HTTP's floor of one second
    far = AdmissionPolicy(None, budget=WaitBudget(10.0, 1.0, 1.0)).decide(5, 10)  # 5 over at 10 QPS: 0.5 s -> 1 s
    assert far.retry_after_s == 1.0
    slow = AdmissionPolicy(None, budget=WaitBudget(2.0, 1.0, 10.0))  # 20 in flight max; 30 over drain in 15 s
    assert slow.decide(30, 20).verdict == "too_large"
    assert slow.decide(10, 40).retry_after_s == 15.0
    assert p.decide(33, 0).verdict == "too_large"  # larger than the time bound itself: 413, never retried
    # the count bound still holds when it is tighter; no SLO in the plan: DEFAULT_SLO_MS stands in
    assert AdmissionPolicy(8, budget=budget).limit == 8
    assert WaitBudget.from_plan(10.0, None).slo_s == DEFAULT_SLO_MS / 1000.0
    assert WaitBudget.from_plan(1e9, 100.0, capacity_qps=50.0).cap == 10


def test_a_lagging_front_door_sheds_once_a_quarter_of_the_bound_is_in_flight() -> None:
    # 100 QPS, SLO 100 ms, 2 SLOs of wait: a bound of 20; the loop may run 50 ms (half an SLO) late
    p = AdmissionPolicy(None, budget=WaitBudget(100.0, 0.1, 2.0))
    assert p.limit == 20 and p.budget is not None and p.budget.max_lag_s == pytest.approx(0.05)
    lagging = p.decide(1, 5, lag_s=0.06)  # 5 in flight: a quarter of the bound
    assert lagging.verdict == "shed" and lagging.lag_s == 0.06 and lagging.retry_after_s == 1.0
    assert lagging.reason() == "the front door is 60 ms behind (5 in flight)"
    assert p.decide(1, 4, lag_s=0.06).accepted  # a lone request on a host that paused is served
    assert p.decide(1, 5, lag_s=0.05).accepted  # at the limit, not past it
    assert p.decide(1, 19, lag_s=2.4).retry_after_s == 3.0  # told to come back when the loop has caught up
    assert p.decide(21, 5, lag_s=0.06).verdict == "too_large"  # no wait makes 21 fit: 413 as ever
    full = p.decide(1, 20, lag_s=0.0)
    assert full.verdict == "shed" and full.lag_s == 0.0 and full.reason().startswith("admission queue full")
    # without admission by time there is no SLO to measure lateness against: the count bound alone
    assert AdmissionPolicy(20).decide(1, 19, lag_s=5.0).accepted
    with pytest.raises(ValueError, match="positive finite"):
        WaitBudget(100.0, 0.1, 2.0, max_lag_slos=0.0)


def test_bad_budgets_are_refused() -> None:
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="positive finite"):
            WaitBudget(bad, 1.0)


@given(st.floats(0.5, 1e5), st.floats(1.0, 5000.0), st.floats(0.1, 10.0), st.integers(0, 10**6), st.integers(1, 500))
def test_time_bound_admits_only_what_drains_in_the_budget(
    qps: float, slo_ms: float, slos: float, in_flight: int, n: int
) -> None:
    budget = WaitBudget(qps, slo_ms / 1000.0, slos)
    p = AdmissionPolicy(None, budget=budget)
    d = p.decide(n, in_flight)
    if d.accepted:  # the last row admitted waits behind everything before it: within the budget (one row's slack)
        assert budget.wait_s(in_flight + n - 1) <= budget.max_wait_s + 1.0 / qps
    elif d.verdict == "shed":
        assert d.retry_after_s is not None and d.retry_after_s >= 1.0
        assert d.retry_after_s >= budget.wait_s(in_flight + n - budget.cap) - 1e-9
    # the bulk form agrees with deciding one row at a time
    k = p.admits(n, in_flight)
    assert all(p.decide(1, in_flight + i).accepted for i in range(k))
    assert k == n or not p.decide(1, in_flight + k).accepted


def test_readiness_reasons() -> None:
    assert readiness(True, None, 0.1, None) == Readiness(True)
    assert readiness(True, 0.05, 0.1, None).ready  # full for less than a tick: a burst, still ready
    r = readiness(True, 0.35, 0.1, None)
    assert not r.ready and "admission has been full for 0.3 s" in r.reason
    assert readiness(True, None, 0.1, "device 'd0' has run one batch for 12.0 s") == Readiness(
        False, "device 'd0' has run one batch for 12.0 s"
    )
    assert readiness(False, None, 0.1, None) == Readiness(False, "the server is stopping")


class _Server:
    """Feeds a meter as the runtime does: an arrival every 10 ms, a given backlog, answers leaving at a rate."""

    def __init__(self, meter: DrainMeter) -> None:
        self.meter, self.t, self.done = meter, 0.0, 0.0

    def run(self, seconds: float, rate: float, in_flight: int, bound: int | None) -> float | None:
        for _ in range(round(seconds / 0.01)):
            self.meter.observe(self.t, round(self.done), in_flight, bound)
            self.t += 0.01
            self.done += 0.01 * rate
        return self.meter.qps


def test_drain_meter_reads_nothing_below_the_bound() -> None:
    """At moderate load answers leave as fast as requests come: that is not the capacity (the spiral the GPU run
    hit: 2 of 30 in flight at 100 answers/s must not shrink the bound to 100 QPS's worth)."""
    meter = DrainMeter()
    assert _Server(meter).run(5.0, 100.0, in_flight=2, bound=30) is None
    policy = AdmissionPolicy(None, budget=WaitBudget(300.0, 0.05, 2.0))  # bound: 300/s x 0.1 s = 30
    assert policy.bound(meter.qps) == 30
    # the old reading (any backlog counts) would have taken the arrival rate for the capacity
    legacy = DrainMeter()
    assert _Server(legacy).run(5.0, 100.0, in_flight=2, bound=None) == pytest.approx(100.0, rel=0.02)
    assert policy.bound(legacy.qps) == 10


def test_drain_meter_reads_a_saturated_server_and_recovers() -> None:
    meter = DrainMeter()  # half the bound or more counts as saturated
    server = _Server(meter)
    assert server.run(2.0, 150.0, in_flight=15, bound=30) == pytest.approx(150.0, rel=0.02)  # slower than planned
    policy = AdmissionPolicy(None, budget=WaitBudget(300.0, 0.05, 2.0))
    bound = policy.bound(meter.qps)
    assert bound == 15
    # it speeds up again (a cold cache warmed): at its new bound it drains 280/s, and the estimate climbs back
    estimates = []
    for _ in range(6):
        estimates.append(server.run(0.5, 280.0, in_flight=bound, bound=bound))
        bound = policy.bound(meter.qps)
    assert estimates == sorted(estimates) and estimates[-1] == pytest.approx(280.0, rel=0.05)
    assert bound == 27  # floor(0.1 s x an estimate of 270-280/s): back from 15 to within 10 % of the plan's 30


def _overload_then_calm(
    meter: DrainMeter, policy: AdmissionPolicy, shape: tuple[float, float, float, float, float], seed: int
) -> tuple[int, int]:
    """A server of the plan's capacity (300/s) under ``over`` x that load for ``over_s`` while it drains only
    ``slow`` of its capacity (a busy host, a lagging front door), then ``calm`` of what it drains afterwards
    (``after`` of the plan's). Calls of 1 or 2 rows; answers leave at the drain rate (fluid). Returns the rows shed
    in the calm phase's first 10 s and in the 10 s after."""
    over, over_s, slow, after, calm = shape
    rng = random.Random(seed)
    cap, dt = 300.0, 0.005
    t, in_flight, done, credit = 0.0, 0, 0, 0.0
    shed = [0, 0]
    end = over_s + 20.0
    while t < end:
        overload = t < over_s
        rate = cap * (slow if overload else after)
        load = cap * over if overload else rate * calm
        if rng.random() < load * dt / 1.5:  # a call of 1.5 rows on average
            n = rng.choice((1, 2))
            drain = meter.observe(t, done, in_flight, policy.bound(meter.qps), policy.budget.capacity_qps)  # type: ignore[union-attr]
            if policy.decide(n, in_flight, drain).accepted:
                in_flight += n
            elif not overload:
                shed[0 if t < over_s + 10.0 else 1] += n
        credit = min(credit + rate * dt, float(in_flight))
        k = int(credit)
        credit -= k
        in_flight, done = in_flight - k, done + k
        t += dt
    return shed[0], shed[1]


@settings(max_examples=25, deadline=None)
@given(
    over=st.floats(1.5, 4.0),
    over_s=st.floats(1.0, 20.0),
    slow=st.floats(0.005, 1.0),
    after=st.floats(0.6, 1.0),
    calm=st.floats(0.05, 0.5),
    seed=st.integers(0, 2**16),
)
def test_after_an_overload_ends_shedding_stops_within_seconds(
    over: float, over_s: float, slow: float, after: float, calm: float, seed: int
) -> None:
    """Whatever the overload read as the drain rate (down to a bound of one request), once the load falls below
    what the server drains, the bound recovers: nothing is shed 10 s on, a call of 2 rows included."""
    policy = AdmissionPolicy(None, budget=WaitBudget(300.0, 0.05, 2.0))  # bound 30 at the plan's capacity
    _, late = _overload_then_calm(DrainMeter(), policy, (over, over_s, slow, after, calm), seed)
    assert late == 0


def test_without_recovery_a_bound_of_one_never_rises_again() -> None:
    """The defect recovery fixes: an overload that drained 1 % of the plan leaves a bound of 1, which a light load
    never saturates for a whole window, so without a ceiling to recover toward every 2-row call is shed for good."""
    policy = AdmissionPolicy(None, budget=WaitBudget(300.0, 0.05, 2.0))

    class Stuck(DrainMeter):
        def observe(
            self,
            now: float,
            answered_total: int,
            in_flight: int,
            bound: int | None = None,
            ceiling: float | None = None,
        ) -> float | None:
            return super().observe(now, answered_total, in_flight, bound, None)

    _, late = _overload_then_calm(Stuck(), policy, (3.0, 10.0, 0.01, 1.0, 0.25), 7)
    assert late > 0
    _, late = _overload_then_calm(DrainMeter(), policy, (3.0, 10.0, 0.01, 1.0, 0.25), 7)
    assert late == 0
