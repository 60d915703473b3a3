"""The simulator's side of re-planning: a run whose plan is swapped when the load drifts (``serve --replan``).

:func:`simulate_replanning` replays a trace as a server with ``--replan`` serves it:

1. Every producer tick's measured QPS (the same meter and tick windows as the engine) goes to one
   :class:`~cascadeserve.policy.replan.LoadDrift`, in order. Its scale factor becomes the per-tick ``qps_scale`` of
   the engine (applied from the next tick, as the runtime applies it); its drift decisions start a re-plan.
2. A re-plan takes ``delay_s`` of simulated time (what the server's child process takes, measured by
   ``benchmarks/bench_replan.py``), then ``replanner(weights, plan)`` (the gear planner, injected: the simulator
   sits below the planner) returns the new plan, or ``None`` when it failed. ``LoadDrift.judge`` decides: swap
   (``auto``), notify or keep. At most one re-plan runs at a time, as in the server.
3. A swap at the tick ``t`` takes the arrivals from ``t`` on
   (:func:`~cascadeserve.policy.replan.plan_in_force`); each plan's arrivals are simulated as their own segment,
   so a request admitted under the old plan finishes under it (the old plan's queues drain at the end of its
   segment: every queue fires as soon as its device is free, as the runtime's draining generation does).

With ``tuning_for`` (``simulate --replan ... --tune``), each plan's segment runs with its own online threshold
tuning, ``tuning_for(plan)``, as ``serve --tune --replan`` builds a fresh tuner for every plan generation it serves:
the tuner works on the plan in force, and a swapped-in plan starts from its planned thresholds. The segments'
threshold changes are merged in time order (their ``gear`` indexes the plan in force at ``at``: see ``swap_times``).

Approximation: the old plan's drain and the new plan's first batches run on separate copies of the devices (the
runtime shares them). The drain is a few batches, a few milliseconds with the profiles here; the new plan's first
tick starts from the gear for 0 QPS (the runtime's new generation starts from the last tick's gear lookup).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from cascadeserve.plan import GearPlan
from cascadeserve.policy import QpsMeter
from cascadeserve.policy.drift import DriftDecision
from cascadeserve.policy.replan import DriftSettings, LoadDrift, ReplanVerdict, plan_in_force
from cascadeserve.policy.tuning import OnlineTuning
from cascadeserve.profile import Profile
from cascadeserve.simulate.engine import simulate
from cascadeserve.simulate.result import SimResult
from cascadeserve.simulate.ticks import tick_windows

__all__ = ["ReplanEvent", "ReplanRun", "simulate_replanning"]

Replanner = Callable[[np.ndarray, GearPlan], GearPlan | None]
TuningFactory = Callable[[GearPlan], OnlineTuning]


@dataclass(frozen=True)
class ReplanEvent:
    """One re-plan: started on ``drift`` at ``started``, finished at ``finished`` with ``verdict`` (``None``: the
    re-plan failed)."""

    drift: DriftDecision
    started: float
    finished: float
    verdict: ReplanVerdict | None


@dataclass
class ReplanRun:
    """The merged run (request arrays over the whole trace), the plans in force and when each took over."""

    result: SimResult
    plans: list[GearPlan]
    swap_times: list[float]
    events: list[ReplanEvent] = field(default_factory=list)
    tick_scale: np.ndarray = field(default_factory=lambda: np.zeros(0))
    plan_of: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # plan index per request


def simulate_replanning(
    profile: Profile,
    plan: GearPlan,
    arrivals: Sequence[float] | np.ndarray,
    *,
    settings: DriftSettings,
    replanner: Replanner,
    delay_s: float = 5.0,
    samples: np.ndarray | None = None,
    tuning_for: TuningFactory | None = None,
) -> ReplanRun:
    """Replay ``arrivals`` under ``plan`` with load-drift scaling and re-planning (module docstring)."""
    wall0 = time.perf_counter()
    arr = np.asarray(arrivals, dtype=np.float64)
    n = len(arr)
    tick = plan.tick_ms / 1000.0
    n_ticks = tick_windows(arr, tick)
    bounds = np.searchsorted(arr, tick * np.arange(n_ticks + 1), side="left") if n else np.zeros(1, dtype=np.int64)
    counts = np.diff(bounds)
    drift = LoadDrift(plan, settings)
    scale = np.full(n_ticks + 1, plan.qps_scale)
    plans, swap_ticks = [plan], [0]
    events: list[ReplanEvent] = []
    meter = QpsMeter(tick, min_arrivals=plan.qps_min_arrivals)
    pending: tuple[DriftDecision, float, int] | None = None  # decision, ready at, started at tick
    for w in range(1, n_ticks):
        t_w = w * tick
        if pending is not None and t_w >= pending[1] - 1e-9:
            decision, _, w0 = pending
            pending = None
            new = replanner(np.array(decision.measured), plans[-1])
            verdict = None if new is None else drift.judge(plans[-1], new)
            events.append(ReplanEvent(decision, w0 * tick, t_w, verdict))
            if new is not None and verdict is not None and verdict.action == "swap":
                plans.append(new)
                swap_ticks.append(w)
                drift.replanned(new)
                scale[w] = new.qps_scale  # the new generation's selector starts with its plan's own scale
        meter.record(int(counts[w - 1]))  # the window that closed at t_w, measured as the engine and runtime do
        lt = drift.tick(meter.tick(t_w), t_w)
        scale[w + 1] = lt.scale
        if lt.drift is not None and pending is None:
            pending = (lt.drift, t_w + delay_s, w)
    swap_times = [w * tick for w in swap_ticks[1:]]
    plan_of = np.array([plan_in_force(swap_times, float(a)) for a in arr], dtype=np.int64) if n else np.zeros(0, int)
    parts: list[tuple[np.ndarray, SimResult, float, float]] = []
    n_samples = profile.n_samples
    for i, p in enumerate(plans):
        idx = np.flatnonzero(plan_of == i)
        t0 = swap_ticks[i] * tick
        seg_samples = (idx % n_samples) if samples is None else np.asarray(samples)[idx]
        tuning = None if tuning_for is None else tuning_for(p)
        res = simulate(profile, p, arr[idx] - t0, samples=seg_samples, tuning=tuning, qps_scale=scale[swap_ticks[i] :])
        parts.append((idx, res, t0, p.tick_ms / 1000.0))
    return ReplanRun(_merge(arr, parts, time.perf_counter() - wall0), plans, swap_times, events, scale, plan_of)


def _merge(arr: np.ndarray, parts: list[tuple[np.ndarray, SimResult, float, float]], wall_s: float) -> SimResult:
    """One result over every request (segment times shifted back), the segments' tick series back to back."""
    n = len(arr)
    finish = np.full(n, np.inf)
    row = np.full(n, -1, dtype=np.int64)
    stage = np.zeros(n, dtype=np.int64)
    gear = np.zeros(n, dtype=np.int64)
    correct = np.zeros(n, dtype=bool)
    ticks: list[list[np.ndarray]] = [[], [], [], [], []]
    changes = []
    for k, (idx, res, t0, tick) in enumerate(parts):
        finish[idx] = res.finish + t0
        row[idx], stage[idx], gear[idx], correct[idx] = res.answer_row, res.answer_stage, res.gear, res.correct
        end = len(res.tick_times)
        if k + 1 < len(parts):  # this plan's ticks stop where the next one's begin
            end = min(end, round((parts[k + 1][2] - t0) / tick))
        # the tuner's changes on this plan's clock, up to the next plan's start (a draining plan's re-tunes serve
        # no new request)
        stop = parts[k + 1][2] if k + 1 < len(parts) else np.inf
        changes += [replace(c, at=c.at + t0) for c in res.threshold_changes if c.at + t0 < stop]
        series = (res.tick_times + t0, res.tick_qps, res.tick_gear, res.tick_q0, res.tick_busy)
        for lst, a in zip(ticks, series, strict=True):
            lst.append(a[:end])
    tick_busy = np.concatenate(ticks[4]) if ticks[4] else np.zeros((0, 0))
    return SimResult(
        arrivals=arr,
        finish=finish,
        answer_row=row,
        answer_stage=stage,
        gear=gear,
        correct=correct,
        tick_times=np.concatenate(ticks[0]),
        tick_qps=np.concatenate(ticks[1]),
        tick_gear=np.concatenate(ticks[2]),
        tick_q0=np.concatenate(ticks[3]),
        tick_busy=tick_busy,
        wall_s=wall_s,
        threshold_changes=changes,
        # the segments' engines (each plan in force is one run; a hook makes them all take the reference)
        engine="/".join(sorted({res.engine for _, res, _, _ in parts})) or "compiled",
        engine_note="; ".join(sorted({res.engine_note for _, res, _, _ in parts} - {""})),
    )
