"""The runtime on a fake clock makes exactly the simulator's decisions: same batches, same finish times.

This is the proof that the policy core is shared: the simulator computes *when* a trigger fires from future
arrivals, the runtime asks the same trigger on every event, and both must land on the same float. The same holds
with the two optional policy hooks (an AIMD batch limit, a gear schedule), each given to both as a fresh object.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import pytest
from tests.runtime.runtime_helpers import Replay, replay, step_arrivals, two_gear_plan
from tests.simulate.sim_helpers import assert_same_result

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, Gear, GearPlan, GearReplica, Replica, fixed_plan
from cascadeserve.policy import AimdBatchLimit, AimdDecision, GearSchedule
from cascadeserve.profile import Profile
from cascadeserve.runtime import FakeClock, RuntimeOptions, emulated_runtime
from cascadeserve.simulate import SimResult, simulate


def _compare(
    profile: Profile,
    plan: GearPlan,
    arrivals: list[float] | np.ndarray,
    *,
    batch_limit: Callable[[], AimdBatchLimit] | None = None,
    gear_schedule: GearSchedule | None = None,
) -> tuple[SimResult, Replay]:
    """Run both and assert identical trajectories; ``batch_limit`` makes a fresh limit for each (it holds state)."""
    sim_limit = None if batch_limit is None else batch_limit()
    sim = simulate(profile, plan, arrivals, record_batches=True, batch_limit=sim_limit, gear_schedule=gear_schedule)
    # The simulator runs its compiled loop unless the batch limit overrides AIMD's hooks (a logging subclass); the
    # Python reference loop must agree with it.
    logged = batch_limit is not None and type(sim_limit) is not AimdBatchLimit
    assert sim.engine == ("reference" if logged else "compiled")
    if sim.engine == "compiled":
        ref = simulate(
            profile,
            plan,
            arrivals,
            record_batches=True,
            batch_limit=None if batch_limit is None else batch_limit(),
            gear_schedule=gear_schedule,
            engine="reference",
        )
        assert_same_result(sim, ref)
    options = RuntimeOptions(batch_limit=None if batch_limit is None else batch_limit(), gear_schedule=gear_schedule)
    run = asyncio.run(replay(profile, plan, list(arrivals), options=options))
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
    return sim, run


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


class _LoggedLimit(AimdBatchLimit):
    """The AIMD limit, unchanged, keeping its decisions so that a test can see the cap move (and compare logs)."""

    def __init__(self, target_s: float, *, step: int, backoff: float) -> None:
        super().__init__(target_s, step=step, backoff=backoff)
        self.log: list[AimdDecision] = []

    def observe(self, replica: int, runtime_s: float, size: int | None = None) -> AimdDecision:
        d = super().observe(replica, runtime_s, size)
        self.log.append(d)
        return d


def test_aimd_batch_limit_matches(toy_profile: Profile) -> None:
    """Under overload the cap climbs past the 4 ms objective (m0: 3 ms at batch 8, 4 ms at 16, 5 ms at 24) and is
    halved, again and again; the runtime must cap the same batches and make the same AIMD decisions."""
    plan = fixed_plan(
        toy_profile,
        Cascade(("m0", "m1"), (0.5,)),
        (Device(name="d0", memory_mb=1000), Device(name="d1", memory_mb=1000)),
        min_queue=1,
    )
    rng = np.random.default_rng(3)
    # ~3000 QPS for 0.4 s: two devices held to batches near 16 fall behind, so the cap, not the queue, sets the
    # batch size. Then a lone arrival at 0.805, whose window lets the backlog drain before the simulator's drain.
    arrivals = np.append(np.sort(rng.uniform(0, 0.4, 1200)), 0.805)
    logs: list[_LoggedLimit] = []

    def make() -> AimdBatchLimit:
        logs.append(_LoggedLimit(0.004, step=2, backoff=0.5))
        return logs[-1]

    sim, _ = _compare(toy_profile, plan, arrivals, batch_limit=make)
    sim_log, run_log = logs
    assert any(d.increased for d in sim_log.log) and any(not d.increased for d in sim_log.log)
    assert max(b.size for b in sim.batches) > 8  # the cap grew ...
    assert max(b.size for b in sim.batches) <= 2 * 16  # ... and stayed near the objective

    def per_replica(log: list[AimdDecision]) -> dict[int, list[tuple[float, int]]]:
        out: dict[int, list[tuple[float, int]]] = {}
        for d in log:
            out.setdefault(d.replica, []).append((d.runtime_s, d.limit))
        return out

    # Simultaneous batch ends on two devices may be observed in either order; per replica the order is fixed.
    assert per_replica(run_log.log) == per_replica(sim_log.log)


def test_gear_schedule_matches(toy_profile: Profile) -> None:
    """A schedule that goes up at tick 3 and back down at tick 7, whatever the QPS says (a steady 80 QPS, which
    the selector would serve in gear 0 throughout)."""
    plan = two_gear_plan(low_high=200.0, max_wait_ms=15.0)
    arrivals = np.append(np.sort(np.random.default_rng(4).uniform(0, 1.0, 80)), 1.005)
    schedule = GearSchedule([0, 0, 0, 1, 1, 1, 1, 0])  # past the end the last entry holds
    sim, run = _compare(toy_profile, plan, arrivals, gear_schedule=schedule)
    assert sim.tick_gear.tolist() == [schedule.gear_at(k) for k in range(len(sim.tick_gear))]
    assert {a.gear for a in run.answers()} == {0, 1}
    assert simulate(toy_profile, plan, arrivals).gear_switches == 0  # the selector alone would not have switched


def test_a_gear_switch_at_a_tick_waits_for_that_instants_arrivals(toy_profile: Profile) -> None:
    """Hypothesis found it: request 0 waits for a second sample under gear 0 (min queue 2, max wait 100 ms); at
    0.1 s the tick switches to gear 1 (min queue 1) and request 1 arrives. The tick, then the arrival, then device
    events: one batch of two, in the simulator and on the runtime alike (the runtime used to pump right after the
    switch and fire request 0 alone)."""
    d = "d0"
    plan = GearPlan(
        profile=toy_profile.name,
        devices=(Device(name=d, memory_mb=10_000),),
        replicas=tuple(Replica(model=m, device=d) for m in ("m0", "m1", "m2")),
        gears=(
            Gear(
                qps_low=0.0, qps_high=30.0, models=("m0", "m1", "m2"), thresholds=(0.0, 0.0),
                replicas=(GearReplica(model="m0", device=d, min_queue=2, share=1.0),
                          GearReplica(model="m1", device=d, share=1.0), GearReplica(model="m2", device=d, share=1.0)),
            ),
            Gear(qps_low=30.0, qps_high=60.0, models=("m0",), replicas=(GearReplica(model="m0", device=d, share=1.0),)),
        ),
    )  # fmt: skip
    sim, _ = _compare(toy_profile, plan, [0.0, 0.1], gear_schedule=GearSchedule((0, 1)))
    assert [(b.start, b.size) for b in sim.batches] == [(0.1, 2)]


def test_a_gear_switch_scheduled_for_the_drain_instant_does_not_change_the_drain(toy_profile: Profile) -> None:
    """Hypothesis found it (2026-11-23): m2 (min queue 3, cap 1) holds two forwarded samples when the last window
    ends at 0.6 s, where the schedule would switch to a gear without m2. The simulator drains with the current
    gear's drain triggers (cap 1: two batches of one); the replay used to let the producer tick at 0.6 s first, so
    the runtime drained under the new gear's triggers and fired one batch of two."""
    d = "d0"
    plan = GearPlan(
        profile=toy_profile.name,
        devices=(Device(name=d, memory_mb=10_000),),
        replicas=tuple(Replica(model=m, device=d) for m in ("m0", "m1", "m2")),
        gears=(
            Gear(
                qps_low=0.0, qps_high=30.0, models=("m0", "m1", "m2"), thresholds=(0.2, 0.4),
                replicas=(GearReplica(model="m0", device=d, share=1.0),
                          GearReplica(model="m1", device=d, min_queue=2, share=1.0),
                          GearReplica(model="m2", device=d, min_queue=3, share=1.0, max_batch=1)),
            ),
            Gear(qps_low=30.0, qps_high=60.0, models=("m0",), replicas=(GearReplica(model="m0", device=d, share=1.0),)),
        ),
    )  # fmt: skip
    sim, _ = _compare(toy_profile, plan, [0.3995, 0.5], gear_schedule=GearSchedule((0, 0, 0, 0, 0, 0, 1)))
    drained = [(b.row, b.size) for b in sim.batches if b.start >= 0.6]
    assert drained == [(2, 1), (2, 1)]


def test_a_gear_switch_at_a_tick_lowering_min_queue_waits_for_that_instants_arrival(toy_profile: Profile) -> None:
    """Hypothesis found it (2026-11-23): request 0 waits under gear 2 (min queue 2) for a partner; at 0.1 s the tick
    switches to gear 0 (min queue 1) on the same replica and request 1 arrives. The consumer's re-decision "at now,
    after the arrivals" must wait its turn on the fake clock (it used to return at once because it was already
    due), or request 0 fires alone before request 1 joins: one batch of two in both engines."""
    plan = GearPlan(
        profile=toy_profile.name,
        devices=tuple(Device(name=f"d{i}", memory_mb=10_000) for i in range(3)),
        replicas=(Replica(model="m0", device="d0"), Replica(model="m1", device="d0"), Replica(model="m1", device="d1")),
        gears=(
            Gear(qps_low=0.0, qps_high=20.0, models=("m1",),
                 replicas=(GearReplica(model="m1", device="d0", share=1.0),
                           GearReplica(model="m1", device="d1", share=0.0))),
            Gear(qps_low=20.0, qps_high=40.0, models=("m0",),
                 replicas=(GearReplica(model="m0", device="d0", share=1.0),)),
            Gear(qps_low=40.0, qps_high=60.0, models=("m1",),
                 replicas=(GearReplica(model="m1", device="d0", min_queue=2, share=1.0),
                           GearReplica(model="m1", device="d1", share=0.0))),
        ),
    )  # fmt: skip
    sim, _ = _compare(toy_profile, plan, [0.0005, 0.1], gear_schedule=GearSchedule((2, 0)))
    assert [(b.start, b.size) for b in sim.batches] == [(0.1, 2)]


def test_gear_schedule_starts_in_its_first_gear(toy_profile: Profile) -> None:
    plan = two_gear_plan(low_high=200.0, max_wait_ms=15.0)
    arrivals = np.append(np.sort(np.random.default_rng(5).uniform(0, 0.5, 40)), 0.505)
    sim, run = _compare(toy_profile, plan, arrivals, gear_schedule=GearSchedule([1, 1, 0]))
    assert run.answers()[0].gear == 1 and sim.gear[0] == 1


def test_aimd_and_schedule_together_match(toy_profile: Profile) -> None:
    """m1@d1 is the second stage of gear 0 and the only stage of gear 1, so when the schedule switches under
    overload its queue holds forwarded samples and new arrivals at once, and a capped batch must take the oldest
    across both, as the simulator does."""
    devices = (Device(name="d0", memory_mb=1000), Device(name="d1", memory_mb=1000))
    both = Gear(
        qps_low=0,
        qps_high=100,
        models=("m0", "m1"),
        thresholds=(0.5,),
        replicas=(GearReplica(model="m0", device="d0", share=1.0), GearReplica(model="m1", device="d1", share=1.0)),
    )
    alone = Gear(qps_low=100, qps_high=1e6, models=("m1",), replicas=(GearReplica(model="m1", device="d1", share=1.0),))
    plan = GearPlan(
        profile="toy",
        devices=devices,
        replicas=(Replica(model="m0", device="d0"), Replica(model="m1", device="d1")),
        gears=(both, alone),
    )
    arrivals = np.append(np.sort(np.random.default_rng(3).uniform(0, 0.5, 600)), 0.905)
    schedule = GearSchedule([0, 0, 1, 1, 0, 0, 1])
    sim, run = _compare(
        toy_profile,
        plan,
        arrivals,
        batch_limit=lambda: AimdBatchLimit(0.004, step=2, backoff=0.5),
        gear_schedule=schedule,
    )
    assert sim.gear_switches == 3
    assert {a.gear for a in run.answers()} == {0, 1}


def test_gear_schedule_naming_a_missing_gear_is_refused(toy_profile: Profile) -> None:
    plan = two_gear_plan()
    bad = GearSchedule([0, 1, 2, 1])
    with pytest.raises(ValueError, match=r"gear 2 \(first at tick 2\), but the plan has only 2 gear"):
        emulated_runtime(toy_profile, plan, options=RuntimeOptions(gear_schedule=bad))
    with pytest.raises(ValueError, match=r"gear 2 \(first at tick 2\), but the plan has only 2 gear"):
        simulate(toy_profile, plan, [0.0], gear_schedule=bad)  # the simulator refuses it too, in the same words


def test_hooked_runtime_refuses_a_plan_swap(toy_profile: Profile) -> None:
    plan = two_gear_plan()

    async def main() -> None:
        rt = emulated_runtime(
            toy_profile, plan, clock=FakeClock(), options=RuntimeOptions(gear_schedule=GearSchedule([0, 1]))
        )
        await rt.start()
        with pytest.raises(ValueError, match="cannot swap plans"):
            rt.swap_plan(plan)
        await rt.stop(grace_s=0.0)


def test_aimd_runtime_swaps_plans_with_a_fresh_limit_per_generation(toy_profile: Profile) -> None:
    """An AIMD batch limit indexes the initial plan's replicas: a swapped-in plan gets its own AIMD limit, with the
    same target, through the plan's batching fields (as a Ray server builds one)."""
    plan = two_gear_plan()
    limit = AimdBatchLimit(0.01)

    async def main() -> None:
        rt = emulated_runtime(toy_profile, plan, clock=FakeClock(), options=RuntimeOptions(batch_limit=limit))
        await rt.start()
        assert rt.current.batch_limit is limit
        rt.swap_plan(plan)
        new = rt.current.batch_limit
        assert isinstance(new, AimdBatchLimit) and new is not limit and new.target_s == pytest.approx(0.01)
        assert rt.plan.batching == "aimd"
        await rt.stop(grace_s=0.0)

    asyncio.run(main())
