"""The cost grid (paper Fig. 7): the fewest devices with which each system meets each (p95, accuracy) cell.

For a fixed-device system, a device count ``d`` *meets* cell ``(L, A)`` when some hyper-parameter setting of the
system, deployed on ``d`` devices and simulated on the workload's trace, has p95 ≤ L and accuracy ≥ A. The fewest
such ``d`` per cell is searched, not scanned (:mod:`cascadeserve.eval.search`): each (setting, devices) runs at
most once, a cell stops at the first setting that meets it, settings that cannot reach a cell's accuracy are not
run for it, and cells bound each other's answers. This assumes more devices never hurt, which holds for every
system here (a plan for more devices can always leave the extra ones idle). A cell no count up to
``max_devices`` meets is ``None``. While a grid runs, replays of the same plan on the trace are remembered across
settings, cells and systems (:mod:`cascadeserve.simulate.memo`; worker processes share one store), so the planner's
repeated judgments of the same static cascades, and the settings DynBa and the no-switching ablation share, are
simulated once. A cell's ``best_config`` is the best of the settings that ran at its device count.

An autoscaled system (Cocktail+) runs each setting once with the whole budget; its cost for a cell is the smallest
time-mean provisioned device count (rounded up) among the settings that meet the cell. The unrounded mean of the
setting behind the cell is in each cell's ``mean_devices``.

``savings`` per cell is the best (smallest) baseline count over cascadeserve's count, where both exist.
``median_savings`` is the median over those cells; ``min_high_accuracy_savings`` the minimum over the cells of the
upper half of the accuracy targets (the *high-accuracy* cells).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing import Manager
from typing import Any

from cascadeserve.baselines import ACCURACY_TOL, BASELINES, OURS, Outcome, System, Workload
from cascadeserve.eval.search import Settings, search_cells
from cascadeserve.planner import search_cascades
from cascadeserve.planner.static import replay_accuracy
from cascadeserve.simulate.memo import Entry, remembering

__all__ = ["CompareResult", "SystemGrid", "compare", "evaluate_system", "min_devices"]


def min_devices(meets: Callable[[int], bool], max_devices: int) -> int | None:
    """The smallest ``d`` in ``1..max_devices`` with ``meets(d)``, for a monotone ``meets`` (galloping search)."""
    if max_devices < 1:
        return None
    lo, d = 0, 1  # meets(lo) is known false (0 devices meet nothing)
    while True:
        if meets(d):
            hi = d
            break
        if d >= max_devices:
            return None
        lo, d = d, min(2 * d, max_devices)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if meets(mid):
            hi = mid
        else:
            lo = mid
    return hi


@dataclass
class SystemGrid:
    """One system's answers: devices per cell, and every outcome it simulated (by device count)."""

    system: str
    autoscaled: bool
    devices: dict[tuple[float, float], int | None]
    outcomes: dict[int, list[Outcome]]
    wall_s: float
    simulations: int

    def best(self, cell: tuple[float, float]) -> Outcome | None:
        """The outcome behind the cell's device count (lowest p95, then highest accuracy, among those meeting it)."""
        d = self.devices.get(cell)
        if d is None:
            return None
        pool = [o for outs in self.outcomes.values() for o in outs if o.devices == d and o.meets(*cell)]
        return min(pool, key=lambda o: (o.p95_ms, -o.accuracy)) if pool else None

    def best_config(self, cell: tuple[float, float]) -> dict[str, Any] | None:
        o = self.best(cell)
        return None if o is None else o.config


def evaluate_system(
    system: System,
    w: Workload,
    max_devices: int,
    *,
    curve_devices: Sequence[int] = (),
) -> SystemGrid:
    """Fill one system's column of the grid (and evaluate it at ``curve_devices`` for the trade-off curves): the
    search of :mod:`cascadeserve.eval.search`."""
    t0 = time.perf_counter()
    runs = Settings(system, w)
    cells = [(lat, acc) for lat in w.latency_slos_ms for acc in w.accuracy_targets]
    devices: dict[tuple[float, float], int | None] = {}
    if system.autoscaled:
        outs = runs.run_all(max_devices)
        for cell in cells:
            ok = [o.devices for o in outs if o.meets(*cell) and o.peak_devices <= max_devices]
            devices[cell] = min(ok) if ok else None
    else:
        devices = search_cells(cells, runs.meets, max_devices)
        for d in curve_devices:
            runs.run_all(d)
    wall = time.perf_counter() - t0
    return SystemGrid(system.name, system.autoscaled, devices, runs.by_devices, wall, runs.simulations)


_Job = tuple[System, Workload, int, tuple[int, ...], MutableMapping[str, Entry]]


def _job(args: _Job) -> SystemGrid:
    system, w, max_devices, curve, store = args
    with remembering(store):
        return evaluate_system(system, w, max_devices, curve_devices=curve)


@dataclass
class CompareResult:
    workload: Workload
    max_devices: int
    grids: dict[str, SystemGrid]
    wall_s: float
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def cells(self) -> list[tuple[float, float]]:
        w = self.workload
        return [(lat, acc) for lat in w.latency_slos_ms for acc in w.accuracy_targets]

    def high_accuracy(self) -> set[float]:
        targets = sorted(self.workload.accuracy_targets)
        return set(targets[len(targets) // 2 :])

    def savings(self, cell: tuple[float, float]) -> float | None:
        ours = self.grids[OURS].devices.get(cell) if OURS in self.grids else None
        base = [self.grids[b].devices.get(cell) for b in BASELINES if b in self.grids]
        reach = [b for b in base if b is not None]
        if ours is None or not reach:
            return None
        return min(reach) / ours

    def cascade_reaches(self) -> dict[tuple[float, float], bool]:
        """Per cell, whether some cascade of two or more models on the planner's frontier (SP1: accuracy against
        work per request) reaches the cell's accuracy target on the replayed requests. Where none does, only the
        most accurate single models reach the target: no cascade can beat the best single model there, and
        savings can come only from switching."""
        w = self.workload
        n = len(w.trace)
        front = search_cascades(w.profile, seed=w.seed).candidates
        top = max((replay_accuracy(w.profile, c.cascade, n) for c in front if len(c.models) > 1), default=-1.0)
        return {cell: top >= cell[1] - ACCURACY_TOL for cell in self.cells}

    def to_dict(self) -> dict[str, Any]:
        cells: list[dict[str, Any]] = []
        high = self.high_accuracy()
        reach = self.cascade_reaches()
        for cell in self.cells:
            cells.append(
                {
                    "p95_ms": cell[0],
                    "accuracy": cell[1],
                    "high_accuracy": cell[1] in high,
                    "cascade_reaches": reach[cell],
                    "devices": {name: g.devices[cell] for name, g in self.grids.items()},
                    "savings": self.savings(cell),
                    "best_config": {name: g.best_config(cell) for name, g in self.grids.items()},
                    # an autoscaled system is charged its time-mean device count rounded up: show the mean too
                    "mean_devices": {
                        name: (None if (o := g.best(cell)) is None else round(o.mean_devices, 3))
                        for name, g in self.grids.items()
                        if g.autoscaled
                    },
                }
            )
        sv = [c["savings"] for c in cells if c["savings"] is not None]
        hs = [c["savings"] for c in cells if c["savings"] is not None and c["high_accuracy"]]
        only_ours = [
            (c["p95_ms"], c["accuracy"])
            for c in cells
            if c["devices"].get(OURS) is not None and all(c["devices"].get(b) is None for b in BASELINES)
        ]
        w = self.workload
        return {
            "profile": w.profile.name,
            "trace": w.trace.source,
            "requests": len(w.trace),
            "max_qps": w.max_qps,
            "max_devices": self.max_devices,
            "device_memory_mb": w.device_memory_mb,
            "latency_slos_ms": list(w.latency_slos_ms),
            "accuracy_targets": list(w.accuracy_targets),
            "systems": list(self.grids),
            "cells": cells,
            "median_savings": statistics.median(sv) if sv else None,
            "min_high_accuracy_savings": min(hs) if hs else None,
            "cells_only_cascadeserve_reaches": [list(c) for c in only_ours],
            "wall_s": self.wall_s,
            "system_wall_s": {n: g.wall_s for n, g in self.grids.items()},
            "simulations": {n: g.simulations for n, g in self.grids.items()},
            **self.meta,
        }


def compare(
    w: Workload,
    systems: Sequence[System],
    max_devices: int = 16,
    *,
    jobs: int = 1,
    curve_devices: Sequence[int] = (),
    progress: Callable[[str], None] | None = None,
) -> CompareResult:
    """Every system's column of the cost grid; ``jobs`` > 1 runs systems in parallel processes. ``progress``
    hears one line per finished system (a full grid takes minutes)."""
    t0 = time.perf_counter()
    with _store(jobs) as store:
        args: list[_Job] = [(s, w, max_devices, tuple(curve_devices), store) for s in systems]
        done = _run(args, jobs, progress)
    grids = {s.name: done[s.name] for s in systems}  # in the caller's order, whatever order they finished in
    return CompareResult(w, max_devices, grids, time.perf_counter() - t0)


@contextmanager
def _store(jobs: int) -> Iterator[MutableMapping[str, Entry]]:
    """Where replays are remembered: a dict, or one that worker processes share."""
    if jobs <= 1:
        yield {}
        return
    with Manager() as manager:
        yield manager.dict()


def _run(args: list[_Job], jobs: int, progress: Callable[[str], None] | None) -> dict[str, SystemGrid]:
    done: dict[str, SystemGrid] = {}

    def finished(g: SystemGrid) -> None:
        done[g.system] = g
        if progress is not None:
            progress(
                f"cost grid: {g.system} done ({len(done)}/{len(args)}, {g.simulations} simulations, {g.wall_s:.0f} s)"
            )

    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for fut in as_completed([pool.submit(_job, a) for a in args]):
                finished(fut.result())
    else:
        for a in args:
            finished(_job(a))
    return done
