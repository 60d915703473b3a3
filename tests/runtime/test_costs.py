"""The runtime's cost monitor: what it keeps of each answer beside each batch (the hop; batches are covered where
the server's costs are read: tests/cli/test_calibrate_cli.py, tests/http)."""

from __future__ import annotations

import asyncio

import pytest

from cascadeserve.profile import Profile
from cascadeserve.runtime.costs import CostMonitor
from cascadeserve.runtime.observer import BatchEvent
from cascadeserve.runtime.request import Answer, Request, ServingError


class _Gen:
    def release(self, req: Request, answer: Answer | None, error: ServingError | None) -> None:
        pass

    def answer_early(self, req: Request, now: float, error: ServingError) -> bool:
        return False


def _answered(
    mon: CostMonitor, arrival: float, now: float, stage: int, queue_s: float, compute_s: float, **kw: bool
) -> None:
    loop = asyncio.new_event_loop()
    try:
        req = Request(0, None, arrival, _Gen(), 0, loop.create_future())
        ans = Answer(1, 0.9, "m0", stage, 0, queue_s, compute_s, now, **kw)
        mon.answered(req, ans, None, now)
    finally:
        loop.close()


def test_first_stage_answers_time_beyond_their_server_time_is_the_hop(toy_profile: Profile) -> None:
    mon = CostMonitor(toy_profile, backend="ray")
    for i in range(99):  # 1 ms .. 99 ms beyond 3 ms in queues and batches
        _answered(mon, 10.0, 10.0 + 0.003 + (i + 1) / 1000.0, 0, 0.001, 0.002)
    _answered(mon, 10.0, 11.0, 1, 0.0, 0.0)  # a later stage: more than one hop, not counted
    _answered(mon, 10.0, 11.0, 0, 0.0, 0.0, cached=True)  # never left the front end
    _answered(mon, 10.0, 11.0, 0, 0.0, 0.0, fallback=True)  # its time is its deadline's
    mon.answered(Request(0, None, 0.0, _Gen(), 0, None), None, ServingError("x", 503), 1.0)  # type: ignore[arg-type]
    hop = mon.snapshot()["hop"]
    assert mon.snapshot()["backend"] == "ray" and hop["answers"] == 99
    # the top 1 % (one value: 99 ms) left out: 1..98 ms, mean 49.5, p95 by linear interpolation
    assert hop["mean_ms"] == pytest.approx(49.5, abs=1e-6)
    assert hop["p95_ms"] == pytest.approx(1 + 0.95 * 97, abs=1e-6)
    mon.recalibrated(toy_profile, 20.0)  # a new plan's costs: the hop is measured afresh too
    assert mon.snapshot()["hop"] == {"answers": 0, "mean_ms": 0.0, "p95_ms": 0.0}


def test_the_snapshot_gives_each_models_batch_ratios_mean_median_and_p95(toy_profile: Profile) -> None:
    mon = CostMonitor(toy_profile)
    profiled_s = toy_profile.model("m0").runtime.ms_of(1) / 1000.0
    for i in range(100):  # ratios 1.01 .. 2.00
        ratio = 1.0 + (i + 1) / 100.0
        kw = {"device": 0, "replica": 0, "row": 0, "size": 1, "answered": 1, "device_name": "d0", "generation": 0}
        mon.batch(BatchEvent(start=float(i), end=float(i) + ratio * profiled_s, model="m0", **kw))
    row = next(m for m in mon.snapshot()["models"] if m["model"] == "m0")
    assert row["batches"] == 100
    assert row["factor_vs_profile"] == pytest.approx(1.505, abs=1e-9)
    assert row["mean_factor_vs_profile"] == pytest.approx(1.5, abs=1e-9)  # the top 1 % (2.00) left out
    assert row["p95_factor_vs_profile"] == pytest.approx(1.01 + 0.95 * 0.99, abs=1e-9)


def test_the_snapshot_gives_a_factor_per_batch_size_seen_often_enough(toy_profile: Profile) -> None:
    """Batches of 1 ran x1.1 and of 2 ran x1.4 (the other devices idle, so nothing to take out for contention);
    three batches of 4 are too few for a factor of their own. ``profile calibrate`` scales each size by its own."""
    mon = CostMonitor(toy_profile, devices=2)
    kw = {"device": 0, "replica": 0, "row": 0, "answered": 1, "device_name": "d0", "generation": 0}
    t = 0.0
    for size, ratio, n in ((1, 1.1, 30), (2, 1.4, 12), (4, 2.0, 3)):
        profiled_s = toy_profile.model("m0").runtime.ms_of(size) / 1000.0
        for _ in range(n):
            mon.batch(BatchEvent(start=t, end=t + ratio * profiled_s, model="m0", size=size, **kw))
            t += 1.0
    row = next(m for m in mon.snapshot()["models"] if m["model"] == "m0")
    assert row["batches"] == 45 and row["busy_factor"] is None  # no spread of host load: no contention fit
    assert row["size_factors"] == {"1": pytest.approx(1.1), "2": pytest.approx(1.4)}


def _batches(mon: CostMonitor, prof: Profile, model: str, by_size: dict[int, float], t0: float, n: int) -> float:
    """``n`` batches of each size of ``model``, alternating, one per 0.1 s from ``t0``, each running its profiled
    time times ``by_size[size]``; returns the time after the last."""
    kw = {"device": 0, "replica": 0, "row": 0, "answered": 1, "device_name": "d0", "generation": 0}
    t = t0
    for _ in range(n):
        for size, ratio in by_size.items():
            seconds = ratio * prof.model(model).runtime.ms_of(size) / 1000.0
            mon.batch(BatchEvent(start=t, end=t + seconds, model=model, size=size, **kw))
            t += 0.1
    return t


def test_a_cost_drift_recalibrates_the_departed_model_by_batch_size_from_the_profile(toy_profile: Profile) -> None:
    """Batches of 1 run x1.1 and batches of 8 run x2: a re-plan with measured costs prices each size by its own
    factor, from the profile's runtimes (flat past the largest size seen), and keeps the other models' costs."""
    from cascadeserve.policy.costs import CostDrift, CostSettings

    settings = CostSettings(tolerance=0.25, window_s=10.0, sustain_s=0.0, min_batches=5, cooldown_s=0.0)
    mon = CostMonitor(toy_profile, settings)
    drifts: list[CostDrift] = []
    mon.listeners.append(drifts.append)
    t = _batches(mon, toy_profile, "m0", {1: 1.1, 8: 2.0}, 0.0, 20)
    _batches(mon, toy_profile, "m1", {1: 1.0}, 0.0, 20)
    mon.on_tick(t, 1.0)
    (drift,) = drifts
    assert [c.model for c in drift.departed] == ["m0"]
    cal = mon.calibrated(drift, "here")
    before, after = toy_profile.model("m0").runtime, cal.model("m0").runtime
    ratios = [a / b for a, b in zip(after.ms, before.ms, strict=True)]
    assert after.batch_sizes == before.batch_sizes == (1, 8, 64)
    assert ratios == pytest.approx([1.1, 2.0, 2.0])
    assert cal.model("m1") == toy_profile.model("m1")
    assert cal.calibration.startswith("runtimes m0 by batch size 1:x1.1 8:x2 as measured on here")
    # in force from now: batches at the recalibrated costs are no drift, and the applied factor is the curve's mean
    mon.recalibrated(cal, t)
    assert mon.applied["m0"] == pytest.approx((1.1 + 2.0 + 2.0) / 3) and mon.applied["m1"] == 1.0
    t = _batches(mon, toy_profile, "m0", {1: 1.1, 8: 2.0}, t, 20)
    mon.on_tick(t, 1.0)
    assert len(drifts) == 1
    # a later drift of another model keeps m0's recalibrated curve and says what came before
    t = _batches(mon, toy_profile, "m1", {1: 3.0}, t, 20)
    mon.on_tick(t, 1.0)
    assert [c.model for c in drifts[-1].departed] == ["m1"]
    cal2 = mon.calibrated(drifts[-1], "there")
    assert cal2.model("m0") == cal.model("m0")
    assert cal2.model("m1").runtime.ms == pytest.approx(tuple(3.0 * v for v in toy_profile.model("m1").runtime.ms))
    assert cal2.calibration.startswith("runtimes m1 x3 as measured on there; before that: runtimes m0 by batch size")
