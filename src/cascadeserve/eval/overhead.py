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

On the Ray backend (``serve --emulate --backend ray``) the same run goes through the backend's own server actor,
and splits each request's excess in two: the server's part (its queue + compute time beyond the profiled runtime,
the per-batch overhead as above) and the rest, the **process hop** (the actor call there and the answer's way
back, a few ms on a small machine), whose mean and 95th percentile are recorded as the profile's ``ray_hop_ms``
and ``ray_hop_p95_ms``; plans made for Ray charge it per hop (:mod:`cascadeserve.simulate.hops`). The first 1.5 s
of that run warm the new Ray instance up and are not counted.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.policy.costs import mean_and_p95
from cascadeserve.profile import Profile
from cascadeserve.runtime import Backend, MonotonicClock, Runtime, emulated_runtime
from cascadeserve.traces import poisson

__all__ = ["BatchOverhead", "measure_batch_overhead"]

_MAX_BUSY = 0.2
_MAX_QPS = 200.0
_RAY_WARMUP_S = 1.5


@dataclass(frozen=True)
class BatchOverhead:
    """Per-request server latency beyond the profiled runtime, in ms (median and 95th percentile); on a backend
    whose devices live in other processes, also the process hop's mean and 95th percentile (``hop_ms``,
    ``hop_p95_ms``)."""

    median_ms: float
    p95_ms: float
    samples: int
    model: str
    hop_ms: float = 0.0
    hop_p95_ms: float = 0.0

    def to_dict(self) -> dict[str, float | int | str]:
        return {
            "median_ms": self.median_ms,
            "p95_ms": self.p95_ms,
            "samples": self.samples,
            "model": self.model,
            "hop_ms": self.hop_ms,
            "hop_p95_ms": self.hop_p95_ms,
        }


async def _replay(
    runtime: Runtime, profile: Profile, model: str, arrivals: np.ndarray, warmup_s: float = 0.0
) -> list[tuple[float, float]]:
    """(latency, server time) in ms beyond the profiled batch-1 runtime, per answered request that arrived after
    ``warmup_s`` (the earlier ones are sent and answered, not counted)."""
    clock = runtime.clock
    row = profile.index(model)
    base_ms = float(profile.models[row].runtime.ms_at(1))
    out: list[tuple[float, float]] = []
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
            if start - t0 < warmup_s:
                continue
            server_ms = (ans.queue_s + ans.compute_s) * 1000.0
            out.append(((ans.finished - start) * 1000.0 - base_ms, server_ms - base_ms))
    return out


def measure_batch_overhead(
    profile: Profile, *, seconds: float = 1.0, seed: int = 0, backend: Backend | None = None
) -> BatchOverhead:
    """Measure the runtime's per-batch overhead on this machine (see the module docstring); about ``seconds`` s
    (on Ray 1.5 s more: the requests of the first 1.5 s warm the instance up and are not counted).

    With a ``backend`` whose devices live in other processes (Ray), its own devices serve the run: the overhead is
    then the server-side part (queue + compute as the server reports it, beyond the profiled runtime) and
    ``hop_ms`` / ``hop_p95_ms`` the mean / 95th percentile of the rest of each request's latency (the call to the
    server and the answer's way back)."""
    model = profile.by_cost(1)[0]
    ms1 = float(profile.model(model).runtime.ms_at(1))
    qps = min(_MAX_QPS, _MAX_BUSY * 1000.0 / max(ms1, 1e-3))
    # A fresh Ray instance starts its worker pool for a second or two after its first actor answers, on the same
    # cores: the hop of that window is not the steady state's (one start-up run here measured 21 ms against 5 ms).
    warmup_s = 0.0 if backend is None else _RAY_WARMUP_S
    arrivals = poisson(qps, seconds + warmup_s, seed=seed).arrivals
    plan = fixed_plan(profile, Cascade((model,), ()), [Device(name="dev0", memory_mb=1e12)], batch_overhead_ms=0.0)
    if backend is None:
        runtime = emulated_runtime(profile, plan, clock=MonotonicClock())
    else:
        runtime = backend.emulated_runtime(profile, plan)
    answered = asyncio.run(_replay(runtime, profile, model, arrivals, warmup_s))
    got = np.asarray(answered, dtype=np.float64).reshape(-1, 2)
    if not len(got):
        return BatchOverhead(0.0, 0.0, 0, model)
    # The local runtime has no hop: the whole excess is its per-batch overhead, as it always was measured.
    total, server = np.maximum(got[:, 0], 0.0), np.maximum(got[:, 1], 0.0)
    samples = total if backend is None else server
    hop, hop_p95 = (0.0, 0.0) if backend is None else mean_and_p95(np.maximum(total - server, 0.0))
    median, p95 = float(np.median(samples)), float(np.percentile(samples, 95))
    return BatchOverhead(median, p95, len(samples), model, hop_ms=hop, hop_p95_ms=hop_p95)
