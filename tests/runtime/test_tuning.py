"""Online threshold tuning in the runtime: the simulator's decisions exactly, on a fake clock, and audits that never
delay an answer nor hold a client's slot."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from tests.runtime.runtime_helpers import replay

from cascadeserve.cascade import Cascade
from cascadeserve.eval.drift_stream import SHIFT_ID_OFFSET
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.policy import PlanTables
from cascadeserve.policy.tuning import OnlineTuning, ThresholdDecision
from cascadeserve.profile import Profile, load_profile
from cascadeserve.runtime import FakeClock, Recorder, RuntimeOptions, emulated_runtime
from cascadeserve.simulate import simulate

ROOT = Path(__file__).resolve().parents[2]
STREAM = load_profile(ROOT / "profiles" / "digits-drift" / "stream")
CASCADE = Cascade(("logreg", "mlp", "cnn-wide"), (0.6, 0.6))


def _factory(profile: Profile, **kw: object):  # type: ignore[no-untyped-def]
    def make(tables: PlanTables) -> OnlineTuning:
        return OnlineTuning.for_plan(tables, profile, **kw)  # type: ignore[arg-type]

    return make


def _drift_samples(n: int) -> np.ndarray:
    """Clean images first, then shifted ones: the cheap models stay confident and start to err."""
    clean = np.flatnonzero(STREAM.sample_ids < SHIFT_ID_OFFSET)
    shifted = np.flatnonzero(STREAM.sample_ids >= SHIFT_ID_OFFSET)
    k = np.arange(n)
    return np.where(k < n // 3, clean[k % len(clean)], shifted[k % len(shifted)])


def _rows(profile: Profile) -> dict[str, int]:
    return {m: profile.index(m) for m in profile.model_names}


@pytest.mark.parametrize(
    ("plan_kw", "audit", "spacing"),
    [
        ({}, 0.2, 0.004),  # one device: batches of several requests, audits woven between them
        ({"min_queue": 3, "max_wait_ms": 20.0}, 0.5, 0.002),  # two devices, batches of 3+ waiting for company
    ],
)
def test_tuner_decisions_are_identical_in_the_simulator_and_the_runtime(
    plan_kw: dict[str, float], audit: float, spacing: float
) -> None:
    devices = [Device(name="d0", memory_mb=1000)] + ([Device(name="d1", memory_mb=1000)] if plan_kw else [])
    plan = fixed_plan(STREAM, CASCADE, devices, **plan_kw)  # type: ignore[arg-type]
    n = 1500
    arrivals = np.round(np.arange(n) * spacing, 6)
    samples = _drift_samples(n)
    kw = {"target": 0.97, "audit_fraction": audit, "min_records": 60, "window": 300, "period_s": 0.5}
    sim_tuning = _factory(STREAM, **kw)(PlanTables(plan, _rows(STREAM)))
    sim = simulate(STREAM, plan, arrivals, samples=samples, tuning=sim_tuning, record_batches=True)
    opts = RuntimeOptions(tuning=_factory(STREAM, **kw))
    run = asyncio.run(replay(STREAM, plan, arrivals.tolist(), options=opts, samples=samples.tolist()))
    # the same threshold changes, at the same ticks, from the same windows
    assert len(sim.threshold_changes) >= 3, "the drift must make the tuner act"
    assert run.recorder.threshold_changes == sim.threshold_changes
    # the same batches (audit continuations included) and the same answers
    sim_b = sorted((b.start, b.end, b.device, b.replica, b.row, b.size, b.answered) for b in sim.batches)
    run_b = sorted((b.start, b.end, b.device, b.replica, b.row, b.size, b.answered) for b in run.recorder.batches)
    assert run_b == sim_b
    answers = run.answers()
    assert [a.finished for a in answers] == sim.finish.tolist()
    assert [STREAM.index(a.model) for a in answers] == sim.answer_row.tolist()
    assert run.runtime is not None and run.runtime.tuning is not None
    assert run.runtime.tuning.tables.thresholds_of(0) == sim.threshold_changes[-1].new
    assert run.recorder.n_answered == n and run.recorder.n_duplicates == 0


def test_an_audit_never_delays_an_answer_nor_holds_a_slot() -> None:
    """Audit every early exit: each answer comes at the instant it comes without tuning, its admission slot is free
    while its continuation still runs, and every request reaches the window whole."""
    plan = fixed_plan(STREAM, CASCADE, [Device(name="d", memory_mb=1000)])
    arrivals = [0.0, 0.05, 0.1, 0.15, 0.2, 0.25]  # apart: no batch of one waits for another's continuation
    plain = asyncio.run(replay(STREAM, plan, arrivals))
    kw = {"target": 0.5, "audit_fraction": 1.0, "min_records": 10**9}

    async def tuned() -> tuple[list[float], list[tuple[int, int]], int]:
        clock = FakeClock()
        rt = emulated_runtime(STREAM, plan, clock=clock, observer=Recorder(),
                              options=RuntimeOptions(tuning=_factory(STREAM, **kw)))  # fmt: skip
        await rt.start()
        reqs = []
        at_answer: list[tuple[int, int]] = []  # (in flight, samples queued or running) when an early exit answers
        for i, t in enumerate(arrivals):
            await clock.advance_to(t, up_to_order=-1)
            (req,) = rt.submit([i])
            reqs.append(req)
            await clock.advance_to(t + 0.001)  # past a first stage's batch, before the continuation's last
            if req.done and req.future.result().model != "cnn-wide":
                busy = sum(c.busy for c in rt.placement.consumers.values())  # type: ignore[attr-defined]
                at_answer.append((rt.in_flight, busy + sum(rt.queue_lengths().values())))
        await clock.advance_to(1.0)
        assert rt.tuning is not None
        whole = len(rt.tuning.tuning.tuner.windows[0])
        await rt.stop(grace_s=0.0)
        return [r.future.result().finished for r in reqs], at_answer, whole

    finished, at_answer, whole = asyncio.run(tuned())
    assert finished == [a.finished for a in plain.answers()]  # not one answer later
    assert at_answer and all(free == 0 and work >= 1 for free, work in at_answer)  # slot freed, audit still running
    assert whole == len(arrivals)  # every request ran every stage: the early exits through their audits


def test_a_threshold_change_applies_to_requests_in_flight_from_their_next_exit() -> None:
    """Hot swap: thresholds changed by hand between stages take effect at the next exit decision."""
    plan = fixed_plan(STREAM, CASCADE, [Device(name="d", memory_mb=1000)])
    opts = RuntimeOptions(tuning=_factory(STREAM, target=0.5, min_records=10**9), run_producer=False)

    async def go() -> tuple[str, tuple[float, ...]]:
        clock = FakeClock()
        rt = emulated_runtime(STREAM, plan, clock=clock, options=opts)
        await rt.start()
        # a sample logreg is unsure of (forwarded to mlp), which mlp is sure of under 0.6
        lr, mlp = STREAM.index("logreg"), STREAM.index("mlp")
        cert = STREAM.certainties
        sid = int(np.flatnonzero((cert[lr] < 0.6) & (cert[mlp] >= 0.6) & (cert[mlp] < 0.99))[0])
        (req,) = rt.submit([sid])
        t_lr = STREAM.models[lr].runtime.seconds(1) + plan.batch_overhead_ms / 1000.0
        await clock.advance_to(t_lr)  # logreg done: the request waits for mlp (or is in its batch)
        assert rt.tuning is not None
        rt.tuning.tables.apply_thresholds(ThresholdDecision.in_force(0, (0.6, 0.995)))
        while not req.done:
            nxt = clock.next_deadline()
            assert nxt is not None
            await clock.advance_to(nxt)
        await rt.stop(grace_s=0.0)
        return req.future.result().model, rt.tuning.tables.thresholds_of(0)

    model, th = asyncio.run(go())
    assert th == (0.6, 0.995)
    assert model == "cnn-wide"  # mlp's exit decision came after the change: forwarded to the last stage
