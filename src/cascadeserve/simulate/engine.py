"""The simulator of a cascadeserve deployment (paper appendix C): one entry point, :func:`simulate`, two engines.

It replays an arrival trace against a gear plan and a profile and decides nothing itself:

* the **reference** engine (:mod:`cascadeserve.simulate.reference`) *is* the serving runtime (its producer,
  consumers, queues and the :mod:`cascadeserve.policy` decisions they apply) on emulated devices and a virtual
  clock that jumps from event to event. Every hook runs there: a prediction cache, device slowdowns, online
  tuning, any adaptive batch limit, admission, a gear schedule, appendix C.2's QPS scale;
* the **compiled** engine (:mod:`cascadeserve.simulate.compiled`) replays the same trajectory, to the bit, in a
  numba loop over plain arrays, for the runs that need speed (the planner's SP4 checks, ``compare``, paper-scale
  replays). It applies the plan's gears and triggers, a gear schedule, a count bound on admission, an AIMD batch
  limit, ``samples`` and ``qps_scale``; a property test checks it against the reference on random runs.

``engine="auto"`` takes the compiled engine when it applies every hook of the run and the reference otherwise;
:attr:`SimResult.engine` and :attr:`SimResult.engine_note` say which ran and why. A plan served on Ray also pays its
process hops (:mod:`cascadeserve.simulate.hops`). The order at one instant, for both: the producer's tick, then the
arrivals, then device events (the lowest device first); request ``i`` uses validation sample ``i mod n``; after the
last tick window every queue drains, and a request never answered is reported unanswered.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from cascadeserve.plan import GearPlan
from cascadeserve.policy import AdmissionPolicy, GearSchedule, PlanTables
from cascadeserve.policy.adaptive import BatchLimit, batch_limit_for
from cascadeserve.policy.cache import PredictionCache
from cascadeserve.policy.tuning import OnlineTuning
from cascadeserve.profile import Profile
from cascadeserve.profile.slowdown import Slowdowns
from cascadeserve.simulate.compiled import Engine, run_compiled, unsupported
from cascadeserve.simulate.hops import charge_front_door, charge_hops, hop_costs
from cascadeserve.simulate.reference import run_reference
from cascadeserve.simulate.result import SimResult
from cascadeserve.simulate.scenario import Scenario
from cascadeserve.simulate.ticks import tick_windows

__all__ = ["Scenario", "simulate", "tick_windows"]  # Scenario: simulate.scenario's, re-exported


def simulate(
    profile: Profile,
    plan: GearPlan,
    arrivals: Sequence[float] | np.ndarray,
    *,
    record_batches: bool = False,
    batch_limit: BatchLimit | None = None,
    gear_schedule: GearSchedule | None = None,
    cache: PredictionCache[Any] | None = None,
    slowdowns: Slowdowns | None = None,
    samples: np.ndarray | None = None,
    admission: AdmissionPolicy | None = None,
    tuning: OnlineTuning | None = None,
    engine: Engine = "auto",
    qps_scale: np.ndarray | None = None,
) -> SimResult:
    """Simulate ``plan`` serving ``arrivals`` (seconds, sorted) with ``profile``'s runtimes and records.

    ``batch_limit``, ``gear_schedule``, ``cache`` (keyed by sample id), ``slowdowns``, ``admission`` and ``tuning``
    are the optional hooks (:mod:`cascadeserve.simulate` lists them; those that hold state want fresh ones per run;
    without a ``batch_limit`` the plan's ``batching`` builds one); ``samples`` gives each request's validation
    sample (default ``i mod n``); ``qps_scale`` tick ``w``'s factor on the measured QPS (the last holds past its
    end; default the plan's own). ``engine``: ``"auto"`` runs the compiled engine unless a hook needs the
    reference; ``"compiled"`` or ``"reference"`` forces one (``"python"``, its old name, still works, with a
    warning). Both replay the same trajectory to the bit.
    """
    wall0 = time.perf_counter()
    if engine == "python":
        warnings.warn('simulate(engine="python") is now engine="reference"', DeprecationWarning, stacklevel=2)
        engine = "reference"
    if engine not in ("auto", "compiled", "reference"):
        raise ValueError(f"engine: {engine!r} is not one of auto, compiled, reference")
    plan.check_against(profile)
    tables = PlanTables(plan, {m: profile.index(m) for m in profile.model_names})
    scn = Scenario(
        profile,
        plan,
        tables,
        tables.gear_policy(gear_schedule),  # refuses a schedule naming a missing gear
        record_batches=record_batches,
        batch_limit=batch_limit if batch_limit is not None else batch_limit_for(plan),
        gear_schedule=gear_schedule,
        cache=cache,
        slowdowns=slowdowns or None,
        admission=admission,
        tuning=tuning,
    )
    arr = np.asarray(arrivals, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError("arrivals must be a 1-D array of times in seconds")
    if len(arr) and (np.any(np.diff(arr) < 0) or arr[0] < 0):
        raise ValueError("arrival times must be non-negative and sorted")
    n, n_samples = len(arr), profile.n_samples
    sample_of = None if samples is None else np.asarray(samples, dtype=np.int64)
    if sample_of is not None and (
        sample_of.shape != arr.shape or (n and (sample_of.min() < 0 or sample_of.max() >= n_samples))
    ):
        raise ValueError(f"samples must hold one validation sample index in [0, {n_samples}) per arrival")
    why = unsupported(scn)
    if engine == "compiled" or (engine == "auto" and why is None):
        res = run_compiled(scn, arr, sample_of, wall0, qps_scale)
    else:
        res = run_reference(scn, arr, sample_of, qps_scale, wall0)
        res.engine_note = "forced" if engine == "reference" else f"the compiled engine does not apply {why}"
    hop_ms, hop_p95_ms = hop_costs(profile, plan)
    res = charge_hops(res, plan, hop_ms, hop_p95_ms)
    return charge_front_door(res, profile.front_door_ms, profile.front_door_p95_ms)
