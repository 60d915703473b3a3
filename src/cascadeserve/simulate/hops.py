"""Process hops: the latency a distributed backend adds to a request on its way through the cascade.

On the Ray backend (``GearPlan.backend == "ray"``) a request costs one actor call to reach the server of its
first-stage replica, and one more each time a sample goes on to a replica on *another* device (a replica on the
same device is queued in the same server, at no cost); each call's answer comes back along the same chain. On one
small machine a call and its answer take a few milliseconds (``benchmarks/RESULTS.md``), which is no device time:
the device serves other batches meanwhile. So the simulator charges it as latency only, after the replay: a request
answered at stage ``k`` of gear ``g`` finishes ``hop_ms × expected_hops(plan)[g, k]`` later.

The count is an expectation: the routers pick the next stage's replica by the gear's shares, whatever device the
sample is on, so the chance that stage ``k + 1`` runs on another device than stage ``k`` is
``1 − Σ_d p_k(d)·p_{k+1}(d)``, with ``p_k(d)`` the share of stage ``k``'s load that device ``d`` takes. Forwarded
samples also reach their next queue a little later than the replay has them, which this leaves out (it moves whole
streams by the same small delay; what a p95 sees is the sum above).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from cascadeserve.plan import GearPlan
from cascadeserve.simulate.result import SimResult

__all__ = ["charge_hops", "expected_hops"]


def expected_hops(plan: GearPlan) -> np.ndarray:
    """``[gear, stage]``: the expected number of process hops of a request answered at that stage (1 at stage 0)."""
    depth = max(len(g.models) for g in plan.gears)
    out = np.zeros((len(plan.gears), depth))
    devices = [d.name for d in plan.devices]
    for gi, gear in enumerate(plan.gears):
        spread = np.zeros((len(gear.models), len(devices)))  # spread[k, d]: share of stage k's load on device d
        for r in gear.replicas:
            spread[gear.models.index(r.model), devices.index(r.device)] += r.share
        spread /= np.maximum(spread.sum(axis=1, keepdims=True), 1e-12)
        hops = 1.0
        out[gi, 0] = hops
        for k in range(1, len(gear.models)):
            hops += 1.0 - float(spread[k - 1] @ spread[k])
            out[gi, k] = hops
        out[gi, len(gear.models) :] = hops
    return out


def charge_hops(res: SimResult, plan: GearPlan, hop_ms: float) -> SimResult:
    """``res`` with every answered request ``hop_ms × expected hops`` later (cache hits never leave the front end,
    shed and unanswered requests have no finish to move); ``res`` itself when there is nothing to charge."""
    if hop_ms <= 0 or not len(res.finish):
        return res
    hops = expected_hops(plan)[res.gear, np.clip(res.answer_stage, 0, None)]
    charged = np.isfinite(res.finish) & (res.answer_stage >= 0)
    if res.cached is not None:
        charged &= ~res.cached
    finish = np.where(charged, res.finish + hops * (hop_ms / 1000.0), res.finish)
    return dataclasses.replace(res, finish=finish)
