"""The runtime on a fake clock makes exactly the simulator's decisions: same batches, same finish times.

This is the proof that the policy core is shared: the simulator computes *when* a trigger fires from future
arrivals, the runtime asks the same trigger on every event, and both must land on the same float.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from tests.runtime.runtime_helpers import replay, step_arrivals, two_gear_plan

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, GearPlan, fixed_plan
from cascadeserve.profile import Profile
from cascadeserve.simulate import simulate


def _compare(profile: Profile, plan: GearPlan, arrivals: list[float] | np.ndarray) -> None:
    sim = simulate(profile, plan, arrivals, record_batches=True)
    run = asyncio.run(replay(profile, plan, list(arrivals)))
    sim_batches = sorted((b.start, b.end, b.device, b.replica, b.row, b.size, b.answered) for b in sim.batches)
    run_batches = sorted((b.start, b.end, b.device, b.replica, b.row, b.size, b.answered) for b in run.recorder.batches)
    assert run_batches == sim_batches
    answers = run.answers()
    assert [a.finished for a in answers] == sim.finish.tolist()
    assert [profile.index(a.model) for a in answers] == sim.answer_row.tolist()
    assert [a.gear for a in answers] == sim.gear.tolist()
    assert [a.stage for a in answers] == sim.answer_stage.tolist()
    labels = profile.labels[np.arange(len(arrivals)) % profile.n_samples]
    assert np.array_equal(np.array([a.label for a in answers]) == labels, sim.correct)
    run_ticks = [(t.decision.gear, t.decision.q0) for t in run.recorder.ticks[: len(sim.tick_gear) - 1]]
    assert run_ticks == list(zip(sim.tick_gear[1:].tolist(), sim.tick_q0[1:].tolist(), strict=True))


def test_one_device_two_requests_exact(toy_profile: Profile) -> None:
    """The smallest case, spelled out: m0 takes 1 ms for one sample, m1 2 ms."""
    plan = fixed_plan(toy_profile, Cascade(("m0", "m1"), (1.0,)), (Device(name="d0", memory_mb=1000),))
    run = asyncio.run(replay(toy_profile, plan, [0.010, 0.0105], drain_at=0.1))
    b = [(x.start, x.end, x.model, x.size) for x in run.recorder.batches]
    # Request 0 runs alone on m0 (1 ms); request 1 arrives meanwhile and waits; then m1 for request 0 (2 ms)
    # and m0 for request 1 compete for the device: the older head (request 1 queued at 10.5 ms) goes first.
    assert b[0] == (0.010, 0.011, "m0", 1)
    assert b[1][2:] == ("m0", 1) and b[1][0] == 0.011
    assert [a.model for a in run.answers()] == ["m1", "m1"]  # threshold 1: m1 answers everything
    _compare(toy_profile, plan, [0.010, 0.0105])


@pytest.mark.parametrize("min_queue", [1, 3])
def test_single_gear_batches_match(toy_profile: Profile, min_queue: int) -> None:
    plan = fixed_plan(
        toy_profile,
        Cascade(("m0", "m1", "m2"), (0.4, 0.6)),
        (Device(name="d0", memory_mb=1000), Device(name="d1", memory_mb=1000)),
        min_queue=min_queue,
        max_wait_ms=20.0,
    )
    # The last arrival opens its window, so every max-wait chain ends before the simulator's drain (see replay).
    arrivals = np.append(np.sort(np.random.default_rng(1).uniform(0, 0.9, 120)), 0.905)
    _compare(toy_profile, plan, arrivals)


def test_gear_switch_and_hysteresis_match(toy_profile: Profile) -> None:
    plan = two_gear_plan(low_high=60.0, max_wait_ms=15.0)
    arrivals = np.append(step_arrivals(20, 400, at=0.6, duration=1.0), 1.005)
    _compare(toy_profile, plan, arrivals)
    sim = simulate(toy_profile, plan, arrivals)
    assert sim.gear_switches >= 1  # the scenario really exercises a switch
