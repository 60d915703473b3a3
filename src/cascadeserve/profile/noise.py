"""How far a profile's runtimes can be trusted: each curve point's noise, the host's load, and the notes they raise.

``profile measure`` repeats each batch size's timed runs until the runtime is known to within ``ci_target`` (the
relative half-width of the 95 % confidence interval of the kept mean, 5 % by default) or its repeat budget is spent,
and records per model (:class:`ModelTiming`, the ``timing`` entry of a model in ``profile.yaml``):

* per batch size (:class:`PointNoise`): how many runs were timed, the interval's relative half-width, the runs'
  coefficient of variation (their spread), and whether the target was met;
* the host's 1-minute load average before measuring and right after the model was timed, and its CPU count.

:func:`measurement_notes` turns those facts and the curves into one-line notes, stored in ``profile.yaml``
(``notes``) and printed as warnings by ``profile measure`` and ``up``:

* points whose runtime did not settle within the repeat budget;
* a curve that falls: a larger batch measured cheaper than a smaller one by more than both points' intervals
  (without intervals, by more than 10 %);
* a runtime of (nearly) zero: under :data:`NEAR_ZERO_MS` per batch, which no real model runs in (a timer's
  resolution, a lazy framework that did no work);
* a host that was busy: load per core above :data:`BUSY_LOAD_PER_CORE` before measuring, or after it beyond the
  measuring process's own threads.

:func:`plan_warnings` is what ``plan`` says about a profile before planning from it: one line when it was never
calibrated to a serving host, one when it carries notes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from cascadeserve.profile.profile import ModelProfile, Profile

__all__ = [
    "BUSY_LOAD_PER_CORE",
    "CI_TARGET",
    "NEAR_ZERO_MS",
    "ModelTiming",
    "PointNoise",
    "host_load",
    "measurement_notes",
    "plan_warnings",
]

CI_TARGET = 0.05  # a runtime is stable when its 95 % interval is within ±5 % of it
BUSY_LOAD_PER_CORE = 0.7  # a host busier than this (1-minute load per core) times other work too
NEAR_ZERO_MS = 0.001  # one microsecond per batch: no model's predict call returns faster
_FALL_TOLERANCE = 0.10  # without measured intervals, a fall of more than this share is not noise


@dataclass(frozen=True)
class PointNoise:
    """How one batch size's runtime was measured."""

    runs: int
    ci: float | None  # relative half-width of the runtime's 95 % interval (None: too few runs for one)
    cv: float  # the runs' coefficient of variation: their spread, whatever the number of runs
    stable: bool  # ci within the target

    def to_doc(self) -> dict[str, Any]:
        ci = None if self.ci is None else round(self.ci, 4)
        return {"runs": self.runs, "ci": ci, "cv": round(self.cv, 4), "stable": self.stable}

    @classmethod
    def from_doc(cls, doc: Any) -> PointNoise:
        if not isinstance(doc, Mapping):
            raise ValueError("a point must be a mapping of runs, ci, cv, stable")
        runs, ci, cv, stable = doc.get("runs"), doc.get("ci"), doc.get("cv"), doc.get("stable")
        if not isinstance(runs, int) or isinstance(runs, bool) or runs < 0:
            raise ValueError(f"runs must be a non-negative integer, got {runs!r}")
        if ci is not None and not _nonneg(ci):
            raise ValueError(f"ci must be a non-negative number or null, got {ci!r}")
        if not _nonneg(cv):
            raise ValueError(f"cv must be a non-negative number, got {cv!r}")
        if not isinstance(stable, bool):
            raise ValueError(f"stable must be true or false, got {stable!r}")
        return cls(runs, None if ci is None else float(ci), float(cast(float, cv)), stable)


@dataclass(frozen=True)
class ModelTiming:
    """How a model's runtime curve was measured: each point's noise and the host's load (None: not known)."""

    points: Mapping[int, PointNoise]
    load_before: float | None = None
    load_after: float | None = None
    cpus: int = 1
    threads: int = 1  # the measuring process's own busy threads (part of the load after)
    target: float = CI_TARGET  # the interval a stable point is within

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"cpus": self.cpus, "threads": self.threads, "target": self.target}
        if self.load_before is not None and self.load_after is not None:
            doc["load"] = [round(self.load_before, 3), round(self.load_after, 3)]
        doc["points"] = {int(b): p.to_doc() for b, p in sorted(self.points.items())}
        return doc

    @classmethod
    def from_doc(cls, doc: Any) -> ModelTiming:
        """Read a ``timing`` entry (a ``ValueError`` saying what is wrong otherwise)."""
        if not isinstance(doc, Mapping):
            raise ValueError("timing must be a mapping")
        cpus, threads = doc.get("cpus", 1), doc.get("threads", 1)
        for what, v in (("cpus", cpus), ("threads", threads)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{what} must be a positive integer, got {v!r}")
        load = doc.get("load")
        before = after = None
        if load is not None:
            if not isinstance(load, list) or len(load) != 2 or not all(_nonneg(v) for v in load):
                raise ValueError(f"load must be [before, after], two numbers >= 0, got {load!r}")
            before, after = float(load[0]), float(load[1])
        target = doc.get("target", CI_TARGET)
        if not _nonneg(target) or not 0 < target <= 1:
            raise ValueError(f"target must be a number in (0, 1], got {target!r}")
        points_doc = doc.get("points", {})
        if not isinstance(points_doc, Mapping):
            raise ValueError("points must be a mapping of batch size to {runs, ci, cv, stable}")
        points: dict[int, PointNoise] = {}
        for b, p in points_doc.items():
            try:
                size = int(b)
            except (TypeError, ValueError):
                size = 0
            if size < 1:
                raise ValueError(f"points: batch size {b!r} must be a positive integer")
            try:
                points[size] = PointNoise.from_doc(p)
            except ValueError as e:
                raise ValueError(f"points[{size}]: {e}") from None
        return cls(points, before, after, int(cpus), int(threads), float(target))

    def busy_per_core(self) -> float | None:
        """The other work's load per core while measuring: the larger of the load before and the load after less
        the measuring process's own threads (None: not recorded)."""
        if self.load_before is None or self.load_after is None:
            return None
        return max(self.load_before, self.load_after - self.threads, 0.0) / self.cpus


def _nonneg(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def host_load() -> float | None:
    """The host's 1-minute load average (None where the platform has none)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None


def _points(points: Sequence[tuple[int, float | None]]) -> str:
    return ", ".join(f"b={b}" + ("" if ci is None else f" (±{ci:.0%})") for b, ci in points)


def _model_notes(m: ModelProfile) -> list[str]:
    notes: list[str] = []
    noise = {} if m.timing is None else dict(m.timing.points)
    unstable = [(b, p.ci) for b, p in sorted(noise.items()) if not p.stable]
    if unstable and m.timing is not None:
        most = max(p.runs for p in noise.values())
        within = f"±{m.timing.target:.0%}"
        notes.append(f"model {m.name!r}: runtime not stable to {within} after {most} runs at {_points(unstable)}")
    zero = [(b, ms) for b, ms in zip(m.runtime.batch_sizes, m.runtime.ms, strict=True) if ms < NEAR_ZERO_MS]
    if zero:
        at = ", ".join(f"{ms:.4f} ms @ b={b}" for b, ms in zero)
        notes.append(f"model {m.name!r}: near-zero runtime {at} (under {NEAR_ZERO_MS * 1000:g} µs: not a measurement)")
    worst: tuple[float, int, float, int, float] | None = None  # (excess, small b, its ms, large b, its ms)
    sizes, ms = m.runtime.batch_sizes, m.runtime.ms
    for j in range(1, len(sizes)):
        for i in range(j):
            tol = _half(noise.get(sizes[i]), ms[i]) + _half(noise.get(sizes[j]), ms[j])
            excess = (ms[i] - ms[j]) - tol
            if excess > 0 and (worst is None or excess > worst[0]):
                worst = (excess, sizes[i], ms[i], sizes[j], ms[j])
    if worst is not None:
        _, bi, mi, bj, mj = worst
        notes.append(
            f"model {m.name!r}: runtime falls from {mi:.3f} ms @ b={bi} to {mj:.3f} ms @ b={bj}, more than the "
            "noise (a larger batch measured cheaper)"
        )
    return notes


def _half(point: PointNoise | None, ms: float) -> float:
    """A point's absolute half-interval: measured, or the default tolerance's half where none was."""
    if point is None or point.ci is None:
        return ms * _FALL_TOLERANCE / 2
    return ms * point.ci


def measurement_notes(profile: Profile) -> tuple[str, ...]:
    """The notes a profile's curves and timing facts raise (module docstring), one line each."""
    notes: list[str] = []
    busy: list[tuple[float, int, str]] = []  # (load per core, cores, model)
    for m in profile.models:
        notes.extend(_model_notes(m))
        load = None if m.timing is None else m.timing.busy_per_core()
        if m.timing is not None and load is not None and load > BUSY_LOAD_PER_CORE:
            busy.append((load, m.timing.cpus, m.name))
    if busy:
        which = ", ".join(repr(name) for _, _, name in busy)
        most, cpus, _ = max(busy)
        notes.append(
            f"host busy while measuring {which}: load up to {most:.2f} per core on {cpus} core(s), above "
            f"{BUSY_LOAD_PER_CORE:g}; runtimes may be inflated and noisy: measure again on a quiet host"
        )
    return tuple(notes)


def plan_warnings(profile: Profile) -> list[str]:
    """What to say before planning from ``profile``: never calibrated to a serving host, and its notes (one line
    each)."""
    out: list[str] = []
    if not profile.calibration:
        out.append(
            f"profile {profile.name!r} was never calibrated to a serving host: plans promise quiet-machine runtimes "
            "(profile calibrate, or up with profile.calibrate_s > 0)"
        )
    if profile.notes:
        n = len(profile.notes)
        what = f"{n} measurement note{'s' if n > 1 else ''}"
        out.append(f"profile {profile.name!r} carries {what}: {' | '.join(profile.notes)}")
    return out
