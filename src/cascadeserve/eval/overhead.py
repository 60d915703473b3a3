"""The runtime's own cost per batch, measured on this machine, so that plans and simulations include it by default.

A served batch costs more than the profiled model runtime: the consumer's wake-up, the hop to the device's worker
and back, the event loop's other work. On a 2-core box this is a few tenths of a millisecond per batch, and a plan
near saturation queues on it (a 2-stage plan replayed over HTTP came out 16 % above the simulator's p95 for
it). ``eval fidelity --calibrate`` measures it over HTTP for an experiment; this module measures the runtime's part
*out of the box*, in-process and in about a second, so that it can be recorded with the profile
(``batch_overhead_ms`` in ``profile.yaml``): ``profile measure`` records it after timing the models, and
``serve --emulate`` measures it at start-up and records it when the profile has none. The planner plans with the
profile's value by default and puts it in the plan, and ``simulate`` charges it (the plan's, or the profile's when
the plan carries none).

How: the cheapest model alone on one emulated device, served by the real runtime on the real (monotonic) clock,
with Poisson arrivals at a rate that keeps the device at most 20 % busy (no queueing to speak of); per answered
request, its server-side latency minus the profiled batch runtime of the batch it ran in (batch 1 almost always).
The median is the overhead; the samples are kept for a spread.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import numpy as np

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import Profile
from cascadeserve.runtime import MonotonicClock, emulated_runtime
from cascadeserve.traces import poisson

__all__ = ["BatchOverhead", "measure_batch_overhead"]

_MAX_BUSY = 0.2
_MAX_QPS = 200.0


@dataclass(frozen=True)
class BatchOverhead:
    """Per-request server latency beyond the profiled runtime, in ms (median and 95th percentile)."""

    median_ms: float
    p95_ms: float
    samples: int
    model: str

    def to_dict(self) -> dict[str, float | int | str]:
        return {"median_ms": self.median_ms, "p95_ms": self.p95_ms, "samples": self.samples, "model": self.model}


async def _replay(profile: Profile, model: str, arrivals: np.ndarray) -> list[float]:
    plan = fixed_plan(profile, Cascade((model,), ()), [Device(name="dev0", memory_mb=1e12)], batch_overhead_ms=0.0)
    clock = MonotonicClock()
    runtime = emulated_runtime(profile, plan, clock=clock)
    row = profile.index(model)
    base_ms = float(profile.models[row].runtime.ms_at(1))
    out: list[float] = []
    async with runtime:
        t0 = clock.now()
        pending = []
        for i, at in enumerate(arrivals.tolist()):
            delay = t0 + at - clock.now()
            if delay > 0:
                await asyncio.sleep(delay)
            start = clock.now()
            (req,) = runtime.submit([i % profile.n_samples])
            pending.append((start, req))
        for start, req in pending:
            ans = await req.future
            out.append((ans.finished - start) * 1000.0 - base_ms)
    return out


def measure_batch_overhead(profile: Profile, *, seconds: float = 1.0, seed: int = 0) -> BatchOverhead:
    """Measure the runtime's per-batch overhead on this machine (see the module docstring); about ``seconds`` s."""
    model = profile.by_cost(1)[0]
    ms1 = float(profile.model(model).runtime.ms_at(1))
    qps = min(_MAX_QPS, _MAX_BUSY * 1000.0 / max(ms1, 1e-3))
    arrivals = poisson(qps, seconds, seed=seed).arrivals
    t0 = time.perf_counter()
    samples = np.asarray(asyncio.run(_replay(profile, model, arrivals)), dtype=np.float64)
    del t0
    samples = np.maximum(samples, 0.0)
    if not len(samples):
        return BatchOverhead(0.0, 0.0, 0, model)
    return BatchOverhead(float(np.median(samples)), float(np.percentile(samples, 95)), len(samples), model)
