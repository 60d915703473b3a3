"""The compiled simulator loop replays exactly the Python reference loop's trajectory.

Hypothesis draws plans of 1 to 3 stages on 1 to 3 devices with several gears (and bursts that make the selector
switch between them), minimum queue lengths, max waits, per-replica and plan-wide batch caps, uneven shares, and
arrivals on a coarse grid (so several arrive at one instant, and arrivals tie with batch ends); with and without
a gear schedule, an admission bound, an AIMD batch limit (whose final caps must match too), and a trace of
repeated samples, token costs (two of the three models price each batch by its longest prompt and output), host
contention (busy factors: a batch slower as the other devices are busy when it starts; a device standing for an
upstream stage on a host of its own), batch-time spread (each batch's drawn factor beyond its rule), and plans for
Ray (whose forwards each device routes with routers of its own). Every request, tick and batch must match to the
bit. ``engine="auto"`` must take the compiled loop exactly when no hook needs Python.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from tests.conftest import make_toy_profile, with_token_costs
from tests.property import property_settings
from tests.runtime.test_trajectory_property import plans
from tests.simulate.sim_helpers import assert_same_result

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, Gear, GearPlan, GearReplica, Replica, fixed_plan
from cascadeserve.policy import AdmissionPolicy, AimdBatchLimit, GearSchedule, PlanTables
from cascadeserve.policy.cache import PredictionCache
from cascadeserve.policy.quantile import QuantileBatchLimit
from cascadeserve.policy.tuning import OnlineTuning
from cascadeserve.profile import Profile
from cascadeserve.simulate import simulate

PROFILE = make_toy_profile()
PROFILE_TOKENS = with_token_costs(PROFILE)


def _busy(profile: Profile) -> Profile:
    factors = (1.0, 1.75, 2.5)
    models = tuple(dataclasses.replace(m, busy_factor=f) for m, f in zip(profile.models, factors, strict=True))
    return dataclasses.replace(profile, models=models)


def _spread(profile: Profile) -> Profile:
    sigmas = (0.3, 0.0, 0.15)  # one model's batches cost exactly their rule, the others scatter (profile/spread.py)
    models = tuple(dataclasses.replace(m, batch_spread=s) for m, s in zip(profile.models, sigmas, strict=True))
    return dataclasses.replace(profile, models=models)


def _profile(tokens: bool, busy: bool, spread: bool) -> Profile:
    prof = PROFILE_TOKENS if tokens else PROFILE
    prof = _busy(prof) if busy else prof
    return _spread(prof) if spread else prof


PROFILES = {(t, b, s): _profile(t, b, s) for t in (False, True) for b in (False, True) for s in (False, True)}


@st.composite
def runs(draw: st.DrawFn) -> tuple[GearPlan, np.ndarray, dict[str, object]]:
    plan = draw(plans())
    # A quiet stretch, a burst and a tail on a 1 ms grid: ties, gear switches up and down, backlogs.
    n_quiet, n_burst, n_tail = draw(st.integers(0, 40)), draw(st.integers(0, 250)), draw(st.integers(1, 40))
    slots = np.concatenate(
        [
            np.asarray(draw(st.lists(st.integers(0, 400), min_size=n_quiet, max_size=n_quiet)), dtype=np.int64),
            400 + np.asarray(draw(st.lists(st.integers(0, 300), min_size=n_burst, max_size=n_burst)), dtype=np.int64),
            700 + np.asarray(draw(st.lists(st.integers(0, 600), min_size=n_tail, max_size=n_tail)), dtype=np.int64),
        ]
    )
    arrivals = np.sort(slots) * 0.001
    hooks: dict[str, object] = {}
    if draw(st.booleans()):
        gears = draw(st.lists(st.integers(0, len(plan.gears) - 1), min_size=1, max_size=15))
        hooks["gear_schedule"] = GearSchedule(gears)
    if draw(st.booleans()):
        hooks["admission"] = AdmissionPolicy(capacity=draw(st.integers(1, 60)))
    if draw(st.booleans()):
        hooks["samples"] = np.asarray(
            draw(st.lists(st.integers(0, 20), min_size=len(arrivals), max_size=len(arrivals))), dtype=np.int64
        )
    if draw(st.booleans()):  # the AIMD limit's parameters: each run gets a fresh limiter (it holds state)
        target = draw(st.integers(1, 30)) * 0.0005  # on the runtimes' own grid: batches land on the target too
        step, start = draw(st.integers(1, 4)), draw(st.integers(1, 6))
        hooks["aimd"] = (target, step, draw(st.sampled_from([0.5, 0.9])), start, start + draw(st.integers(0, 30)))
    if draw(st.booleans()):
        hooks["audits"] = draw(st.sampled_from([0.1, 0.37, 1.0]))
    if draw(st.booleans()):
        hooks["tokens"] = True
    if draw(st.booleans()):
        hooks["busy"] = True
    if draw(st.booleans()):
        hooks["spread"] = True
    if draw(st.booleans()):  # a Ray plan: each device's forwards go by routers of its own (PlanTables.forward_lane)
        plan = plan.model_copy(update={"backend": "ray"})
    lone = [d for d in plan.devices if len({r.model for r in plan.replicas if r.device == d.name}) == 1]
    if lone and draw(st.booleans()):  # an upstream stage's device: a host of its own (no contention either way)
        plan = _as_upstream(plan, draw(st.sampled_from(lone)).name)
    return plan, arrivals, hooks


def _as_upstream(plan: GearPlan, device: str) -> GearPlan:
    """``plan`` with ``device`` standing for the upstream stage it holds."""
    model = next(r.model for r in plan.replicas if r.device == device)
    devices = tuple(d.model_copy(update={"upstream": model}) if d.name == device else d for d in plan.devices)
    return plan.model_copy(update={"devices": devices})


def _with_limit(hooks: dict[str, object], plan: GearPlan) -> tuple[dict[str, object], AimdBatchLimit | None]:
    """``hooks`` with a fresh AIMD limiter in place of its parameters (if drawn), and that limiter; and fresh audit
    sampling (online tuning's audits alone) in place of its fraction."""
    out = dict(hooks)
    out.pop("tokens", None)
    out.pop("busy", None)
    out.pop("spread", None)
    audits = out.pop("audits", None)
    if audits is not None:
        rows = {m: PROFILE.index(m) for m in PROFILE.model_names}
        out["tuning"] = OnlineTuning.audits_only(PlanTables(plan, rows), float(audits))  # type: ignore[arg-type]
    params = out.pop("aimd", None)
    if params is None:
        return out, None
    target, step, backoff, start, ceiling = params  # type: ignore[misc]
    limit = AimdBatchLimit(target, step=step, backoff=backoff, start=start, ceiling=ceiling)
    out["batch_limit"] = limit
    return out, limit


@property_settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_the_compiled_engine_and_the_reference_agree_on_random_runs(
    run: tuple[GearPlan, np.ndarray, dict[str, object]],
) -> None:
    plan, arrivals, hooks = run
    prof = PROFILES[(bool(hooks.get("tokens")), bool(hooks.get("busy")), bool(hooks.get("spread")))]
    fast_hooks, fast_limit = _with_limit(hooks, plan)
    ref_hooks, ref_limit = _with_limit(hooks, plan)
    fast = simulate(prof, plan, arrivals, record_batches=True, engine="auto", **fast_hooks)  # type: ignore[arg-type]
    ref = simulate(prof, plan, arrivals, record_batches=True, engine="reference", **ref_hooks)  # type: ignore[arg-type]
    assert fast.engine == "compiled" and ref.engine == "reference"
    assert_same_result(fast, ref)
    if fast_limit is not None and ref_limit is not None:  # both limiters end in the same state
        n_reps = len(plan.replicas)
        assert fast_limit.caps(n_reps).tolist() == ref_limit.caps(n_reps).tolist()


@property_settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(), st.lists(st.sampled_from([0.25, 0.5, 1.0, 2.0, 4.0]), min_size=1, max_size=20))
def test_per_tick_qps_scales_agree(run: tuple[GearPlan, np.ndarray, dict[str, object]], scales: list[float]) -> None:
    """Re-planning's per-tick QPS factors (appendix C.2 online; the last one holds past its end) move the selector
    in the compiled loop exactly as in the Python loop (an integration fault once: the compiled loop took the
    plan's one factor)."""
    plan, arrivals, _ = run
    factors = np.asarray(scales)
    fast = simulate(PROFILE, plan, arrivals, record_batches=True, engine="compiled", qps_scale=factors)
    ref = simulate(PROFILE, plan, arrivals, record_batches=True, engine="reference", qps_scale=factors)
    assert_same_result(fast, ref)


def _plan(profile: Profile, **kw: object) -> GearPlan:
    return fixed_plan(
        profile,
        Cascade(("m0", "m1", "m2"), (0.5, 0.5)),
        [Device(name="d0", memory_mb=10_000), Device(name="d1", memory_mb=10_000)],
        **kw,  # type: ignore[arg-type]
    )


def test_a_busy_trace_with_capped_batches_agrees(toy_profile: Profile) -> None:
    """Thousands of requests at a load the devices barely carry, capped batches, a max wait: the mixed capped take
    (forwarded and new samples, oldest first) and long queues all happen."""
    rng = np.random.default_rng(3)
    arrivals = np.sort(np.round(rng.uniform(0.0, 3.0, 6000), 3))
    plan = _plan(toy_profile, min_queue=6, max_wait_ms=4.0, max_batch=9)
    fast = simulate(toy_profile, plan, arrivals, record_batches=True)
    ref = simulate(toy_profile, plan, arrivals, record_batches=True, engine="reference")
    assert fast.engine == "compiled"
    assert_same_result(fast, ref)
    assert max(b.size for b in fast.batches) == 9 and fast.completed == len(arrivals)


def test_a_batch_past_the_runtime_table_agrees(toy_profile: Profile) -> None:
    """One uncapped batch of 5,000 samples (past the 4,096-entry runtime table the loop starts with)."""
    arrivals = np.zeros(5000)
    plan = fixed_plan(toy_profile, Cascade(("m0",), ()), [Device(name="d0", memory_mb=10_000)], min_queue=5000)
    fast = simulate(toy_profile, plan, arrivals, record_batches=True)
    ref = simulate(toy_profile, plan, arrivals, record_batches=True, engine="reference")
    assert fast.batches[0].size == 5000
    assert_same_result(fast, ref)


def test_auto_takes_the_reference_for_the_hooks_the_compiled_loop_lacks(toy_profile: Profile) -> None:
    plan = _plan(toy_profile)
    arrivals = [0.0, 0.001, 0.05]
    fast = simulate(toy_profile, plan, arrivals)
    assert (fast.engine, fast.engine_note) == ("compiled", "")
    forced = simulate(toy_profile, plan, arrivals, engine="reference")
    assert (forced.engine, forced.engine_note) == ("reference", "forced")
    cache: PredictionCache[int] = PredictionCache(16)
    cached = simulate(toy_profile, plan, arrivals, cache=cache)
    assert (cached.engine, cached.engine_note) == ("reference", "the compiled engine does not apply a prediction cache")
    with pytest.warns(DeprecationWarning, match='engine="reference"'):  # the old name still runs the reference
        assert simulate(toy_profile, plan, arrivals, engine="python").engine == "reference"
    assert simulate(toy_profile, plan, arrivals, batch_limit=AimdBatchLimit(0.01)).engine == "compiled"
    assert simulate(toy_profile, plan, arrivals, batch_limit=QuantileBatchLimit(0.01)).engine == "reference"
    with pytest.raises(ValueError, match="compiled simulator does not apply a prediction cache"):
        simulate(toy_profile, plan, arrivals, cache=PredictionCache(16), engine="compiled")
    with pytest.raises(ValueError, match="engine: 'fast' is not one of"):
        simulate(toy_profile, plan, arrivals, engine="fast")  # type: ignore[arg-type]


def _m0_then_m1(m0: tuple[tuple[str, float], ...], m1_min_queue: int) -> GearPlan:
    """m0 on the given devices (shares), then m1 on d2 alone; three devices."""
    reps = tuple(GearReplica(model="m0", device=d, share=s) for d, s in m0)
    reps += (GearReplica(model="m1", device="d2", min_queue=m1_min_queue, share=1.0),)
    return GearPlan(
        profile="toy",
        devices=tuple(Device(name=f"d{i}", memory_mb=10_000) for i in range(3)),
        replicas=tuple(Replica(model=r.model, device=r.device) for r in reps),
        gears=(Gear(qps_low=0, qps_high=60, models=("m0", "m1"), thresholds=(0.2,), replicas=reps),),
    )


@pytest.mark.parametrize("engine", ["compiled", "reference"])
def test_a_device_woken_by_a_forward_fires_before_the_next_batch_of_that_instant_ends(
    toy_profile: Profile, engine: str
) -> None:
    """Exact: two requests at 0.7 s run m0 on d0 and d1, both batches end at 0.701 and both go on to m1 on d2. The
    runtime wakes d2 right after d0's batch ends, before d1's (the next timer of that instant): m1 runs the first
    one alone, then the second."""
    plan = _m0_then_m1((("d0", 0.5), ("d1", 0.5)), 1)
    res = simulate(toy_profile, plan, np.array([0.7, 0.7]), record_batches=True, engine=engine)  # type: ignore[arg-type]
    assert res.engine == engine
    assert [(round(b.start, 6), b.device, b.size) for b in res.batches] == [
        (0.7, 0, 1), (0.7, 1, 1), (0.701, 2, 1), (0.703, 2, 1)
    ]  # fmt: skip
    assert res.finish.round(6).tolist() == [0.703, 0.705]


@pytest.mark.parametrize("engine", ["compiled", "reference"])
def test_an_arrival_wakes_its_free_device_before_another_devices_batch_ending_then(
    toy_profile: Profile, engine: str
) -> None:
    """Exact: at 0.418 s a new request reaches m0 on d2 (free) just as d1's batch of m0 ends and forwards to m1 on
    d2, whose queue it brings to its minimum of 2. An instant's arrivals come before its device events: d2 runs the
    new request's m0 first, then m1 takes all three that are waiting by then."""
    plan = _m0_then_m1((("d1", 0.5), ("d2", 0.5)), 2)
    arrivals = np.array([0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.402, 0.417, 0.418, 0.7])
    res = simulate(toy_profile, plan, arrivals, record_batches=True, engine=engine)  # type: ignore[arg-type]
    assert res.engine == engine
    at_418 = [(round(b.start, 6), b.replica, b.size) for b in res.batches if 0.418 <= b.start < 0.5]
    assert at_418 == [(0.418, 1, 1), (0.419, 2, 3)]  # m0 on d2 (replica 1), then m1 (replica 2) with three
    assert not any(0.5 < b.start < 0.7 for b in res.batches)  # nobody left to wait for the max wait


def test_an_empty_trace_gives_an_empty_result(toy_profile: Profile) -> None:
    res = simulate(toy_profile, _plan(toy_profile), np.zeros(0))
    assert res.engine == "compiled" and len(res.finish) == 0 and len(res.tick_gear) == 0


def test_token_costs_price_each_batch_by_its_longest_prompt_and_output(toy_profile: Profile) -> None:
    """Exact: requests one at a time through m0 > m1 > m2 (m1 scores, m2 generates, m0 has no token costs): each
    request's latency is the sum, over the stages it reaches, of ``batch_seconds`` of its own tokens there; both
    engines agree to the bit, and the same trace without token costs gives other latencies."""
    from cascadeserve.profile.tokens import token_tables

    prof = with_token_costs(toy_profile)
    samples = np.arange(60)
    arrivals = samples * 1.0  # a second apart: every batch holds one request
    plan = _plan(prof)
    fast = simulate(prof, plan, arrivals, samples=samples)
    ref = simulate(prof, plan, arrivals, samples=samples, engine="reference")
    assert fast.engine == "compiled"
    assert_same_result(fast, ref)
    tables = token_tables(prof.models, prof.n_samples, 8)
    assert tables is not None
    cert = prof.certainties
    for s in samples:
        want = 0.0
        for row in (0, 1, 2):
            want += tables.seconds(row, np.array([s]))
            if row == 2 or cert[row, s] >= 0.5:  # the plan's thresholds are 0.5 and 0.5
                break
        assert fast.finish[s] - arrivals[s] == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert (fast.answer_row > 0).sum() > 10  # later stages ran, with their token prices
    plain = simulate(toy_profile, plan, arrivals, samples=samples)
    assert not np.array_equal(plain.finish, fast.finish)


def test_a_batch_is_slower_while_the_other_device_is_busy() -> None:
    """Exact: m0 (1 ms at batch 1) with busy factor 3 on two devices, one request each. Two batches that start at
    the same instant do not slow each other; one that starts while the other device runs takes 1 + 2 x 1 = 3 ms;
    on an idle host again 1 ms. Both engines."""
    prof = make_toy_profile(n=20, n_models=1)
    prof = dataclasses.replace(prof, models=(dataclasses.replace(prof.models[0], busy_factor=3.0),))
    devs = [Device(name="d0", memory_mb=10_000), Device(name="d1", memory_mb=10_000)]
    plan = fixed_plan(prof, Cascade(("m0",), ()), devs)
    arrivals = np.array([0.0, 0.0, 0.1, 0.1005, 0.2])
    for engine in ("compiled", "reference"):
        res = simulate(prof, plan, arrivals, engine=engine)  # type: ignore[arg-type]
        assert (res.latency_s * 1000).tolist() == pytest.approx([1.0, 1.0, 1.0, 3.0, 1.0]), engine


def test_an_upstream_stages_device_neither_slows_nor_is_slowed_by_this_hosts() -> None:
    """A device that stands for an upstream stage waits on another server: the same arrivals as above (a batch
    that starts while the other device runs took 3 ms) take 1 ms each when the other device is the upstream's,
    in both engines; two of this host's devices beside it still contend."""
    prof = make_toy_profile(n=20, n_models=1)
    prof = dataclasses.replace(prof, models=(dataclasses.replace(prof.models[0], busy_factor=3.0),))
    devs = [Device(name="d0", memory_mb=10_000), Device(name="d1", memory_mb=10_000)]
    plan = _as_upstream(fixed_plan(prof, Cascade(("m0",), ()), devs), "d1")
    arrivals = np.array([0.0, 0.0, 0.1, 0.1005, 0.2])
    for engine in ("compiled", "reference"):
        res = simulate(prof, plan, arrivals, engine=engine)  # type: ignore[arg-type]
        assert (res.latency_s * 1000).tolist() == pytest.approx([1.0] * 5), engine
    devs.append(Device(name="d2", memory_mb=10_000))
    plan = _as_upstream(fixed_plan(prof, Cascade(("m0",), ()), devs), "d2")
    # round robin over d0, d1, d2: the upstream's batch at 0.1005 while d1 runs is not slowed; d1's at 0.2005 while
    # d0 runs is (its one peer on this host busy: 1 + 2 x 1/1 = 3 ms)
    arrivals = np.array([0.0, 0.1, 0.1005, 0.2, 0.2005])
    for engine in ("compiled", "reference"):
        res = simulate(prof, plan, arrivals, engine=engine)  # type: ignore[arg-type]
        assert (res.latency_s * 1000).tolist() == pytest.approx([1.0, 1.0, 1.0, 1.0, 3.0]), engine
