"""SP4's measuring stick: simulate one gear under sustained load and say whether it holds, or runs away.

A range ``[qps_low, qps_high)`` holds when, simulated with Poisson arrivals at its *check load*
(:func:`~cascadeserve.policy.qps.check_qps`) for long enough to see a backlog build (:func:`sim_duration`), the
system keeps up and (under a latency SLO) p95 ≤ L; and, when a first-stage minimum queue length above 1 makes
requests wait for a batch to fill, the same gear also meets the SLO at ``qps_low``, where batches fill slowest.

**Why long, and why above the top.** An earlier check simulated 0.5-2 s and allowed the late requests' mean latency
to exceed 1.5× the early ones' *plus one producer tick*. On a family whose per-sample cost grows with batch size,
gears that passed it held for a second and then ran away (every batch took the whole queue, a longer queue made a
costlier batch, and the queue grew faster: p95 of seconds after 20 s at the gear's own top QPS). So now:

* the check load is the range's top QPS plus one standard deviation of the producer's 100 ms measurement of
  Poisson arrivals at that rate (``sqrt(qps / tick)``): the gear is chosen by that noisy measurement, so it also
  serves true rates that much above its top. The top range is checked at its top QPS itself: the user states
  that the load never exceeds it;
* the simulation lasts :data:`STABLE_SLOS` SLO lengths (:data:`STABLE_S` seconds under an accuracy SLO), at most
  :data:`MAX_S` seconds and ``max_requests`` requests, never below :data:`MIN_S` seconds (tens of thousands of
  requests at high QPS). Why in SLO lengths: a load a fraction ``ε`` above what the gear carries makes latency
  grow by ``ε`` seconds per second, so it crosses an SLO ``L`` after ``L / ε``: 100 SLO lengths see a 1 %
  overload cross the SLO (5 s for a 50 ms SLO, the floor of 1 s for a 3 ms one), and the trend test sees
  smaller ones before they cross. The cap of :data:`MAX_S` keeps loose SLOs affordable (the planner runs
  hundreds of checks); a 3 % overload under a 100 ms SLO crosses it within them;
* **keeping up** means, with the requests in arrival order split into quarters: the last quarter's mean latency is
  at most :data:`TREND_FACTOR` times the second quarter's (a growing backlog makes latency grow linearly, for which
  the ratio tends to 7/3), or exceeds it by at most :data:`TREND_NOISE` of the SLO (a stable queue near
  saturation wanders by a few ms between quarters; the old slack was a whole 100 ms tick); and the reported p95 is
  the larger of the whole run's and the last quarter's, so a backlog that starts late still shows;
* **early exit**: the first :data:`PROBE_FRACTION` of the arrivals are simulated first, and a miss there (p95 over
  the SLO: the queues start empty, so the start of a run is its fastest part) fails the check without the long
  run, which only passing gears pay (SP4's search tries many failing batch sizes);
* **every validation sample at least once**: request ``i`` takes sample ``i mod n`` (in the validation set's
  order), so at low QPS a check of a few seconds sees only the first few dozen samples, and how many of them go
  past the first stages is luck: a 3-stage gear under a 20 ms SLO passed with 60 requests (p95 9 ms) and held at
  p95 30 ms for 60 s, because more than 5 % of all samples reach its slow last stage. A check lasts at least
  until its requests cover the validation set (``n_samples``, at most ``max_requests``); at high QPS this adds
  nothing, at low QPS it adds requests, not compute worth speaking of;
* **a gear that cannot run away** is checked for :data:`MIN_S` only (``safe=True``, decided by SP4): when even the
  costliest per-sample runtime of any batch the caps allow keeps every device at most :data:`SAFE_UTIL` busy at
  the check load, no batch size the runtime can form builds a backlog, and only the p95 is in question.

Device utilisation is not a criterion of keeping up (it is reported as ``busy_max``): with a minimum queue length
of 1 batching is work-conserving up to the batch cap, so a device near saturation is busy almost all the time while
latency stays flat. SP4 bounds it separately when the planner is asked for headroom (``Planner(max_busy=…)``).

The simulator charges the plan's ``batch_overhead_ms`` on every batch, so a planner that plans with a per-batch
overhead checks its gears with it by putting it in the plan under check.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cascadeserve.plan import GearPlan
from cascadeserve.policy import PlanTables
from cascadeserve.policy.tuning import OnlineTuning
from cascadeserve.profile import Profile
from cascadeserve.simulate import simulate
from cascadeserve.traces import poisson

__all__ = [
    "MAX_S",
    "MIN_S",
    "PROBE_FRACTION",
    "SAFE_UTIL",
    "STABLE_S",
    "STABLE_SLOS",
    "TREND_FACTOR",
    "TREND_NOISE",
    "LoadCheck",
    "check_load",
    "check_seed",
    "keeps_up",
    "sim_duration",
]

TREND_FACTOR = 1.5
TREND_NOISE = 0.05
STABLE_SLOS = 100.0
STABLE_S = 5.0
MIN_S = 1.0
MAX_S = 6.0
PROBE_FRACTION = 0.25
SAFE_UTIL = 0.8
_MIN_QUARTER = 5


@dataclass(frozen=True)
class LoadCheck:
    keep_up: bool
    p95_ms: float
    busy_max: float
    requests: int


def sim_duration(
    qps: float, slo_ms: float | None, max_requests: int, *, safe: bool = False, n_samples: int = 0
) -> float:
    """Seconds of simulated load at ``qps`` (see the module docstring); with ``n_samples``, long enough that the
    requests cover the validation set once (at most ``max_requests``)."""
    rate = max(qps, 1e-9)
    cover = min(n_samples, max_requests) / rate
    if safe:
        return float(max(MIN_S, cover))
    want = min(MAX_S, STABLE_SLOS * slo_ms / 1000.0) if slo_ms else STABLE_S
    return float(max(MIN_S, cover, min(want, max_requests / rate)))


def check_seed(seed: int, range_index: int) -> int:
    """The arrival seed SP4 uses for one range (distinct per range, repeatable per planner seed)."""
    return seed * 7919 + range_index


def keeps_up(latency_s: np.ndarray, slo_ms: float | None = None) -> tuple[bool, float]:
    """(no growing backlog, p95 ms) of latencies in arrival order: the trend test and the p95 of the module
    docstring (the larger of the whole run's and the last quarter's). Without an SLO, the noise allowance is
    :data:`TREND_NOISE` of the second quarter's p95."""
    n = len(latency_s)
    if n == 0:
        return True, 0.0
    p95 = float(np.percentile(latency_s, 95))
    q = n // 4
    if q < _MIN_QUARTER:
        return bool(np.all(np.isfinite(latency_s))), p95 * 1000.0
    second = latency_s[q : 2 * q]
    early = float(second.mean())
    late_part = latency_s[3 * q :]
    late = float(late_part.mean())
    p95 = max(p95, float(np.percentile(late_part, 95)))
    noise = TREND_NOISE * (slo_ms / 1000.0 if slo_ms else float(np.percentile(second, 95)))
    return bool(late <= TREND_FACTOR * early or late <= early + noise), p95 * 1000.0


def _run(profile: Profile, plan: GearPlan, arrivals: np.ndarray, slo_ms: float | None) -> LoadCheck:
    tuning = None
    if plan.audit_fraction > 0:  # sized for online tuning's audits: their device work is part of the check
        tuning = OnlineTuning.audits_only(PlanTables(plan, {m: profile.index(m) for m in profile.model_names}),
                                          plan.audit_fraction)  # fmt: skip
    res = simulate(profile, plan, arrivals, tuning=tuning)
    lat = res.latency_s
    if len(lat) == 0:
        return LoadCheck(True, 0.0, 0.0, 0)
    busy = float(res.tick_busy.mean(axis=0).max()) if len(res.tick_busy) else 0.0
    ok, p95 = keeps_up(lat, slo_ms)
    return LoadCheck(ok, p95, busy, len(lat))


def check_load(
    profile: Profile,
    plan: GearPlan,
    qps: float,
    duration_s: float,
    seed: int,
    *,
    slo_ms: float | None = None,
) -> LoadCheck:
    """Simulate ``plan`` under Poisson arrivals at ``qps`` for ``duration_s`` seconds; with ``slo_ms``, a probe
    of the first :data:`PROBE_FRACTION` of the arrivals ends the check early when it already misses the SLO.
    ``requests`` counts every simulated request (probe included)."""
    arrivals = poisson(qps, duration_s, seed=seed).arrivals
    probe_n = int(len(arrivals) * PROBE_FRACTION)
    spent = 0
    if slo_ms is not None and probe_n >= 4 * _MIN_QUARTER * 10:
        probe = _run(profile, plan, arrivals[:probe_n], slo_ms)
        spent = probe.requests
        if probe.p95_ms > slo_ms:  # keep_up stays the probe's: a miss is not a runaway
            return LoadCheck(probe.keep_up, probe.p95_ms, probe.busy_max, spent)
    full = _run(profile, plan, arrivals, slo_ms)
    return LoadCheck(full.keep_up, full.p95_ms, full.busy_max, full.requests + spent)
