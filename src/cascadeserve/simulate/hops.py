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

A hop's time is not a constant: on a busy host its tail is long, and a request's p95 sees that tail. Where the
profile records the hop's 95th percentile as well as its mean (``serve --emulate --backend ray`` measures both),
each request's hops are drawn instead: its first hop always, each later one with the chance above, and each hop's
time from the log-normal distribution of that mean and p95 (seeded: the same run is charged the same). The mean
charge is the same as the expectation's; the tail is the measured one.

The **front door** is charged the same way, on every backend: where the profile records what a client sees of a
request beyond the server's admission-to-answer time (``front_door_ms`` and its p95: HTTP parsing and encoding, the
event loop's other work, the client's own share of the CPU; ``bench`` measures it, ``profile calibrate --bench``
records it), every answered request, cache hits included, finishes one draw of it later.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from cascadeserve.plan import GearPlan
from cascadeserve.profile import Profile
from cascadeserve.profile.spread import lognormal_sigma
from cascadeserve.simulate.result import SimResult

__all__ = ["charge_front_door", "charge_hops", "expected_hops", "hop_costs", "lognormal_sigma"]


def _crossings(plan: GearPlan) -> np.ndarray:
    """``[gear, stage]``: the chance that reaching that stage costs a hop (1 at stage 0; 0 past the gear's last)."""
    depth = max(len(g.models) for g in plan.gears)
    out = np.zeros((len(plan.gears), depth))
    devices = [d.name for d in plan.devices]
    for gi, gear in enumerate(plan.gears):
        spread = np.zeros((len(gear.models), len(devices)))  # spread[k, d]: share of stage k's load on device d
        for r in gear.replicas:
            spread[gear.models.index(r.model), devices.index(r.device)] += r.share
        spread /= np.maximum(spread.sum(axis=1, keepdims=True), 1e-12)
        out[gi, 0] = 1.0
        for k in range(1, len(gear.models)):
            out[gi, k] = 1.0 - float(spread[k - 1] @ spread[k])
    return out


def expected_hops(plan: GearPlan) -> np.ndarray:
    """``[gear, stage]``: the expected number of process hops of a request answered at that stage (1 at stage 0)."""
    return np.cumsum(_crossings(plan), axis=1)


def hop_costs(profile: Profile, plan: GearPlan) -> tuple[float, float]:
    """The hop's mean and p95 (ms) a simulation of ``plan`` charges: the plan's own ``hop_ms`` and ``hop_p95_ms``,
    else on a plan made for Ray the profile's measured ``ray_hop_ms`` and ``ray_hop_p95_ms``, else none."""
    if plan.hop_ms:
        return plan.hop_ms, plan.hop_p95_ms
    if plan.backend == "ray":
        return profile.ray_hop_ms, profile.ray_hop_p95_ms
    return 0.0, 0.0


def _answered(res: SimResult) -> np.ndarray:
    """Requests with an answer (and so a finish to move)."""
    return np.asarray(np.isfinite(res.finish) & (res.answer_stage >= 0))


def _draws(rng: np.random.Generator, mean_ms: float, sigma: float, n: int) -> np.ndarray:
    """``n`` draws (ms) of the log-normal with this mean and σ."""
    return np.asarray(rng.lognormal(math.log(mean_ms) - sigma * sigma / 2.0, sigma, n))


def charge_hops(res: SimResult, plan: GearPlan, hop_ms: float, hop_p95_ms: float = 0.0, seed: int = 0) -> SimResult:
    """``res`` with every answered request its process hops later: ``hop_ms × expected hops``, or, with a
    ``hop_p95_ms`` above ``hop_ms``, hops drawn as the module docstring says (cache hits never leave the front end,
    shed and unanswered requests have no finish to move); ``res`` itself when there is nothing to charge."""
    if hop_ms <= 0 or not len(res.finish):
        return res
    stage = np.clip(res.answer_stage, 0, None)
    charged = _answered(res)
    if res.cached is not None:
        charged &= ~res.cached
    sigma = lognormal_sigma(hop_ms, hop_p95_ms)
    if sigma == 0.0:
        delay = expected_hops(plan)[res.gear, stage] * hop_ms
    else:  # stage by stage, so the memory is one value per request whatever the cascade's depth
        cross = _crossings(plan)
        rng = np.random.default_rng(seed)
        delay = np.zeros(len(res.finish))
        for k in range(cross.shape[1]):
            idx = np.flatnonzero(charged & (stage >= k))
            if not len(idx):
                break
            hopped = idx[rng.random(len(idx)) < cross[res.gear[idx], k]]
            delay[hopped] += _draws(rng, hop_ms, sigma, len(hopped))
    finish = np.where(charged, res.finish + delay / 1000.0, res.finish)
    return dataclasses.replace(res, finish=finish)


def charge_front_door(res: SimResult, mean_ms: float, p95_ms: float = 0.0, seed: int = 1) -> SimResult:
    """``res`` with every answered request (cache hits too: they cross the front door as well) one front-door draw
    later: a log-normal of that mean and p95, seeded (the mean itself with no p95 above it); ``res`` itself when
    there is nothing to charge."""
    if mean_ms <= 0 or not len(res.finish):
        return res
    charged = _answered(res)
    if res.shed is not None:
        charged &= ~res.shed
    sigma = lognormal_sigma(mean_ms, p95_ms)
    if sigma == 0.0:
        delay = np.full(len(res.finish), mean_ms)
    else:
        delay = _draws(np.random.default_rng(seed), mean_ms, sigma, len(res.finish))
    return dataclasses.replace(res, finish=np.where(charged, res.finish + delay / 1000.0, res.finish))
