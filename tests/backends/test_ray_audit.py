"""Online threshold tuning on the Ray backend (backends/ray/audit.py), on the real local Ray instance: the servers
send every stage's certainty and prediction back with the answers, the front end's one audit sampler picks early
exits whose continuations run the remaining stages on the servers, and the tuner re-tunes from those windows."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import numpy as np
import pytest
from tests.backends.test_ray import _gather, _slow
from tests.runtime.runtime_helpers import two_gear_plan

from cascadeserve.cascade import Cascade
from cascadeserve.eval.drift_stream import SHIFT_ID_OFFSET
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.policy import PlanTables, is_sure
from cascadeserve.policy.tuning import OnlineTuning
from cascadeserve.profile import Profile, load_profile
from cascadeserve.runtime import Answer, Recorder, RuntimeOptions

pytest.importorskip("ray")
from cascadeserve.backends.ray import RayBackend, server_actors

pytestmark = pytest.mark.usefixtures("ray_session")

ROOT = Path(__file__).resolve().parents[2]


def _factory(profile: Profile, **kw: object):  # type: ignore[no-untyped-def]
    def make(tables: PlanTables) -> OnlineTuning:
        return OnlineTuning.for_plan(tables, profile, **kw)  # type: ignore[arg-type]

    return make


def test_a_drift_stream_on_ray_fills_the_windows_and_the_tuner_retunes() -> None:
    """Clean digits, then shifted ones (the cheap models stay confident and start to err): the windows fill from the
    servers' trails and audits, the tuner raises a threshold, every server applies it, every request is answered
    exactly once."""
    stream = load_profile(ROOT / "profiles" / "digits-drift" / "stream")
    cascade = Cascade(("logreg", "mlp", "cnn-wide"), (0.6, 0.6))
    devices = [Device(name="d0", memory_mb=1000), Device(name="d1", memory_mb=1000)]
    plan = fixed_plan(stream, cascade, devices, min_queue=3, max_wait_ms=20.0)
    clean = np.flatnonzero(stream.sample_ids < SHIFT_ID_OFFSET)
    shifted = np.flatnonzero(stream.sample_ids >= SHIFT_ID_OFFSET)
    n, per = 900, 6
    k = np.arange(n)
    samples = np.where(k < n // 4, clean[k % len(clean)], shifted[k % len(shifted)]).tolist()
    kw = {"target": 0.97, "audit_fraction": 0.5, "min_records": 60, "window": 300, "period_s": 0.25}
    recorder = Recorder()
    opts = RuntimeOptions(tuning=_factory(stream, **kw))

    async def main() -> tuple[list[Answer | BaseException], int, int, list[tuple[float, ...]], list[object]]:
        rt = RayBackend().emulated_runtime(stream, plan, observer=recorder, options=opts)
        await rt.start()
        reqs = []
        for i in range(0, n, per):  # a steady stream, ~600 requests/s
            reqs += rt.submit(samples[i : i + per])
            await asyncio.sleep(0.01)
        answers = await asyncio.wait_for(_gather(reqs), timeout=60)
        await asyncio.sleep(0.5)  # the last continuations come back
        gen = rt.current
        assert gen.tuning is not None
        _, _, _, weight = gen.tuning.tuning.tuner.windows[0].arrays()
        audited, whole = int(np.sum(weight > 1.0)), len(weight)
        mine = [gen.tables.thresholds_of(0)]
        seen: list[object] = []
        for _ in range(100):  # broadcast like a gear switch: wait (generously) until every server has it
            seen = [tuple((await h.thresholds.remote(gen.number))[0]) for h in server_actors(rt).values()]
            if all(s == mine[0] for s in seen):
                break
            await asyncio.sleep(0.05)
        await rt.stop(grace_s=1.0)
        return answers, audited, whole, mine, seen

    answers, audited, whole, mine, seen = asyncio.run(main())
    assert all(isinstance(a, Answer) for a in answers)
    assert recorder.n_answered == n and recorder.n_duplicates == 0
    assert whole > 0 and audited > 0, "whole records and audited early exits reach the front end's window"
    assert len(recorder.threshold_changes) >= 1, "the drift must make the tuner act"
    assert mine[0] != (0.6, 0.6) and mine[0] == recorder.threshold_changes[-1].new
    assert seen == [mine[0]] * len(devices)


def test_an_audit_never_delays_its_answer_on_ray(toy_profile: Profile) -> None:
    """Audit every early exit of m0 while m1 takes 5 s: the early exits are answered long before their audits'
    m1 batch ends, and every request still reaches the window whole (the early exits through their audits). (5 s,
    not less: beside 8 busy loops an early exit took 1.07 s to come back.)"""
    slow = _slow(toy_profile, (2.0, 5000.0))
    t = float(np.median(slow.certainties[0]))  # half of m0's samples exit early
    plan = two_gear_plan(low_high=1e5, thresholds=(t,), max_wait_ms=5.0)  # gear 0 (m0 -> m1) throughout
    opts = RuntimeOptions(tuning=_factory(slow, target=0.5, audit_fraction=1.0, min_records=10**9))
    flags = [is_sure(float(c), t) for c in slow.certainties[0]]
    ids = [i for i, f in enumerate(flags) if f][:4] + [i for i, f in enumerate(flags) if not f][:4]
    n = len(ids)
    sure = [flags[i] for i in ids]
    assert n == 8 and sum(sure) == 4

    async def main() -> tuple[list[float], list[float], int]:
        rt = RayBackend().emulated_runtime(slow, plan, options=opts)
        await rt.start()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        reqs = rt.submit(ids)
        waits = []
        for req, s in zip(reqs, sure, strict=True):
            if s:
                await req.future
                waits.append(loop.time() - t0)
        assert rt.tuning is not None
        early_whole = len(rt.tuning.tuning.tuner.windows[0])
        await asyncio.wait_for(_gather(reqs), timeout=60)
        window = rt.tuning.tuning.tuner.windows[0]
        for _ in range(200):  # the audits' m1 batch ends after the forwarded ones' (or with them)
            if len(window) == n:
                break
            await asyncio.sleep(0.05)
        _, _, _, weight = window.arrays()
        await rt.stop(grace_s=1.0)
        return waits, weight.tolist(), early_whole

    waits, weight, early_whole = asyncio.run(main())
    assert waits and max(waits) < 3.0, f"an early exit waited {max(waits):.2f} s: behind its audit's 5 s stage"
    assert early_whole == 0  # nothing was whole yet when the early exits had all been answered
    assert len(weight) == n and all(math.isclose(w, 1.0) for w in weight)  # f = 1: every record weighs 1


def test_a_server_sends_trails_back_and_ends_a_continuation_at_its_last_stage(toy_profile: Profile) -> None:
    """In one server (no actor): with tuning on, an answer comes back with its trail, and an audit continuation
    that reaches its gear's last stage is ended there with its whole trail (nothing of it stays on the server)."""
    from cascadeserve.backends.ray import InferenceServer, RayOptions
    from cascadeserve.backends.ray.options import Item
    from cascadeserve.runtime.request import Best

    plan = fixed_plan(toy_profile, Cascade(("m0", "m1"), (0.0,)), (Device(name="d0", memory_mb=1000),))
    rows = {rep.model: r for r, rep in enumerate(plan.replicas)}
    sid = 7

    async def main() -> tuple[object, object, object, object, int]:
        server = InferenceServer("d0", toy_profile.model_names, toy_profile, {}, "margin", RayOptions())
        await server.open(0, plan, 0, {}, {}, True)
        first = await server.accept_one(0, rows["m0"], Item(sid, 0, 0.0, 0.0, None, math.inf, None, False))
        cont = await server.accept_one(
            0, rows["m1"], Item(sid, 0, 0.0, 0.0, Best(1, 0.5, 0), math.inf, ((0.25, 3),), True)
        )
        left = server.admission.in_flight
        await server.placement.stop()
        return *first, *cont, left

    answer, trail, _, cont_trail, left = asyncio.run(main())
    c, p = toy_profile.certainties, toy_profile.predictions
    assert isinstance(answer, Answer) and answer.model == "m0"  # threshold 0: m0 answers everything, an early exit
    assert trail == ((float(c[0, sid]), int(p[0, sid])),)
    assert cont_trail == ((0.25, 3), (float(c[1, sid]), int(p[1, sid])))
    assert left == 0


def test_labels_as_the_reference_on_ray(toy_profile: Profile) -> None:
    """``serve --tune-reference label`` on Ray: the front end keeps each whole record (answered by the last stage,
    or an early exit completed by its audit on the servers) until the client's label comes; each label enters the
    window once, as the reference, and a second label for the same request is refused."""
    t = float(np.median(toy_profile.certainties[0]))  # about half the samples exit at m0
    plan = two_gear_plan(low_high=1e5, thresholds=(t,), max_wait_ms=5.0)
    kw = {"target": 0.5, "audit_fraction": 1.0, "reference": "label", "min_records": 10**9}
    opts = RuntimeOptions(tuning=_factory(toy_profile, **kw))
    ids = list(range(16))
    exits = sum(is_sure(float(toy_profile.certainties[0][i]), t) for i in ids)
    assert 0 < exits < len(ids)

    async def main() -> tuple[int, int, list[bool], bool, list[int], list[float]]:
        rt = RayBackend().emulated_runtime(toy_profile, plan, options=opts)
        await rt.start()
        reqs = rt.submit(ids)
        answers = await asyncio.wait_for(_gather(reqs), timeout=60)
        assert all(isinstance(a, Answer) for a in answers)
        tuning = rt.tuning
        assert tuning is not None and tuning.reference == "label"
        for _ in range(200):  # the audits' continuations come back after the early answers
            if tuning.pending == len(ids):
                break
            await asyncio.sleep(0.05)
        pending = tuning.pending
        window = tuning.tuning.tuner.windows[0]
        before = len(window)
        took = [tuning.label(r.rid, int(toy_profile.labels[i])) for r, i in zip(reqs, ids, strict=True)]
        again = tuning.label(reqs[0].rid, 0)
        _, _, ref, weight = window.arrays()
        out = (pending, before, took, again, ref.tolist(), weight.tolist())
        await rt.stop(grace_s=1.0)
        return out

    pending, before, took, again, ref, weight = asyncio.run(main())
    assert pending == len(ids) and before == 0  # nothing enters the window before its label
    assert all(took) and not again
    assert ref == [int(toy_profile.labels[i]) for i in ids]  # the labels are the reference, in arrival order
    assert all(math.isclose(w, 1.0) for w in weight)  # audit fraction 1: every record weighs 1
