"""Helpers for runtime tests: replay an arrival list through the runtime on a fake clock."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cascadeserve.plan import Device, Gear, GearPlan, GearReplica, Replica
from cascadeserve.profile import Profile
from cascadeserve.profile.slowdown import Slowdowns
from cascadeserve.runtime import Answer, FakeClock, Recorder, Request, Runtime, RuntimeOptions, emulated_runtime
from cascadeserve.simulate.engine import tick_windows


@dataclass
class Replay:
    requests: list[Request]
    recorder: Recorder
    runtime: Runtime | None = None

    def answers(self) -> list[Answer]:
        return [r.future.result() for r in self.requests]


# The simulator switches to its drain triggers at the start of the drain instant, before anything at that instant:
# it takes no gear decision there and fires that instant's device events under the drain triggers. A server's
# producer keeps ticking, so the replay drains before the tick of that instant (order -1) runs: otherwise a gear
# switch scheduled for the drain instant would set the new gear's triggers (another batch cap) first.
_BEFORE_TICK = -2.0


async def replay(
    profile: Profile,
    plan: GearPlan,
    arrivals: Sequence[float],
    drain_at: float | None = None,
    options: RuntimeOptions | None = None,
    slowdowns: Slowdowns | None = None,
    samples: Sequence[int] | None = None,
) -> Replay:
    """Submit request ``i`` (sample ``i mod n``, or ``samples[i]``) at ``arrivals[i]``; drain triggers at ``drain_at``.

    ``drain_at`` defaults to the end of the last arrival window, where the simulator switches to its drain
    triggers. (The simulator lets those fire from its last device event in that window, a moment a real server
    cannot know; scenarios that compare trajectories therefore end with a max-wait rule that empties every queue
    before the window closes, so the drain has nothing left to do.)
    """
    if drain_at is None:
        tick = plan.tick_ms / 1000.0
        drain_at = tick_windows(np.asarray(arrivals), tick) * tick
    clock = FakeClock()
    rec = Recorder()
    rt = emulated_runtime(profile, plan, clock=clock, observer=rec, options=options, slowdowns=slowdowns)
    await rt.start()
    reqs: list[Request] = []
    drained = False
    for i, t in enumerate(arrivals):
        if not drained and t > drain_at:
            await clock.advance_to(drain_at, up_to_order=_BEFORE_TICK)
            rt.drain()
            drained = True
        if i == 0 or t != arrivals[i - 1]:
            # The simulator's order within an instant: the producer's tick, then every arrival, then device events.
            await clock.advance_to(t, up_to_order=-1)
        reqs += rt.submit([i % profile.n_samples if samples is None else int(samples[i])])
    if not drained:
        await clock.advance_to(drain_at, up_to_order=_BEFORE_TICK)
        rt.drain()
    while not all(r.done for r in reqs):
        nxt = clock.next_deadline()
        assert nxt is not None
        await clock.advance_to(nxt)
    await rt.stop(grace_s=0.0)
    return Replay(reqs, rec, rt)


def two_gear_plan(
    *,
    low_high: float = 30.0,
    thresholds: tuple[float, ...] = (0.5,),
    min_queue_fast: int = 4,
    max_wait_ms: float | None = None,
) -> GearPlan:
    """Two devices; gear 0 (low QPS) runs m0->m1 one replica each, gear 1 runs m0 alone on both devices."""
    devices = (Device(name="d0", memory_mb=1000), Device(name="d1", memory_mb=1000))
    replicas = (
        Replica(model="m0", device="d0"),
        Replica(model="m1", device="d1"),
        Replica(model="m0", device="d1"),
    )
    slow = Gear(
        qps_low=0,
        qps_high=low_high,
        models=("m0", "m1"),
        thresholds=thresholds,
        replicas=(GearReplica(model="m0", device="d0", share=1.0), GearReplica(model="m1", device="d1", share=1.0)),
    )
    fast = Gear(
        qps_low=low_high,
        qps_high=1e6,
        models=("m0",),
        replicas=(
            GearReplica(model="m0", device="d0", share=0.5, min_queue=min_queue_fast),
            GearReplica(model="m0", device="d1", share=0.5, min_queue=min_queue_fast),
        ),
    )
    return GearPlan(profile="toy", devices=devices, replicas=replicas, gears=(slow, fast), max_wait_ms=max_wait_ms)


def step_arrivals(low: float, high: float, at: float, duration: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = np.sort(rng.uniform(0, at, int(low * at)))
    b = np.sort(rng.uniform(at, duration, int(high * (duration - at))))
    return np.concatenate([a, b])
