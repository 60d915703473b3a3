"""How a model's runtime curve was measured: per batch size the timed runs, the interval and the spread, and the host's
load while measuring, as ``profile.yaml`` records them in a model's ``timing`` entry. :mod:`cascadeserve.profile.noise`
reads these records into notes and warnings; a profile carries them (:class:`~cascadeserve.profile.ModelProfile`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

__all__ = ["CI_TARGET", "ModelTiming", "PointNoise"]

CI_TARGET = 0.05  # a runtime is stable when its 95 % interval is within ±5 % of it


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
