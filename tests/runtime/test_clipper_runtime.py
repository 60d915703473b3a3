"""Clipper's serving layer on the runtime: the prediction cache and the adaptive batching policies.

* A cache hit is answered inside ``submit`` (its future is already done), never admitted, never queued or batched.
* A plan swap that changes the cascade empties the cache; one that only re-places replicas keeps it.
* ``aimd`` and ``quantile`` batching, with an emulated device that slows down 2x halfway (the fault hook), make
  exactly the simulator's batches on a fake clock: same policy objects, same slowdown data.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from tests.runtime.runtime_helpers import replay

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.policy.cache import PredictionCache
from cascadeserve.profile import Profile
from cascadeserve.profile.slowdown import Slowdown, Slowdowns
from cascadeserve.runtime import FakeClock, Recorder, Request, RuntimeOptions, emulated_runtime
from cascadeserve.simulate import simulate

DEVS = (Device(name="d0", memory_mb=1000), Device(name="d1", memory_mb=1000))


async def _settle(clock: FakeClock, *reqs: Request) -> None:
    """Run the fake clock until every request is answered."""
    for _ in range(10_000):
        if all(r.done for r in reqs):
            return
        await asyncio.sleep(0)
        nxt = clock.next_deadline()
        if nxt is not None:
            await clock.advance_to(nxt)
    raise AssertionError("the requests were not answered")


def test_a_hit_never_reaches_a_queue_and_a_swap_invalidates(toy_profile: Profile) -> None:
    plan = fixed_plan(toy_profile, Cascade(("m0", "m1"), (0.5,)), DEVS)

    async def main() -> None:
        clock = FakeClock()
        rec = Recorder()
        rt = emulated_runtime(
            toy_profile, plan, clock=clock, observer=rec, options=RuntimeOptions(cache_size=4, run_producer=False)
        )
        await rt.start()
        (first,) = rt.submit([7])
        assert not first.done
        await _settle(clock, first)
        miss = first.future.result()
        assert not miss.cached
        batches = len(rec.batches)
        admitted = rec.n_admitted
        (again,) = rt.submit([7])
        assert again.done  # answered inside submit: no queue, no batch, no admission
        hit = again.future.result()
        assert hit.cached and (hit.label, hit.model, hit.stage) == (miss.label, miss.model, miss.stage)
        assert hit.queue_s == 0.0 and hit.compute_s == 0.0
        assert len(rec.batches) == batches and rec.n_admitted == admitted
        assert sum(rt.queue_lengths().values()) == 0
        assert rt.cache is not None and (rt.cache.hits, rt.cache.misses) == (1, 1)

        rt.swap_plan(fixed_plan(toy_profile, Cascade(("m0", "m1"), (0.5,)), DEVS[:1]))  # same cascade: kept
        (kept,) = rt.submit([7])
        assert kept.done and kept.future.result().cached
        rt.swap_plan(fixed_plan(toy_profile, Cascade(("m0", "m2"), (0.5,)), DEVS))  # another model: emptied
        (after,) = rt.submit([7])
        assert not after.done
        await _settle(clock, after)
        assert not after.future.result().cached
        assert rt.cache.invalidations == 1
        await rt.stop(grace_s=0.0)

    asyncio.run(main())


def test_an_answer_from_before_an_invalidating_swap_is_not_cached(toy_profile: Profile) -> None:
    plan = fixed_plan(toy_profile, Cascade(("m0", "m1"), (0.5,)), DEVS)

    async def main() -> None:
        clock = FakeClock()
        rt = emulated_runtime(toy_profile, plan, clock=clock, options=RuntimeOptions(cache_size=4, run_producer=False))
        await rt.start()
        (old,) = rt.submit([3])
        rt.swap_plan(fixed_plan(toy_profile, Cascade(("m0", "m2"), (0.5,)), DEVS))
        await _settle(clock, old)
        assert old.future.result().model in ("m0", "m1")  # answered by the plan that admitted it ...
        assert rt.cache is not None and len(rt.cache) == 0  # ... and not cached for the new one
        await rt.stop(grace_s=0.0)

    asyncio.run(main())


@pytest.mark.parametrize("batching", ["aimd", "quantile"])
def test_adaptive_batching_with_a_slowdown_matches_the_simulator(toy_profile: Profile, batching: str) -> None:
    plan = fixed_plan(toy_profile, Cascade(("m0", "m1"), (0.5,)), DEVS, max_wait_ms=2.0, min_queue=12)
    plan = plan.model_copy(update={"batching": batching, "batch_target_ms": 4.0})
    rng = np.random.default_rng(5)
    arrivals = np.append(np.sort(rng.uniform(0, 0.4, 900)), 0.805)
    slow = Slowdowns.of(Slowdown("d0", at_s=0.2, factor=2.0))
    sim = simulate(toy_profile, plan, arrivals, record_batches=True, slowdowns=slow)
    run = asyncio.run(replay(toy_profile, plan, list(arrivals), slowdowns=slow))
    sim_batches = sorted((b.start, b.end, b.device, b.replica, b.size) for b in sim.batches)
    run_batches = sorted((b.start, b.end, b.device, b.replica, b.size) for b in run.recorder.batches)
    assert run_batches == sim_batches
    assert [a.finished for a in run.answers()] == sim.finish.tolist()
    d0_before = [b.size for b in sim.batches if b.device == 0 and b.row == 0 and b.start < 0.2]
    d0_after = [b.size for b in sim.batches if b.device == 0 and b.row == 0 and 0.25 < b.start < 0.4]
    assert max(d0_before) > 1 and np.mean(d0_after) < np.mean(d0_before[len(d0_before) // 2 :])  # the cap fell


def test_cache_hits_match_the_simulator_on_a_repeated_input_trace(toy_profile: Profile) -> None:
    """Zipf-popular inputs through a 16-entry cache: the same requests hit, at the same times, in both engines."""
    plan = fixed_plan(toy_profile, Cascade(("m0", "m1"), (0.5,)), DEVS, max_wait_ms=2.0)
    rng = np.random.default_rng(7)
    arrivals = np.append(np.sort(rng.uniform(0, 0.5, 400)), 0.905)
    w = 1.0 / np.arange(1, 51)
    samples = rng.choice(50, size=len(arrivals), p=w / w.sum())
    sim = simulate(toy_profile, plan, arrivals, cache=PredictionCache[int](16), samples=samples)

    async def main() -> tuple[list[bool], list[float]]:
        clock = FakeClock()
        rt = emulated_runtime(toy_profile, plan, clock=clock, options=RuntimeOptions(cache_size=16))
        await rt.start()
        reqs: list[Request] = []
        times = arrivals.tolist()
        for i, t in enumerate(times):
            if i == 0 or t != times[i - 1]:
                await clock.advance_to(t, up_to_order=-1)
            reqs += rt.submit([int(samples[i])])
        await _settle(clock, *reqs)
        await rt.stop(grace_s=0.0)
        answers = [r.future.result() for r in reqs]
        return [a.cached for a in answers], [a.finished for a in answers]

    cached, finished = asyncio.run(main())
    assert sim.cached is not None and 0.3 < sim.cached.mean() < 0.95
    assert cached == sim.cached.tolist()
    assert finished == sim.finish.tolist()
