"""The event simulator: exact trajectories on tiny scenarios, and invariants on random ones."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cascadeserve.cascade import Cascade
from cascadeserve.plan import SLO, Device, Gear, GearPlan, GearReplica, Replica, fixed_plan
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve
from cascadeserve.simulate import BatchRecord, simulate


def tiny_profile() -> Profile:
    """Two models, two samples. m0 is sure of sample 0 only; both models are right on both samples."""
    models = (
        ModelProfile("m0", 10.0, RuntimeCurve((1, 2), (10.0, 15.0))),
        ModelProfile("m1", 10.0, RuntimeCurve((1, 2), (20.0, 30.0))),
    )
    return Profile(
        name="tiny",
        models=models,
        sample_ids=np.array([0, 1]),
        labels=np.array([1, 0]),
        predictions=np.array([[1, 0], [1, 0]]),
        certainties=np.array([[0.9, 0.1], [0.5, 0.5]]),
    )


def one_device_plan(
    profile: Profile, min_queue: int = 1, max_wait_ms: float | None = None, max_batch: int | None = None
) -> GearPlan:
    return fixed_plan(
        profile,
        Cascade(("m0", "m1"), (0.5,)),
        [Device(name="d0", memory_mb=100)],
        min_queue=min_queue,
        max_wait_ms=max_wait_ms,
        max_batch=max_batch,
    )


def test_two_requests_one_device_exact_trajectory() -> None:
    prof = tiny_profile()
    res = simulate(prof, one_device_plan(prof), [0.0, 0.001], record_batches=True)
    # r0 runs alone on m0 (0-10 ms) and is answered; r1 waits, runs on m0 (10-20 ms), is unsure, runs on m1.
    assert res.finish.tolist() == pytest.approx([0.010, 0.040])
    assert res.answer_stage.tolist() == [0, 1]
    assert res.answer_row.tolist() == [0, 1]
    assert res.correct.tolist() == [True, True]
    assert res.batches == [
        BatchRecord(0.0, pytest.approx(0.010), 0, 0, 0, 1, 1),
        BatchRecord(pytest.approx(0.010), pytest.approx(0.020), 0, 0, 0, 1, 0),
        BatchRecord(pytest.approx(0.020), pytest.approx(0.040), 0, 1, 1, 1, 1),
    ]


def test_minimum_queue_length_batches_requests() -> None:
    prof = tiny_profile()
    res = simulate(prof, one_device_plan(prof, min_queue=2), [0.0, 0.004], record_batches=True)
    # The batch fires when the second request arrives: m0 on both (4-19 ms); sample 1 moves to m1, whose queue
    # also needs two samples, so it waits until the trace ends (the end of the last 100 ms tick) and then drains.
    assert [(round(b.start, 6), round(b.end, 6), b.row, b.size) for b in res.batches] == [
        (0.004, 0.019, 0, 2),
        (0.1, 0.12, 1, 1),
    ]
    assert res.finish.tolist() == pytest.approx([0.019, 0.12])


def test_max_wait_flushes_a_short_queue() -> None:
    prof = tiny_profile()
    res = simulate(prof, one_device_plan(prof, min_queue=5, max_wait_ms=5.0), [0.0, 0.2], record_batches=True)
    starts = [round(b.start, 6) for b in res.batches if b.row == 0]
    # Without max-wait the first request would wait for four more; with it, it fires 5 ms after arriving.
    assert starts == [0.005, 0.205]


def test_max_batch_caps_and_keeps_order() -> None:
    prof = tiny_profile()
    arrivals = [0.0, 0.0001, 0.0002, 0.0003]
    res = simulate(prof, one_device_plan(prof, min_queue=1, max_batch=2), arrivals, record_batches=True)
    assert all(b.size <= 2 for b in res.batches)
    assert res.completed == 4
    # First batch is request 0 alone (the queue had one sample), then the two oldest of the three that waited.
    m0 = [b for b in res.batches if b.row == 0]
    assert [b.size for b in m0] == [1, 2, 1]


def test_two_devices_share_load() -> None:
    prof = tiny_profile()
    plan = fixed_plan(prof, Cascade(("m0",), ()), [Device(name="a", memory_mb=100), Device(name="b", memory_mb=100)])
    res = simulate(prof, plan, [0.0, 0.0, 0.0, 0.0], record_batches=True)
    # Even split: requests alternate between the devices; each takes its whole queue (2) as one batch at t=0.
    assert sorted((b.device, round(b.start, 6), b.size) for b in res.batches) == [(0, 0.0, 2), (1, 0.0, 2)]
    assert res.finish.tolist() == pytest.approx([0.015] * 4)


def test_low_load_accuracy_equals_vectorised_evaluation(toy_profile: Profile) -> None:
    casc = Cascade(("m0", "m1", "m2"), (0.3, 0.2))
    plan = fixed_plan(toy_profile, casc, [Device(name="d", memory_mb=1000)])
    n = 2 * toy_profile.n_samples  # cycle the records exactly twice
    res = simulate(toy_profile, plan, np.arange(n) * 0.05)
    assert res.accuracy == casc.evaluate(toy_profile).accuracy[0]
    reach = casc.evaluate(toy_profile).reach[0]
    answered = np.bincount(res.answer_stage, minlength=3) / n
    assert answered.tolist() == pytest.approx([reach[0] - reach[1], reach[1] - reach[2], reach[2]])


def two_gear_plan(profile: Profile, *, alpha: float = 8.0) -> GearPlan:
    """Below 100 QPS the accurate cascade; above it, the cheapest model alone."""
    reps = tuple(Replica(model=m, device="d") for m in ("m0", "m1", "m2"))
    low = Gear(
        qps_low=0,
        qps_high=100,
        models=("m0", "m1", "m2"),
        thresholds=(0.3, 0.2),
        replicas=tuple(GearReplica(model=r.model, device=r.device, share=1.0) for r in reps),
    )
    high = Gear(
        qps_low=100,
        qps_high=10_000,
        models=("m0",),
        replicas=(GearReplica(model="m0", device="d", min_queue=4, share=1.0),),
    )
    return GearPlan(
        profile=profile.name,
        devices=(Device(name="d", memory_mb=1000),),
        replicas=reps,
        gears=(low, high),
        alpha=alpha,
        slo=SLO(kind="p95_ms", value=100),
    )


def test_gear_switches_up_under_a_step_and_back_down(toy_profile: Profile) -> None:
    # 20 QPS for 2 s, 400 QPS for 2 s, 20 QPS for 4 s (uniform arrivals).
    arr = np.concatenate([np.arange(40) / 20, 2 + np.arange(800) / 400, 4 + np.arange(80) / 20])
    res = simulate(toy_profile, two_gear_plan(toy_profile), arr)
    assert res.completed == len(arr)
    assert res.tick_gear[5] == 0  # 0.5 s: low load
    assert res.tick_gear[30] == 1  # 3.0 s: high load
    assert res.tick_gear[-1] == 0  # back to the accurate gear once the backlog drained
    # Requests admitted during the burst use the cheap cascade (answered by m0 only).
    burst = (res.arrivals >= 2.2) & (res.arrivals < 3.9)
    assert set(res.answer_row[burst].tolist()) == {0}


def test_hysteresis_holds_the_fast_gear_while_a_backlog_drains(toy_profile: Profile) -> None:
    # A burst of 2000 requests in 0.5 s at the end of which load drops: with a huge alpha the producer never
    # downgrades while anything is queued; with alpha = 0 it downgrades at once.
    arr = np.concatenate([np.linspace(0, 0.5, 2000, endpoint=False), 0.5 + np.arange(60) / 20])
    held = simulate(toy_profile, two_gear_plan(toy_profile, alpha=1e9), arr)
    free = simulate(toy_profile, two_gear_plan(toy_profile, alpha=0.0), arr)
    first_low = lambda r: int(np.argmax((r.tick_times > 0.5) & (r.tick_gear == 0)))  # noqa: E731
    assert first_low(held) > first_low(free)
    # With the huge alpha, the downgrade happens only once the first stage's queue is empty.
    assert held.tick_q0[first_low(held)] == 0


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[float], int, int, int | None, float | None]:
    n = draw(st.integers(1, 60))
    gaps = draw(st.lists(st.floats(0.0, 0.02), min_size=n, max_size=n))
    arrivals = np.cumsum(gaps).tolist()
    devices = draw(st.integers(1, 3))
    min_queue = draw(st.integers(1, 6))
    max_batch = draw(st.one_of(st.none(), st.integers(1, 8)))
    max_wait = draw(st.one_of(st.none(), st.floats(0.1, 50.0)))
    return arrivals, devices, min_queue, max_batch, max_wait


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenarios(), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_invariants(toy_profile: Profile, sc: tuple, t1: float, t2: float) -> None:  # type: ignore[type-arg]
    arrivals, devices, min_queue, max_batch, max_wait = sc
    plan = fixed_plan(
        toy_profile,
        Cascade(("m0", "m1", "m2"), (t1, t2)),
        [Device(name=f"d{i}", memory_mb=1000) for i in range(devices)],
        min_queue=min_queue,
        max_batch=max_batch,
        max_wait_ms=max_wait,
    )
    res = simulate(toy_profile, plan, arrivals, record_batches=True)
    # Every arrival completes exactly once: each request is answered by exactly one batch.
    assert res.completed == len(arrivals)
    assert sum(b.answered for b in res.batches) == len(arrivals)
    # Latency is at least the service time of every stage the request went through (at batch size 1).
    one = np.array([m.runtime.seconds(1) for m in toy_profile.models])
    service = np.cumsum(one)[res.answer_stage]
    assert np.all(res.latency_s >= service - 1e-9)
    # A device never runs two batches at once.
    for d in range(devices):
        spans = sorted((b.start, b.end) for b in res.batches if b.device == d)
        assert all(a[1] <= b[0] + 1e-12 for a, b in itertools.pairwise(spans))
    if max_batch is not None:
        assert all(b.size <= max_batch for b in res.batches)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.floats(0.0, 0.9), st.floats(0.01, 0.1))
def test_raising_a_threshold_never_lowers_reach(toy_profile: Profile, t: float, dt: float) -> None:
    arr = np.arange(toy_profile.n_samples) * 0.05
    dev = [Device(name="d", memory_mb=1000)]
    lo = simulate(toy_profile, fixed_plan(toy_profile, Cascade(("m0", "m1"), (t,)), dev), arr)
    hi = simulate(toy_profile, fixed_plan(toy_profile, Cascade(("m0", "m1"), (min(1.0, t + dt),)), dev), arr)
    assert np.count_nonzero(hi.answer_stage == 1) >= np.count_nonzero(lo.answer_stage == 1)


def test_rejects_unsorted_arrivals(toy_profile: Profile) -> None:
    plan = fixed_plan(toy_profile, Cascade(("m0",), ()), [Device(name="d", memory_mb=1000)])
    with pytest.raises(ValueError, match="sorted"):
        simulate(toy_profile, plan, [0.2, 0.1])


def test_empty_trace(toy_profile: Profile) -> None:
    plan = fixed_plan(toy_profile, Cascade(("m0",), ()), [Device(name="d", memory_mb=1000)])
    res = simulate(toy_profile, plan, [])
    assert res.completed == 0
    assert res.summary()["requests"] == 0
    assert math.isfinite(res.summary()["p95_ms"])


def test_batch_overhead_adds_to_every_batch() -> None:
    prof = tiny_profile()
    plan = one_device_plan(prof).model_copy(update={"batch_overhead_ms": 5.0})
    res = simulate(prof, plan, [0.0, 0.001], record_batches=True)
    # As in the first trajectory, with 5 ms more per batch: 0-15 ms, 15-30 ms (m0), 30-55 ms (m1).
    assert [(round(b.start, 6), round(b.end, 6)) for b in res.batches] == [(0.0, 0.015), (0.015, 0.03), (0.03, 0.055)]
    assert res.finish.tolist() == pytest.approx([0.015, 0.055])
