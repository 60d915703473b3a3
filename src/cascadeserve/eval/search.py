"""The search behind one system's column of the cost grid: the fewest devices per cell, with few simulations.

A cell ``(L, A)`` is met at ``d`` devices when some setting of the system, deployed on ``d`` devices, replays the
trace with p95 ≤ L and accuracy ≥ A. What a replay costs (seconds at the paper's scale, and a planner fit per
setting for the planner-based systems) makes the number of (setting, devices) runs the whole cost, so:

* **Each (setting, devices) runs at most once** (:class:`Settings`), whatever cell asks; and a setting whose
  accuracy bound (:meth:`~cascadeserve.baselines.System.accuracy_bound`) is below a cell's target is not run for
  it. A cell is met as soon as one setting meets it; the settings most likely to meet it go first (the one planned
  for the cell's own SLO; of single models or fixed cascades, the least accurate that can reach the target, since
  it is the fastest). Whether a cell is met at ``d`` does not depend on this order: a cell that no setting meets
  has run every setting that could.
* **Cells bound each other** (:func:`search_cells`). A setting that meets ``(L, A)`` meets every easier cell
  (``L' ≥ L``, ``A' ≤ A``) at the same count; where no setting meets a cell, none meets a harder one. The cells go
  easiest first, so each starts above what its easier neighbours needed; within its bounds a cell gallops up from
  the lowest count not yet ruled out (1, 2, 4, … steps) and bisects back.

Like the old per-cell galloping, this assumes more devices never hurt (a plan for more devices can leave the extra
ones idle); under that assumption it returns the same counts as scanning every count and every setting, which
``tests/eval/test_search.py`` checks against such a scan.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from cascadeserve.baselines import ACCURACY_TOL, Config, Outcome, System, Workload

__all__ = ["Cell", "Settings", "search_cells"]

Cell = tuple[float, float]  # (p95 ms, accuracy)


def _key(config: Config) -> str:
    return json.dumps(config, sort_keys=True, default=str)


def _aims_at(config: Config, cell: Cell) -> bool:
    """Whether ``config`` was planned for this very cell's latency or accuracy SLO."""
    lat, acc = cell
    if config.get("slo") == "accuracy":
        return bool(config.get("value") == acc)
    if config.get("slo") == "p95_ms":
        return bool(config.get("value") == lat)
    return bool(config.get("slo_ms") == lat)


class Settings:
    """One system's settings on one workload, each run at most once per device count."""

    def __init__(self, system: System, w: Workload) -> None:
        self.system = system
        self.w = w
        self.runs: dict[tuple[str, int], Outcome | None] = {}
        self.by_devices: dict[int, list[Outcome]] = {}
        self._configs: dict[int, list[Config]] = {}
        self._bounds: dict[str, float | None] = {}

    @property
    def simulations(self) -> int:
        return sum(o is not None for o in self.runs.values())

    def configs(self, d: int) -> list[Config]:
        hit = self._configs.get(d)
        if hit is None:
            hit = self._configs[d] = self.system.configs(self.w, d)
        return hit

    def bound(self, config: Config) -> float | None:
        k = _key(config)
        if k not in self._bounds:
            self._bounds[k] = self.system.accuracy_bound(self.w, config)
        return self._bounds[k]

    def outcome(self, d: int, config: Config) -> Outcome | None:
        k = (_key(config), d)
        if k not in self.runs:
            got = self.runs[k] = self.system.evaluate(self.w, d, config)
            if got is not None:
                self.by_devices.setdefault(d, []).append(got)
        return self.runs[k]

    def run_all(self, d: int) -> list[Outcome]:
        """Every setting at ``d`` (the trade-off curves want them all)."""
        for cfg in self.configs(d):
            self.outcome(d, cfg)
        return self.by_devices.get(d, [])

    def meets(self, d: int, cell: Cell) -> bool:
        """Whether some setting at ``d`` meets ``cell``, running only settings that could."""
        cfgs = self.configs(d)
        floor = cell[1] - ACCURACY_TOL - 1e-9

        def order(i: int) -> tuple[float, int, int]:
            b = self.bound(cfgs[i])
            return (0.0 if b is None else b, 0 if _aims_at(cfgs[i], cell) else 1, i)

        for i in sorted(range(len(cfgs)), key=order):
            b = self.bound(cfgs[i])
            if b is not None and b < floor:
                continue
            o = self.outcome(d, cfgs[i])
            if o is not None and o.meets(*cell):
                return True
        return False


def _easier(a: Cell, b: Cell) -> bool:
    """``a`` is met wherever ``b`` is (a looser or equal latency SLO and a lower or equal accuracy target)."""
    return a[0] >= b[0] and a[1] <= b[1]


def search_cells(
    cells: Sequence[Cell], meets: Callable[[int, Cell], bool], max_devices: int
) -> dict[Cell, int | None]:
    """The fewest devices in ``1..max_devices`` that meet each cell (``None``: none does), for ``meets`` monotone
    in the device count and consistent across cells (module docstring)."""
    lo = dict.fromkeys(cells, 0)  # the largest count known to fail (0 meets nothing)
    hi: dict[Cell, int | None] = dict.fromkeys(cells)  # the smallest count known to meet

    def ask(d: int, cell: Cell) -> bool:
        ok = meets(d, cell)
        for other in cells:
            if ok and _easier(other, cell):
                h = hi[other]
                hi[other] = d if h is None else min(h, d)
            elif not ok and _easier(cell, other):
                lo[other] = max(lo[other], d)
        return ok

    for cell in sorted(cells, key=lambda c: (-c[0], c[1])):  # easiest first
        step = 1
        while hi[cell] is None and lo[cell] < max_devices:
            d = min(lo[cell] + step, max_devices)
            if not ask(d, cell):
                step *= 2
        top = hi[cell]
        while top is not None and top - lo[cell] > 1:
            ask((lo[cell] + top) // 2, cell)
            top = hi[cell]
    return dict(hi)
