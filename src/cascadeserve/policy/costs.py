"""Cost drift: do batches run at the costs the plan was made with? The decision behind calibration and re-planning.

A plan is only as good as its profile. The profile times each model alone on an idle machine; served, a batch
shares the host with the HTTP front end, the other devices' threads and the client, and runs 1.25-2x slower on a
2-core box. Or a GPU throttles, a neighbour arrives, a driver changes. Either way the plan's predicted p95 no
longer holds, and only the batches themselves can tell.

:class:`CostWatch` is fed every finished batch (model, batch size, measured seconds, the profile's runtime at
that size) and keeps, per model, the batches of the last ``window_s`` seconds. :meth:`CostWatch.factors` is the
measured **cost factor** of each model: the median over the window of measured / profiled time (a median, so one
stalled batch does not move it). :meth:`CostWatch.check` is the decision the runtime applies every tick:

* a model whose factor is outside ``[1 / (1 + tolerance), 1 + tolerance]`` with at least ``min_batches`` batches
  in the window, and whose median batch is also at least ``min_excess_ms`` off in absolute terms, is *departed*
  (the floor is for sub-millisecond models: the hop to the device thread alone is a tenth of a millisecond, a
  large ratio that moves no p95); it must stay departed for ``sustain_s`` (a burst of slow batches is not drift);
* then :class:`CostDrift` names every departed model and its factor, and the watch stays quiet for
  ``cooldown_s`` (a re-plan takes a while, and its plan is judged by the next window, not the old one).

What is done with a :class:`CostDrift` is the re-plan mode's business (``serve --replan``): ``notify`` logs it and
exposes it as a metric, ``auto`` re-plans with the measured costs (the departed models recalibrated from the
window's batches, :meth:`cascadeserve.runtime.costs.CostMonitor.calibrated`) and swaps the plan in, as for load
drift. ``profile calibrate`` writes the same factors into a new profile from a live server, so a plan can start
from the host's costs instead of discovering them while serving.

Nothing here reads a clock: callers pass ``now``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from cascadeserve.profile.host import trimmed_mean

__all__ = ["CostDrift", "CostSettings", "CostWatch", "ModelCost", "mean_and_p95", "trimmed_mean"]


@dataclass(frozen=True, slots=True)
class CostSettings:
    """How batch costs are watched (``serve --replan-cost-*``)."""

    tolerance: float = 0.25  # departed beyond x1.25 (or under x0.8); inf: never
    window_s: float = 10.0  # batches older than this leave the window
    sustain_s: float = 5.0  # departed for this long before a decision
    min_batches: int = 20  # fewer batches in the window say nothing
    cooldown_s: float = 30.0  # after a decision, the next one waits this long
    min_excess_ms: float = 1.0  # a departure smaller than this per batch (absolute) is not one

    def __post_init__(self) -> None:
        if not self.tolerance > 0:  # inf: watch and record, never decide (a calibration run)
            raise ValueError(f"cost tolerance must be a positive number, got {self.tolerance!r}")
        for name in ("window_s", "sustain_s", "cooldown_s", "min_excess_ms"):
            v = getattr(self, name)
            if not (v >= 0 and math.isfinite(v)):
                raise ValueError(f"cost {name} must be a finite number ≥ 0, got {v!r}")
        if self.window_s <= 0:
            raise ValueError(f"cost window_s must be positive, got {self.window_s!r}")
        if self.min_batches < 1:
            raise ValueError(f"cost min_batches must be at least 1, got {self.min_batches!r}")


@dataclass(frozen=True, slots=True)
class ModelCost:
    """One model's measured cost factor over the window (measured / profiled batch time, median: what the drift
    decision reads) and the median absolute difference per batch in ms (positive: slower than profiled). A re-plan
    calibrates from the window's batches themselves (:meth:`cascadeserve.runtime.costs.CostMonitor.calibrated`)."""

    model: str
    factor: float
    batches: int
    excess_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class CostDrift:
    """The decision: these models' batches have run ``factor`` times their profiled time for ``sustain_s``."""

    time: float
    departed: tuple[ModelCost, ...]

    def describe(self) -> str:
        parts = [f"{c.model} x{c.factor:.2f} ({c.batches} batches)" for c in self.departed]
        return "batches run off the plan's costs: " + ", ".join(parts)


def mean_and_p95(values: Iterable[float], cut: float = 0.01) -> tuple[float, float]:
    """The mean and 95th percentile with the top ``cut`` share left out (as :func:`trimmed_mean`); (0, 0) for no
    values. Both, not a median, for a delay that adds to a request's latency and to nothing else (a process hop): what
    a p95 sees of an independent heavy-tailed delay is more than its median, and the simulator draws it from a
    distribution of this mean and p95 (:mod:`cascadeserve.simulate.hops`)."""
    a = np.sort(np.fromiter(values, dtype=np.float64))
    if not len(a):
        return 0.0, 0.0
    kept = a[: max(1, len(a) - math.ceil(len(a) * cut))]
    return float(kept.mean()), float(np.percentile(kept, 95))


class CostWatch:
    """Per-model windows of batch cost ratios, and the drift decision over them (module docstring)."""

    __slots__ = ("_ends", "_excess", "_ratios", "_since", "models", "next_allowed", "settings")

    def __init__(self, models: tuple[str, ...] | list[str], settings: CostSettings | None = None) -> None:
        self.settings = settings or CostSettings()
        self.models = tuple(models)
        # per model, each batch's end, ratio and excess ms: three deques of floats, not one of tuples, because every
        # tick reads the whole window into arrays, and an array from a deque of floats costs a fraction of one from
        # tuples (a window holds every batch of window_s: thousands on a busy server)
        self._ends: list[deque[float]] = [deque() for _ in self.models]
        self._ratios: list[deque[float]] = [deque() for _ in self.models]
        self._excess: list[deque[float]] = [deque() for _ in self.models]
        self._since: dict[int, float] = {}  # model row -> when it was first seen departed (this episode)
        self.next_allowed = -math.inf  # the cooldown's end

    def observe(self, row: int, end: float, seconds: float, profiled_s: float) -> None:
        """A batch of model ``row`` finished at ``end`` after ``seconds``; the profile said ``profiled_s``."""
        if not (profiled_s > 0 and math.isfinite(seconds) and seconds >= 0):
            return  # a failed batch or a zero-cost profile entry says nothing about cost
        self._ends[row].append(end)
        self._ratios[row].append(seconds / profiled_s)
        self._excess[row].append((seconds - profiled_s) * 1000.0)

    def _trim(self, now: float) -> None:
        old = now - self.settings.window_s
        for ends, ratios, excess in zip(self._ends, self._ratios, self._excess, strict=True):
            while ends and ends[0] < old:
                ends.popleft()
                ratios.popleft()
                excess.popleft()

    def factors(self, now: float) -> tuple[ModelCost, ...]:
        """Each model with at least one batch in the window: its median measured / profiled time."""
        self._trim(now)
        out = []
        for row, w in enumerate(self._ratios):
            if w:
                n = len(w)
                ratios = np.fromiter(w, dtype=np.float64, count=n)
                excess = np.fromiter(self._excess[row], dtype=np.float64, count=n)
                out.append(
                    ModelCost(
                        self.models[row],
                        float(np.median(ratios)),
                        n,
                        float(np.median(excess)),
                    )
                )
        return tuple(out)

    def reset(self, now: float) -> None:
        """A new plan (or new costs) is in force: forget the old batches and any episode in progress."""
        for d in (*self._ends, *self._ratios, *self._excess):
            d.clear()
        self._since.clear()
        self.next_allowed = now + self.settings.cooldown_s

    def check(self, now: float) -> CostDrift | None:
        """The decision at ``now``: the models departed for ``sustain_s`` (or None)."""
        s = self.settings
        hi, lo = 1.0 + s.tolerance, 1.0 / (1.0 + s.tolerance)
        sustained: list[ModelCost] = []
        for c in self.factors(now):
            row = self.models.index(c.model)
            off = not (lo <= c.factor <= hi) and abs(c.excess_ms) >= s.min_excess_ms
            if c.batches >= s.min_batches and off:
                if now - self._since.setdefault(row, now) >= s.sustain_s:
                    sustained.append(c)
            else:
                self._since.pop(row, None)
        if not sustained or now < self.next_allowed:
            return None
        self.next_allowed = now + s.cooldown_s
        self._since.clear()
        return CostDrift(now, tuple(sustained))
