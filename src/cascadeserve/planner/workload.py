"""SP2's inputs: the QPS ranges and how much time the workload spends in each (the QPS distribution).

The plan's accuracy is the time-weighted mean of its gears' accuracies, so SP2 needs a weight per range:

* **Zipf** (default, paper appendix C.2): range ``k`` (0-based, lowest QPS first) gets weight proportional to
  ``(k + 1) ** -s`` with exponent ``s =`` :data:`ZIPF_EXPONENT` ``= 1.1``, the same default exponent as the
  synthetic Zipf traces (:func:`cascadeserve.traces.zipf`): low load is common, the peak is rare. ``zipf:S``
  picks another exponent.
* **Empirical** (``trace:<spec>`` or ``trace:<spec>@START:DURATION`` for a window of trace seconds): the trace is
  built with :func:`cascadeserve.traces.build_trace` (zero seconds dropped, as the paper does), scaled so its
  busiest second runs at the plan's ``max_qps``, and measured in 100 ms windows (what the runtime's QPS meter
  sees, :meth:`~cascadeserve.traces.Trace.qps_samples`); the weight of a range is the fraction of windows whose
  QPS falls in it (windows above ``max_qps`` count for the last range). Every range keeps a tiny floor weight
  so that ranges the trace never visits still prefer accuracy.
* **Given weights** (``weights:w1,w2,...``, one per range, lowest QPS first; normalised): what a server measured
  (``serve --replan``, :mod:`cascadeserve.planner.replan`). The same floor applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from cascadeserve.errors import CascadeServeError
from cascadeserve.traces import Trace, build_trace

__all__ = ["ZIPF_EXPONENT", "QpsDistribution", "qps_ranges", "qps_scale_for"]

ZIPF_EXPONENT = 1.1
_FLOOR = 1e-6


def qps_ranges(max_qps: float, n_ranges: int) -> list[tuple[float, float]]:
    """``n_ranges`` equal ranges ``[lo, hi)`` covering ``[0, max_qps]``."""
    if n_ranges < 1:
        raise CascadeServeError("--ranges must be at least 1")
    if not max_qps > 0:
        raise CascadeServeError("--max-qps must be positive")
    edges = np.linspace(0.0, float(max_qps), n_ranges + 1)
    return [(float(edges[k]), float(edges[k + 1])) for k in range(n_ranges)]


@dataclass(frozen=True)
class QpsDistribution:
    """A QPS distribution: ``zipf`` with an exponent, or ``empirical`` from a trace spec."""

    kind: str = "zipf"
    exponent: float = ZIPF_EXPONENT
    trace: str | None = None
    window: str | None = None
    given: tuple[float, ...] = ()
    _cache: dict[tuple[float, int], np.ndarray] = field(default_factory=dict, compare=False, repr=False)
    _samples: dict[float, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, spec: str | QpsDistribution | None) -> QpsDistribution:
        """``None``/``"zipf"`` -> Zipf(1.1); ``"zipf:1.3"``; ``"trace:<trace spec>"``."""
        if spec is None:
            return cls()
        if isinstance(spec, QpsDistribution):
            return spec
        s = spec.strip()
        if s == "zipf":
            return cls()
        if s.startswith("zipf:"):
            try:
                exp = float(s[5:])
            except ValueError:
                raise CascadeServeError(f"--qps-dist {spec!r}: the Zipf exponent must be a number") from None
            if exp < 0:
                raise CascadeServeError(f"--qps-dist {spec!r}: the Zipf exponent must be non-negative")
            return cls("zipf", exp)
        if s.startswith("trace:") and len(s) > 6:
            body, window = s[6:], None
            head, sep, tail = body.rpartition("@")
            if sep and head and tail.count(":") == 1 and all(x.replace(".", "", 1).isdigit() for x in tail.split(":")):
                body, window = head, tail
            return cls("empirical", trace=body, window=window)
        if s.startswith("weights:"):
            try:
                given = tuple(float(x) for x in s[8:].split(","))
            except ValueError:
                raise CascadeServeError(f"--qps-dist {spec!r}: the weights must be numbers") from None
            if not all(w >= 0 and np.isfinite(w) for w in given) or sum(given) <= 0:
                raise CascadeServeError(f"--qps-dist {spec!r}: the weights must be non-negative, not all zero")
            return cls("weights", given=given)
        raise CascadeServeError(
            f"--qps-dist {spec!r}: use zipf, zipf:<exponent>, trace:<trace spec> or weights:<w1,w2,...>"
        )

    def describe(self) -> str:
        if self.kind == "zipf":
            return f"zipf (exponent {self.exponent:g})"
        if self.kind == "weights":
            return "given weights " + ",".join(f"{w:.4g}" for w in self.given)
        return f"empirical from {self.trace}" + (f" window {self.window} s" if self.window else "")

    def samples(self, max_qps: float) -> np.ndarray | None:
        """The measured QPS samples of an empirical distribution (scaled to ``max_qps``); ``None`` for Zipf."""
        if self.kind != "empirical" or self.trace is None:
            return None
        # cached: every accuracy-SLO plan needs them (appendix C.2's scaling), and building the trace from a long
        # per-second file takes ~0.3 s each time
        key = float(max_qps)
        hit = self._samples.get(key)
        if hit is None:
            arr = self.arrivals(max_qps)
            assert arr is not None
            hit = self._samples[key] = arr.qps_samples(0.1)
            hit.setflags(write=False)
        return hit

    def arrivals(self, max_qps: float, seed: int = 0) -> Trace | None:
        """The empirical distribution's trace (zero seconds dropped, scaled to ``max_qps``, Poisson arrivals with
        ``seed``): what the planner's trace check replays. ``None`` for Zipf."""
        if self.kind != "empirical" or self.trace is None:
            return None
        return build_trace(self.trace, max_qps=max_qps, window=self.window, drop_zero=True, seed=seed)

    def weights(self, max_qps: float, n_ranges: int) -> np.ndarray:
        """Time weight of each range, summing to one."""
        key = (float(max_qps), int(n_ranges))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if self.kind == "zipf":
            w = np.arange(1, n_ranges + 1, dtype=np.float64) ** -self.exponent
        elif self.kind == "weights":
            if len(self.given) != n_ranges:
                raise CascadeServeError(
                    f"--qps-dist weights: {len(self.given)} weights given for {n_ranges} ranges (--ranges)"
                )
            w = np.array(self.given, dtype=np.float64)
            w = w / w.sum()
        else:
            qs = self.samples(max_qps)
            assert qs is not None
            k = np.minimum((qs / max_qps * n_ranges).astype(np.int64), n_ranges - 1)
            w = np.asarray(np.bincount(k, minlength=n_ranges), dtype=np.float64)
            w = w / max(w.sum(), 1.0)
        w = np.asarray(np.maximum(w, _FLOOR), dtype=np.float64)
        w = np.asarray(w / w.sum(), dtype=np.float64)
        w.setflags(write=False)
        self._cache[key] = w
        return w


def qps_scale_for(
    gear_highs: Sequence[float], accuracies: Sequence[float], samples: np.ndarray, target: float
) -> float:
    """Appendix C.2's measured-QPS scaling for an accuracy SLO.

    The largest factor ``s`` in (0, 1] such that, with every measured QPS sample multiplied by ``s`` before the gear
    lookup, the time-weighted accuracy over ``samples`` is at least ``target``. Scaling down keeps the system in
    the more accurate low-QPS gears for longer when the real load is heavier than planned; 1.0 when the samples
    already meet the target (or nothing does).
    """
    highs = np.asarray(gear_highs, dtype=np.float64)
    acc = np.asarray(accuracies, dtype=np.float64)
    qs = np.asarray(samples, dtype=np.float64)
    if not len(qs):
        return 1.0

    def achieved(s: float) -> float:
        g = np.minimum(np.searchsorted(highs, qs * s, side="right"), len(highs) - 1)
        return float(acc[g].mean())

    if achieved(1.0) >= target - 1e-12:
        return 1.0
    lo, hi = 0.0, 1.0  # achieved(lo) is the accuracy of the lowest gear, the best the scaling can do
    if achieved(1e-12) < target - 1e-12:
        return 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if achieved(mid) >= target - 1e-12:
            lo = mid
        else:
            hi = mid
    return max(lo, 1e-6)
