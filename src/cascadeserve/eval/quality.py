"""The planner's quality harness (paper §6.5): planner vs exhaustive search vs random sampling.

**The constrained space** (as in the paper): every model fits every device (so every model is on every device and
the load is split evenly), batch size 1, one gear, and a short trace (Poisson arrivals at ``max_qps`` for a few
seconds by default). A point of the space is a cascade (ordered model subset × thresholds from ``levels`` equally
spaced values); its latency is the p95 of simulating it on the trace, and its accuracy the replayed validation
accuracy. Every method's points are scored by that same procedure.

* **Exhaustive** scores every point of the space.
* **Planner** runs :class:`~cascadeserve.planner.Planner` (one range, ``max_batch=1``, same levels) once per
  latency SLO in a sweep, and scores the cascade of each plan it returns. The sweep is geometric over the p95
  range that the exhaustive search observed (the query points, not the answers). ``planner_s`` is the total
  time of those runs; ``planner_run_s`` the median time of one run.
* **Random** scores cascades drawn uniformly from the space for twice the planner's total time.

Each method's latency-accuracy Pareto front is reported, with its **hypervolume**: the area it dominates
(lower latency, higher accuracy) up to the reference point (the worst p95 and the worst accuracy of all scored
points). ``hypervolume_fraction`` is the planner's hypervolume over the exhaustive one.

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
from cascadeserve.plan import SLO, Device, fixed_plan
from cascadeserve.planner import Planner
from cascadeserve.planner.batching import check_seed
from cascadeserve.planner.search import _levels
from cascadeserve.profile import Profile
from cascadeserve.simulate import simulate
from cascadeserve.traces import Trace, poisson

__all__ = ["Point", "compare_planner", "hypervolume", "pareto_points", "planner_time_sweep"]


@dataclass(frozen=True)
class Point:
    cascade: Cascade
    p95_ms: float
    accuracy: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "models": list(self.cascade.models),
            "thresholds": list(self.cascade.thresholds),
            "p95_ms": self.p95_ms,
            "accuracy": self.accuracy,
        }


def pareto_points(points: Sequence[Point]) -> list[Point]:
    """The points no other point beats on both latency (lower) and accuracy (higher), fastest first."""
    out: list[Point] = []
    best = -np.inf
    for p in sorted(points, key=lambda p: (p.p95_ms, -p.accuracy)):
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


class _Scorer:
    """Scores cascades on the constrained space, with a cache."""

    def __init__(self, profile: Profile, devices: Sequence[Device], trace: Trace) -> None:
        self.profile = profile
        self.devices = tuple(devices)
        self.trace = trace
        self.cache: dict[Cascade, Point] = {}

    def __call__(self, c: Cascade) -> Point:
        hit = self.cache.get(c)
        if hit is None:
            plan = fixed_plan(self.profile, c, self.devices, max_qps=1e9, min_queue=1)
            res = simulate(self.profile, plan, self.trace.arrivals)
            acc = float(evaluate(self.profile, c.models, np.asarray([c.thresholds]).reshape(1, -1)).accuracy[0])
            hit = self.cache[c] = Point(c, res.percentile_ms(95), acc)
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


def compare_planner(
    profile: Profile,
    devices: Sequence[Device],
    max_qps: float,
    *,
    levels: int = 10,
    n_slos: int = 20,
    trace: Trace | None = None,
    duration_s: float = 2.0,
    seed: int = 0,
    max_space: int = 20_000,
) -> dict[str, Any]:
    """Planner vs exhaustive vs random on the constrained space (see the module docstring)."""
    total_mb = sum(m.memory_mb for m in profile.models)
    if any(d.memory_mb < total_mb for d in devices):
        raise CascadeServeError(
            f"the constrained space needs every model on every device: the models need {total_mb:g} MB together, "
            f"more than a device's {min(d.memory_mb for d in devices):g} MB"
        )
    # The default trace is exactly the one the planner's SP4 simulates for its single range, so planner and
    # scorer judge a cascade on the same arrivals.
    tr = trace if trace is not None else poisson(max_qps, duration_s, seed=check_seed(seed, 0))
    space = _space(profile, levels)
    if len(space) > max_space:
        raise CascadeServeError(
            f"the constrained space has {len(space):,} cascades at {levels} levels, more than {max_space:,} to "
            f"search exhaustively; lower --levels"
        )
    score = _Scorer(profile, devices, tr)

    t0 = time.perf_counter()
    exhaustive = [score(c) for c in space]
    exhaustive_s = time.perf_counter() - t0

    lat = np.array([p.p95_ms for p in exhaustive])
    slos = np.unique(np.round(np.geomspace(max(lat.min(), 1e-3), lat.max(), n_slos), 6))
    planner_pts: list[Point] = []
    run_times: list[float] = []
    infeasible = 0
    for slo in slos.tolist():
        pl = Planner(n_ranges=1, seed=seed, levels=levels, max_batch=1, check_duration_s=tr.duration_s)
        t1 = time.perf_counter()
        try:
            pl.fit(profile, devices, SLO(kind="p95_ms", value=float(slo)), max_qps)
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
    fresh = _Scorer(profile, devices, tr)  # no cache sharing: random pays for its own simulations
    t2 = time.perf_counter()
    budget = 2.0 * planner_s
    while time.perf_counter() - t2 < budget:
        random_pts.append(fresh(space[int(rng.integers(len(space)))]))
    random_s = time.perf_counter() - t2

    everything = exhaustive + planner_pts + random_pts
    ref_p95 = max(p.p95_ms for p in everything)
    ref_acc = min(p.accuracy for p in everything)
    hv_ex = hypervolume(exhaustive, ref_p95, ref_acc)
    hv_pl = hypervolume(planner_pts, ref_p95, ref_acc)
    hv_rd = hypervolume(random_pts, ref_p95, ref_acc)
    return {
        "profile": profile.name,
        "devices": len(devices),
        "max_qps": max_qps,
        "trace": tr.source,
        "levels": levels,
        "space_size": len(space),
        "slos_ms": [float(s) for s in slos],
        "planner_infeasible": infeasible,
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
