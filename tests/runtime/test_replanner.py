"""The runtime applies load-drift scaling as the simulator does: on a fake clock, the same gear every tick."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
from tests.runtime.runtime_helpers import step_arrivals, two_gear_plan

from cascadeserve.plan import GearPlan
from cascadeserve.policy.replan import DriftSettings
from cascadeserve.profile import Profile
from cascadeserve.runtime import FakeClock, Recorder, Request, emulated_runtime
from cascadeserve.runtime.replanner import Replanner, ReplanOptions
from cascadeserve.simulate import simulate
from cascadeserve.simulate.replan import simulate_replanning

SCALING = DriftSettings(mode="off", window_ticks=40, min_ticks=10, check_every=5, scaling=True)


def _plan() -> GearPlan:
    plan = two_gear_plan(low_high=30.0, max_wait_ms=5.0)
    slow, fast = plan.gears
    return plan.model_copy(update={"gears": (slow, fast.model_copy(update={"qps_high": 60.0}))})


async def _serve(profile: Profile, plan: GearPlan, arrivals: np.ndarray) -> tuple[Recorder, list[float]]:
    clock, rec = FakeClock(), Recorder()
    rt = emulated_runtime(profile, plan, clock=clock, observer=rec)
    rp = Replanner(rt, ReplanOptions(SCALING, Path("unused")))
    scales: list[float] = []
    rt.tick_listeners.append(lambda t, qps: scales.append(rp.stats.scale))
    await rt.start()
    reqs: list[Request] = []
    for i, t in enumerate(arrivals.tolist()):
        if i == 0 or t != arrivals[i - 1]:
            await clock.advance_to(t, up_to_order=-1)
        reqs += rt.submit([i % profile.n_samples])
    await clock.advance_to(float(np.ceil(arrivals[-1] * 10) / 10))
    rt.drain()
    while not all(r.done for r in reqs):
        nxt = clock.next_deadline()
        assert nxt is not None
        await clock.advance_to(nxt)
    await rt.stop(grace_s=0.0)
    await rp.stop()
    return rec, scales


def test_runtime_scales_qps_exactly_as_the_simulator(toy_profile: Profile) -> None:
    plan = _plan()
    arr = step_arrivals(8.0, 24.0, 3.0, 8.0, seed=4)
    never = lambda w, p: None  # noqa: E731 - off never re-plans
    sim = simulate_replanning(toy_profile, plan, arr, settings=SCALING, replanner=never)
    rec, scales = asyncio.run(_serve(toy_profile, plan, arr))
    n = len(sim.result.tick_gear) - 1
    assert [t.decision.gear for t in rec.ticks[:n]] == sim.result.tick_gear[1:].tolist()
    assert scales[:n] == sim.tick_scale[2 : n + 2].tolist()  # the scale decided at tick k serves tick k + 1
    # the scaling matters here: 24 QPS is gear 0 unscaled, but Zipf's weights make the measured load look heavy
    plain = simulate(toy_profile, plan, arr)
    assert max(scales) > 1.25 and plain.tick_gear[1:].tolist() != sim.result.tick_gear[1:].tolist()
