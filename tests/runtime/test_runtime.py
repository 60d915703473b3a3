"""Runtime behaviour on a fake clock: gear switches under a load step, hysteresis, deadlines, hot-swap, stop."""

from __future__ import annotations

import asyncio
import contextlib

import numpy as np
import pytest
from tests.runtime.runtime_helpers import step_arrivals, two_gear_plan

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve
from cascadeserve.runtime import (
    DeadlineExceeded,
    FakeClock,
    Overloaded,
    Recorder,
    Request,
    RuntimeOptions,
    RuntimeStopped,
    emulated_runtime,
)


async def _drive(clock: FakeClock, submit_at: list[float], submit: object) -> None:
    for t in submit_at:
        await clock.advance_to(t)
        submit()  # type: ignore[operator]


def test_gear_switches_up_under_a_step_and_holds_while_backlog_drains(toy_profile: Profile) -> None:
    async def main() -> tuple[Recorder, list[Request]]:
        clock = FakeClock()
        rec = Recorder()
        # Gear 1 (m0 alone, batches of 4) above 60 QPS; alpha 8.
        rt = emulated_runtime(toy_profile, two_gear_plan(low_high=60.0, max_wait_ms=15.0), clock=clock, observer=rec)
        await rt.start()
        reqs: list[Request] = []
        for i, t in enumerate(step_arrivals(20, 400, at=1.0, duration=2.0)):
            await clock.advance_to(float(t))
            reqs += rt.submit([i % toy_profile.n_samples])
        await clock.advance_to(3.0)
        await rt.stop(grace_s=0.0)
        return rec, reqs

    rec, reqs = asyncio.run(main())
    gears = [t.decision.gear for t in rec.ticks]
    # ticks at 0.1 .. 1.0 see 20 QPS: gear 0; once the step's first window closes (t = 1.1): gear 1.
    assert set(gears[:10]) == {0}
    assert gears[10:19] == [1] * 9
    assert [t.time for t in rec.ticks[:3]] == [0.1, 0.2, 0.30000000000000004]
    answers = [r.future.result() for r in reqs]
    assert {a.gear for a in answers if a.finished < 1.0} == {0}
    assert {a.model for a in answers if a.gear == 1} == {"m0"}
    switches = [t for t in rec.ticks if t.switched]
    assert switches[0].time == pytest.approx(1.1)
    # after the load stops the gear drops back, once qps >= alpha * Q0 (queues are empty by then)
    assert gears[-1] == 0


def test_hysteresis_holds_gear_while_q0_is_large(toy_profile: Profile) -> None:
    async def main() -> list[tuple[int, int, bool]]:
        clock = FakeClock()
        rec = Recorder()
        # A first stage that needs 64 samples per batch and waits up to 10 s builds a backlog (Q0 large).
        plan = two_gear_plan(low_high=60.0, min_queue_fast=64, max_wait_ms=10_000.0)
        rt = emulated_runtime(toy_profile, plan, clock=clock, observer=rec)
        await rt.start()
        for i, t in enumerate(np.linspace(0.0, 0.5, 100, endpoint=False)):
            await clock.advance_to(float(t))
            rt.submit([i])
        await clock.advance_to(0.75)
        await rt.stop(grace_s=0.0)
        return [(t.decision.gear, t.decision.q0, t.decision.held) for t in rec.ticks]

    ticks = asyncio.run(main())
    assert ticks[1][0] == 1  # 200 QPS: gear 1
    # after arrivals stop, qps = 0 < 8 * Q0: the gear is held, and the decision says so
    assert any(g == 1 and held and q0 > 0 for g, q0, held in ticks[5:])


def _slow_profile(base: Profile) -> Profile:
    models = (
        ModelProfile("m0", 100.0, RuntimeCurve((1,), (2.0,))),
        ModelProfile("m1", 100.0, RuntimeCurve((1,), (50.0,))),
    )
    return Profile(
        "slow", models, base.sample_ids, base.labels, base.predictions[:2].copy(), base.certainties[:2].copy()
    )


def test_deadline_fallback_and_504(toy_profile: Profile) -> None:
    prof = _slow_profile(toy_profile)
    plan = fixed_plan(prof, Cascade(("m0", "m1"), (1.0,)), (Device(name="d0", memory_mb=1000),))

    async def main() -> tuple[list[Request], Recorder]:
        clock = FakeClock()
        rec = Recorder()
        rt = emulated_runtime(prof, plan, clock=clock, observer=rec, options=RuntimeOptions(run_producer=False))
        await rt.start()
        a = rt.submit([5], timeout_s=0.010)  # m0 runs 0-2 ms, m1 2-52 ms: deadline at 10 ms -> fallback
        await clock.advance_to(0.001)
        b = rt.submit([6], timeout_s=0.003)  # deadline at 4 ms
        await clock.run_until_idle()
        return a + b, rec

    (a, b), rec = asyncio.run(main())
    ans = a.future.result()
    assert ans.fallback and ans.model == "m0" and ans.label == prof.predictions[0, 5]
    assert ans.finished == pytest.approx(0.010)
    assert ans.compute_s == pytest.approx(0.002)
    # At 2 ms the device picks the older head: b (queued at 1 ms) before a's forward (2 ms). b's m0 batch ends
    # at 4 ms, the instant of b's deadline; the deadline timer was armed first, so it fires first, and with no
    # stage finished that is a 504.
    with pytest.raises(DeadlineExceeded):
        b.future.result()
    assert rec.n_answered + rec.n_failed == rec.n_admitted == 2
    assert rec.n_duplicates == 2  # the batches that finished after both deadlines were refused


def test_hot_swap_exactly_once_and_stop(toy_profile: Profile) -> None:
    async def main() -> tuple[list[Request], Recorder, list[Request]]:
        clock = FakeClock()
        rec = Recorder()
        plan_a = two_gear_plan(low_high=60.0, max_wait_ms=10.0)
        plan_b = fixed_plan(
            toy_profile,
            Cascade(("m1", "m2"), (0.3,)),
            (Device(name="d1", memory_mb=1000), Device(name="d2", memory_mb=1000)),
            min_queue=3,
            max_wait_ms=5.0,
        )
        rt = emulated_runtime(toy_profile, plan_a, clock=clock, observer=rec, options=RuntimeOptions(max_in_flight=50))
        await rt.start()
        reqs: list[Request] = []
        for i, t in enumerate(np.linspace(0, 1.0, 400, endpoint=False)):
            await clock.advance_to(float(t))
            if i in (150, 300):
                rt.swap_plan(plan_b if i == 150 else plan_a)
            with contextlib.suppress(Overloaded):
                reqs += rt.submit([i])
        await clock.advance_to(1.5)
        late = rt.submit([1, 2, 3])
        await rt.stop(grace_s=0.0)  # the fake clock does not move: these three fail with RuntimeStopped
        with pytest.raises(RuntimeStopped):
            rt.submit([4])
        return reqs, rec, late

    reqs, rec, late = asyncio.run(main())
    assert len(reqs) == 400
    answers = [r.future.result() for r in reqs]
    assert rec.n_admitted == 403 and rec.n_answered == 400 and rec.n_failed == 3 and rec.n_duplicates == 0
    models = [a.model for a in answers]
    assert set(models[:150]) <= {"m0", "m1"} and set(models[150:300]) <= {"m1", "m2"}
    assert all(isinstance(r.future.exception(), RuntimeStopped) for r in late)
    assert len({b.generation for b in rec.batches}) == 3
