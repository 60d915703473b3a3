"""Clipper's adaptive batching on the Ray backend: each server builds its replicas' limits from the plan it
receives, so ``quantile`` and ``aimd`` run there as on the local runtime, and a hot-swap brings the new plan's."""

from __future__ import annotations

import asyncio

import pytest

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import Profile
from cascadeserve.runtime import Answer, Recorder

ray = pytest.importorskip("ray")
from cascadeserve.backends.ray import RayBackend  # noqa: E402

pytestmark = pytest.mark.usefixtures("ray_session")


def test_adaptive_batching_runs_on_the_servers_and_survives_a_swap(toy_profile: Profile) -> None:
    devs = (Device(name="d0", memory_mb=1000),)
    quantile = fixed_plan(toy_profile, Cascade(("m0",), ()), devs).model_copy(
        update={"batching": "quantile", "batch_target_ms": 50.0}
    )
    aimd = quantile.model_copy(update={"batching": "aimd"})
    rec = Recorder()

    async def main() -> list[Answer | BaseException]:
        rt = RayBackend().emulated_runtime(toy_profile, quantile, observer=rec)
        await rt.start()
        reqs = rt.submit(list(range(300)))
        first = await asyncio.wait_for(asyncio.gather(*(r.future for r in reqs), return_exceptions=True), 60)
        rt.swap_plan(aimd)
        reqs = rt.submit(list(range(300)))
        second = await asyncio.wait_for(asyncio.gather(*(r.future for r in reqs), return_exceptions=True), 60)
        for _ in range(600):  # a later poll brings the servers' batch events (0.25 s quiet; longer on a busy host)
            if sum(b.size for b in rec.batches) >= 600:
                break
            await asyncio.sleep(0.05)
        await rt.stop(grace_s=1.0)
        return list(first) + list(second)

    answers = asyncio.run(main())
    assert all(isinstance(a, Answer) for a in answers) and len(answers) == 600
    for gen in (0, 1):
        sizes = [b.size for b in sorted(rec.batches, key=lambda b: b.start) if b.generation == gen]
        assert sum(sizes) == 300
        assert sizes[0] == 1  # both policies start every replica at a cap of 1 and grow it
        assert max(sizes) < 300  # a whole-queue batch would have taken everything queued at once


def test_the_cache_answers_at_the_ray_front_end(toy_profile: Profile) -> None:
    """The cache sits at admission, on the front end: a hit is answered there and never sent to a server."""
    from cascadeserve.runtime import RuntimeOptions

    plan = fixed_plan(toy_profile, Cascade(("m0",), ()), (Device(name="d0", memory_mb=1000),))
    rec = Recorder()

    async def main() -> tuple[Answer, Answer, bool]:
        rt = RayBackend().emulated_runtime(toy_profile, plan, observer=rec, options=RuntimeOptions(cache_size=8))
        await rt.start()
        first = await asyncio.wait_for(rt.infer(4), 60)
        (again,) = rt.submit([4])
        done_at_once = again.done
        await rt.stop(grace_s=1.0)
        return first, again.future.result(), done_at_once

    first, hit, done_at_once = asyncio.run(main())
    assert done_at_once and hit.cached and not first.cached and hit.label == first.label
    assert rec.n_admitted == 1
