"""The planner's quality harness (paper §6.5): planner vs exhaustive search vs random sampling, under one set of rules.

**The constrained space** (as in the paper): every model fits every device (so every model is on every device and
the load is split evenly), one gear, a minimum queue of 1. A point of the space is a cascade (ordered model subset
× thresholds from ``levels`` equally spaced values). **The same rules for every method:**

* *batching*: every replica batches up to its model's cap (:func:`harness_caps`: the planner's rule without a
  latency bound, the cheapest batch per sample up to the profile's batch limit), both in the plans that score
  points and in the planner's own capacity model (``Planner(batch_caps=…)``). An earlier harness imposed batch 1
  on the planner's capacity model while its scorer let plans take the whole queue, which made the planner discard
  every accurate cascade (a hypervolume fraction of 0.50 on a 5-model text family);
* *the keep-up test*: a point is scored by SP4's own check (:func:`~cascadeserve.planner.batching.check_load`:
  Poisson arrivals at ``max_qps`` for SP4's duration, the trend test and the late p95). A point whose simulation
  builds a backlog is **infeasible** for every method: it is reported but never on a front, nor does it set the
  hypervolume's reference (a short trace used to make growing backlogs look like finite p95s);
* its latency is that check's p95, its accuracy the replayed validation accuracy.

* **Exhaustive** scores every point of the space.
* **Planner** runs :class:`~cascadeserve.planner.Planner` (one range, the harness caps, same levels) once per
  latency SLO in a sweep, and scores the cascade of each plan it returns. The sweep is geometric over the p95
  range of the feasible exhaustive points, each SLO rounded *up* (so the tightest is at least the true minimum,
  which the optimum meets). ``planner_s`` is the total time of those runs; ``planner_run_s`` the median of one.
* **Random** scores cascades drawn uniformly from the space for twice the planner's total time.

Each method's latency-accuracy Pareto front is reported, with its **hypervolume**: the area it dominates (lower
latency, higher accuracy) up to the reference point (the worst p95 and the worst accuracy of all feasible scored
points). ``hypervolume_fraction`` is the planner's hypervolume over the exhaustive one.

**The default load** (no ``max_qps``): :func:`~cascadeserve.eval.report.family_max_qps` on the harness's devices
at :data:`DEFAULT_LOAD_SLO_MS`, what the devices serve with the most accurate model alone in batches within half
that SLO, the rule ``compare`` and ``report`` use too; the output states it (``load``).

:func:`planner_time_sweep` times the planner on the full space for several ``n_ranges`` (paper Fig. 11).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations, product
from typing import Any

import numpy as np

from cascadeserve.cascade import Cascade, evaluate
from cascadeserve.errors import CascadeServeError, InfeasibleError
from cascadeserve.eval.report import family_max_qps
from cascadeserve.plan import SLO, Device, fixed_plan
from cascadeserve.planner import Planner
from cascadeserve.planner.batching import check_seed, keeps_up, sim_duration
from cascadeserve.planner.problem import default_batch_caps
from cascadeserve.planner.search import _levels
from cascadeserve.profile import Profile
from cascadeserve.simulate import simulate
from cascadeserve.traces import Trace, poisson

__all__ = [
    "DEFAULT_LOAD_SLO_MS",
    "Point",
    "compare_planner",
    "harness_caps",
    "hypervolume",
    "pareto_points",
    "planner_time_sweep",
]

DEFAULT_LOAD_SLO_MS = 50.0
"""The latency SLO of the default load (the middle of ``compare``'s default SLOs 20, 50, 100 ms)."""


@dataclass(frozen=True)
class Point:
    """One scored cascade; ``feasible`` is False when its simulation built a backlog (then it is on no front)."""

    cascade: Cascade
    p95_ms: float
    accuracy: float
    feasible: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "models": list(self.cascade.models),
            "thresholds": list(self.cascade.thresholds),
            "p95_ms": self.p95_ms,
            "accuracy": self.accuracy,
            "feasible": self.feasible,
        }


def pareto_points(points: Sequence[Point]) -> list[Point]:
    """The feasible points no other point beats on both latency (lower) and accuracy (higher), fastest first."""
    out: list[Point] = []
    best = -np.inf
    for p in sorted((p for p in points if p.feasible), key=lambda p: (p.p95_ms, -p.accuracy)):
        if p.accuracy > best:
            out.append(p)
            best = p.accuracy
    return out


def hypervolume(points: Sequence[Point], ref_p95_ms: float, ref_accuracy: float) -> float:
    """Area dominated by ``points`` inside the box from (0 ms, ``ref_accuracy``) to (``ref_p95_ms``, 1)."""
    front = [p for p in pareto_points(points) if p.p95_ms <= ref_p95_ms and p.accuracy >= ref_accuracy]
    area = 0.0
    for i, p in enumerate(front):
        right = front[i + 1].p95_ms if i + 1 < len(front) else ref_p95_ms
        # between this point's latency and the next front point's, the best accuracy reachable is this point's
        area += (right - p.p95_ms) * (p.accuracy - ref_accuracy)
    return float(area)


def harness_caps(profile: Profile) -> dict[str, int]:
    """Every model's batch cap in the harness: the planner's rule without a latency bound (the cheapest batch per
    sample up to the model's batch limit), with the profile's per-batch overhead."""
    return default_batch_caps(profile, None, overhead_ms=profile.batch_overhead_ms)


class _Scorer:
    """Scores cascades on the constrained space: one simulation of ``arrivals`` judged by SP4's keep-up test."""

    def __init__(self, profile: Profile, devices: Sequence[Device], caps: dict[str, int], arrivals: np.ndarray) -> None:
        self.profile = profile
        self.devices = tuple(devices)
        self.caps = caps
        self.arrivals = arrivals
        self.cache: dict[Cascade, Point] = {}

    def __call__(self, c: Cascade) -> Point:
        hit = self.cache.get(c)
        if hit is None:
            plan = fixed_plan(self.profile, c, self.devices, max_qps=1e9, min_queue=1, batch_caps=self.caps)
            plan = plan.model_copy(update={"batch_overhead_ms": self.profile.batch_overhead_ms})
            res = simulate(self.profile, plan, self.arrivals)
            ok, p95 = keeps_up(res.latency_s)  # no SLO: the noise allowance scales with the point's own p95
            acc = float(evaluate(self.profile, c.models, np.asarray([c.thresholds]).reshape(1, -1)).accuracy[0])
            hit = self.cache[c] = Point(c, p95, acc, ok)
        return hit


def _space(profile: Profile, levels: int) -> list[Cascade]:
    names = profile.by_cost(1)
    lv = _levels(levels)
    out: list[Cascade] = []
    for k in range(1, len(names) + 1):
        for subset in combinations(names, k):
            for th in product(lv.tolist(), repeat=k - 1):
                out.append(Cascade(subset, th))
    return out


def _slo_sweep(lat: np.ndarray, n_slos: int) -> np.ndarray:
    """``n_slos`` geometric latency SLOs over ``lat``'s range, each rounded *up* to 1 µs (never below the minimum)."""
    lo, hi = max(float(lat.min()), 1e-3), max(float(lat.max()), 1e-3)
    raw = np.geomspace(lo, hi, n_slos)
    raw[0], raw[-1] = lo, hi  # exactly the ends (geomspace may land a hair below the minimum)
    up = np.ceil(raw * 1000.0) / 1000.0
    return np.unique(np.where(up < raw, up + 0.001, up))


def compare_planner(
    profile: Profile,
    devices: Sequence[Device],
    max_qps: float | None = None,
    *,
    levels: int = 10,
    n_slos: int = 20,
    trace: Trace | None = None,
    duration_s: float | None = None,
    seed: int = 0,
    max_space: int = 20_000,
    sim_requests: int = 20_000,
) -> dict[str, Any]:
    """Planner vs exhaustive vs random on the constrained space (see the module docstring)."""
    total_mb = sum(m.memory_mb for m in profile.models)
    if any(d.memory_mb < total_mb for d in devices):
        raise CascadeServeError(
            f"the constrained space needs every model on every device: the models need {total_mb:g} MB together, "
            f"more than a device's {min(d.memory_mb for d in devices):g} MB"
        )
    if max_qps is None:
        qps = family_max_qps(profile, len(devices), DEFAULT_LOAD_SLO_MS)
        load = (
            f"{qps:,.0f} QPS (default: what {len(devices)} device(s) serve with the most accurate model alone in "
            f"batches within {DEFAULT_LOAD_SLO_MS:g}/2 ms)"
        )
    else:
        qps, load = float(max_qps), f"{float(max_qps):,.0f} QPS (given)"
    # The default trace is exactly the one the planner's SP4 simulates for its single range (the top range is
    # checked at its top QPS), so planner and scorer judge a cascade on the same arrivals.
    dur = duration_s if duration_s is not None else sim_duration(qps, None, sim_requests, n_samples=profile.n_samples)
    tr = trace if trace is not None else poisson(qps, dur, seed=check_seed(seed, 0))
    space = _space(profile, levels)
    if len(space) > max_space:
        raise CascadeServeError(
            f"the constrained space has {len(space):,} cascades at {levels} levels, more than {max_space:,} to "
            f"search exhaustively; lower --levels"
        )
    caps = harness_caps(profile)
    score = _Scorer(profile, devices, caps, tr.arrivals)

    t0 = time.perf_counter()
    exhaustive = [score(c) for c in space]
    exhaustive_s = time.perf_counter() - t0
    feasible = [p for p in exhaustive if p.feasible]
    if not feasible:
        raise CascadeServeError(
            f"no cascade keeps up with {qps:,.0f} QPS on {len(devices)} device(s): lower --max-qps or add devices"
        )

    slos = _slo_sweep(np.array([p.p95_ms for p in feasible]), n_slos)
    planner_pts: list[Point] = []
    run_times: list[float] = []
    infeasible = 0
    for slo in slos.tolist():
        pl = Planner(
            n_ranges=1,
            seed=seed,
            levels=levels,
            batch_caps=caps,
            max_batch=max(caps.values()),
            check_duration_s=tr.duration_s,
            sim_requests=sim_requests,
        )
        t1 = time.perf_counter()
        try:
            pl.fit(profile, devices, SLO(kind="p95_ms", value=float(slo)), qps)
        except InfeasibleError:
            infeasible += 1
            run_times.append(time.perf_counter() - t1)
            continue
        run_times.append(time.perf_counter() - t1)
        assert pl.plan_ is not None
        g = pl.plan_.gears[0]
        planner_pts.append(Point(Cascade(g.models, g.thresholds), float("nan"), 0.0))
    planner_s = float(sum(run_times))
    planner_pts = [score(p.cascade) for p in planner_pts]  # scored outside the timed runs, like the others

    rng = np.random.default_rng(seed)
    random_pts: list[Point] = []
    fresh = _Scorer(profile, devices, caps, tr.arrivals)  # no cache sharing: random pays for its own simulations
    t2 = time.perf_counter()
    budget = 2.0 * planner_s
    while time.perf_counter() - t2 < budget:
        random_pts.append(fresh(space[int(rng.integers(len(space)))]))
    random_s = time.perf_counter() - t2

    everything = [p for p in exhaustive + planner_pts + random_pts if p.feasible]
    ref_p95 = max(p.p95_ms for p in everything)
    ref_acc = min(p.accuracy for p in everything)
    hv_ex = hypervolume(exhaustive, ref_p95, ref_acc)
    hv_pl = hypervolume(planner_pts, ref_p95, ref_acc)
    hv_rd = hypervolume(random_pts, ref_p95, ref_acc)
    return {
        "profile": profile.name,
        "devices": len(devices),
        "max_qps": qps,
        "load": load,
        "trace": tr.source,
        "levels": levels,
        "space_size": len(space),
        "batch_caps": caps,
        "infeasible_points": len(exhaustive) - len(feasible),
        "slos_ms": [float(s) for s in slos],
        "planner_infeasible": infeasible,
        "planner_backlogged": sum(not p.feasible for p in planner_pts),
        "hypervolume_fraction": hv_pl / hv_ex if hv_ex > 0 else 1.0,
        "random_hypervolume_fraction": hv_rd / hv_ex if hv_ex > 0 else 1.0,
        "hypervolume": {"planner": hv_pl, "exhaustive": hv_ex, "random": hv_rd},
        "reference": {"p95_ms": ref_p95, "accuracy": ref_acc},
        "planner_s": planner_s,
        "planner_run_s": float(np.median(run_times)) if run_times else 0.0,
        "exhaustive_s": exhaustive_s,
        "random_s": random_s,
        "random_points": len(random_pts),
        "frontiers": {
            "planner": [p.to_dict() for p in pareto_points(planner_pts)],
            "exhaustive": [p.to_dict() for p in pareto_points(exhaustive)],
            "random": [p.to_dict() for p in pareto_points(random_pts)],
        },
    }


def planner_time_sweep(
    profile: Profile,
    devices: Sequence[Device],
    slo: SLO,
    max_qps: float,
    n_ranges: Sequence[int] = (1, 2, 5, 10, 20, 40),
    *,
    qps_dist: str = "zipf",
    seed: int = 0,
    repeats: int = 1,
) -> dict[str, Any]:
    """Planner wall time and submodule calls for each ``n_ranges`` (median of ``repeats`` runs)."""
    rows: list[dict[str, Any]] = []
    for k in n_ranges:
        times: list[float] = []
        last: dict[str, Any] = {}
        feasible = True
        for _ in range(max(1, repeats)):
            pl = Planner(n_ranges=k, qps_dist=qps_dist, seed=seed)
            t0 = time.perf_counter()
            try:
                pl.fit(profile, devices, slo, max_qps)
            except InfeasibleError:
                feasible = False
            times.append(time.perf_counter() - t0)
            assert pl.report_ is not None
            last = pl.report_.to_dict()
        rows.append(
            {
                "n_ranges": k,
                "feasible": feasible,
                "planner_s": float(np.median(times)),
                "iterations": last["iterations"],
                "submodule_calls": last["submodule_calls"],
                "submodule_s": last["submodule_s"],
                "simulations": last["simulations"],
                "converged": last["converged"],
            }
        )
    return {"profile": profile.name, "devices": len(devices), "slo": str(slo), "max_qps": max_qps, "runs": rows}
