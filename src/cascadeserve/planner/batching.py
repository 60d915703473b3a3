"""SP4's measuring stick: simulate one gear at one constant load and say whether it holds.

A range ``[qps_low, qps_high)`` holds when, simulated with Poisson arrivals at ``qps_high``, the system keeps up
and (under a latency SLO) p95 ≤ L; and, when a first-stage minimum queue length above 1 makes requests wait for a
batch to fill, the same gear also meets the SLO at ``qps_low``, where batches fill slowest. Latency in between is
dominated by one of the two ends (queueing at the top, batch filling at the bottom).

"Keeps up" means the load does not outgrow the devices: latency does not trend upward (the mean latency of the
last quarter of requests is at most :data:`TREND_FACTOR` times that of the second quarter, plus one producer tick).
A backlog that grows makes latency grow linearly in time, which fails this test (the ratio tends to 7/3). Device
utilisation is *not* a criterion (it is reported as ``busy_max``): with a minimum queue length of 1 batching is
work-conserving, so a device near saturation is busy almost all the time while its batches grow to absorb the
load and latency stays flat. An earlier version also required ``busy_max`` ≤ 0.97; that rejected plans that meet
the SLO (on tweets-sklearn it made the planner need 4 devices where the best static cascade needs 2), so the
feasibility criterion is now the SLO itself plus this backlog test.

The simulator charges the plan's ``batch_overhead_ms`` on every batch, so a planner that plans with a per-batch
overhead checks its gears with it by putting it in the plan under check.

Simulations are short to keep the planner fast: long enough to hold about :data:`MIN_REQUESTS` requests and at
least 20 SLO lengths, but at most ``max_requests`` requests (the simulator's cost is per batch, so this bounds
the cost of one check), and never below half a second.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cascadeserve.plan import GearPlan
from cascadeserve.profile import Profile
from cascadeserve.simulate import simulate
from cascadeserve.traces import poisson

__all__ = ["MIN_REQUESTS", "TREND_FACTOR", "LoadCheck", "check_load", "check_seed", "sim_duration"]

TREND_FACTOR = 1.5
MIN_REQUESTS = 300


@dataclass(frozen=True)
class LoadCheck:
    keep_up: bool
    p95_ms: float
    busy_max: float
    requests: int


def sim_duration(qps: float, slo_ms: float | None, max_requests: int) -> float:
    """Seconds of simulated load at ``qps`` (see the module docstring)."""
    want = max(1.0, MIN_REQUESTS / qps, 0.02 * slo_ms if slo_ms else 0.0)
    return float(max(0.5, min(want, max_requests / qps)))


def check_seed(seed: int, range_index: int) -> int:
    """The arrival seed SP4 uses for one range (distinct per range, repeatable per planner seed)."""
    return seed * 7919 + range_index


def check_load(profile: Profile, plan: GearPlan, qps: float, duration_s: float, seed: int) -> LoadCheck:
    """Simulate ``plan`` under Poisson arrivals at ``qps`` for ``duration_s`` seconds."""
    arrivals = poisson(qps, duration_s, seed=seed).arrivals
    res = simulate(profile, plan, arrivals)
    lat = res.latency_s
    n = len(lat)
    if n == 0:
        return LoadCheck(True, 0.0, 0.0, 0)
    busy = float(res.tick_busy.mean(axis=0).max()) if len(res.tick_busy) else 0.0
    q = n // 4
    trend_ok = True
    if q >= 5:
        early = float(lat[q : 2 * q].mean())
        late = float(lat[3 * q :].mean())
        trend_ok = late <= TREND_FACTOR * early + plan.tick_ms / 1000.0
    p95 = float(np.percentile(lat, 95) * 1000.0)
    return LoadCheck(bool(trend_ok), p95, busy, n)
