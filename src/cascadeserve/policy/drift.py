"""Load drift: does the QPS the server measures still look like the distribution the plan was made for?

A gear plan weighs its QPS ranges by how much time the workload is expected to spend in each (Zipf by default,
paper appendix C.2), and an accuracy-SLO plan only meets its SLO under that distribution. The producer measures
QPS every tick anyway; this module turns those measurements into two decisions:

* **Scaling** (appendix C.2): map measured QPS onto the plan's distribution by one linear factor, so that the plan
  is used as it was meant to be used. :func:`scale_factor` is the least-squares factor between the measured and the
  planned quantiles: with quantiles ``m`` and ``p``, ``f = Σ m·p / Σ m²``.
* **Drift** (:class:`LoadDriftDetector`): over a long window of ticks, the distance between the measured
  distribution over the plan's ranges and the plan's weights is the two-sample Kolmogorov–Smirnov statistic
  (the largest gap between their CDFs at the range boundaries). Above ``threshold``, it decides to re-plan with
  the measured weights (``--replan auto``) or only to notify (``--replan notify``), then waits ``cooldown_s``.

Pure: ticks and time come in as arguments; the re-planning itself runs elsewhere, off the serving path.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = [
    "DriftDecision",
    "LoadDriftDetector",
    "ks_distance",
    "range_weights",
    "scale_factor",
]


def range_weights(qps: np.ndarray, max_qps: float, n_ranges: int) -> np.ndarray:
    """Fraction of the ``qps`` measurements in each of ``n_ranges`` equal ranges of [0, max_qps] (above: the last)."""
    if n_ranges < 1 or not max_qps > 0:
        raise ValueError("need at least one range and a positive max_qps")
    q = np.asarray(qps, dtype=np.float64)
    if q.size == 0:
        return np.full(n_ranges, 1.0 / n_ranges)
    idx = np.minimum((q / (max_qps / n_ranges)).astype(np.int64), n_ranges - 1)
    counts = np.bincount(np.maximum(idx, 0), minlength=n_ranges).astype(np.float64)
    return np.asarray(counts / counts.sum())


def ks_distance(weights_a: np.ndarray, weights_b: np.ndarray) -> float:
    """The Kolmogorov–Smirnov statistic between two distributions over the same ordered ranges."""
    a = np.asarray(weights_a, dtype=np.float64)
    b = np.asarray(weights_b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError("both distributions need the same ranges")
    return float(np.max(np.abs(np.cumsum(a / a.sum()) - np.cumsum(b / b.sum()))))


def scale_factor(measured: np.ndarray, planned: np.ndarray, quantiles: int = 99) -> float:
    """Appendix C.2's linear factor: the ``f`` that makes ``f ×`` the measured QPS quantiles closest (least squares)
    to the planned ones. ``planned`` are QPS samples of the plan's distribution. 1.0 when nothing was measured."""
    m = np.asarray(measured, dtype=np.float64)
    p = np.asarray(planned, dtype=np.float64)
    if m.size == 0 or p.size == 0:
        return 1.0
    qs = np.linspace(0.0, 1.0, quantiles + 2)[1:-1]
    qm = np.quantile(m, qs)
    qp = np.quantile(p, qs)
    denom = float(qm @ qm)
    return 1.0 if denom == 0.0 else float(qm @ qp) / denom


@dataclass(frozen=True, slots=True)
class DriftDecision:
    """The measured load left the plan's distribution: re-plan with ``measured`` weights, or tell the operator."""

    action: Literal["replan", "notify"]
    distance: float
    measured: tuple[float, ...]
    planned: tuple[float, ...]
    at: float


class LoadDriftDetector:
    """Watches per-tick QPS over a long window against the plan's range weights (module docstring)."""

    __slots__ = (
        "_last",
        "_qps",
        "_seen",
        "cooldown_s",
        "max_qps",
        "min_ticks",
        "mode",
        "planned",
        "threshold",
    )

    def __init__(
        self,
        planned: np.ndarray,
        max_qps: float,
        *,
        mode: Literal["auto", "notify", "off"] = "notify",
        window_ticks: int = 36_000,
        min_ticks: int = 3_000,
        threshold: float = 0.25,
        cooldown_s: float = 600.0,
    ) -> None:
        if mode not in ("auto", "notify", "off"):
            raise ValueError(f"replan mode {mode!r}: use auto, notify or off")
        if not 0.0 < threshold <= 1.0:
            raise ValueError("the drift threshold is a KS distance in (0, 1]")
        if min_ticks < 1 or window_ticks < 1:
            raise ValueError("need min_ticks >= 1 and window_ticks >= 1")
        self.planned = np.asarray(planned, dtype=np.float64)
        self.max_qps = max_qps
        self.mode = mode
        self.threshold = threshold
        self.min_ticks = min_ticks
        self.cooldown_s = cooldown_s
        self._qps: deque[float] = deque(maxlen=window_ticks)
        self._last = -np.inf
        self._seen = 0  # ticks observed since the start: the first decision waits min_ticks of them

    def observe(self, qps: float) -> None:
        """One tick's measured QPS."""
        self._qps.append(qps)
        self._seen += 1

    def samples(self) -> np.ndarray:
        """The per-tick QPS in the window, oldest first."""
        return np.fromiter(self._qps, float, len(self._qps))

    def measured(self) -> np.ndarray:
        return range_weights(np.fromiter(self._qps, float, len(self._qps)), self.max_qps, len(self.planned))

    def decide(self, now: float) -> DriftDecision | None:
        """Re-plan or notify now? ``None`` while off, too early, cooling down, or close enough to the plan."""
        # min_ticks counts ticks since the start, not the window's length: a window shorter than min_ticks judges
        # only the load after the start's transient (the QPS meter fills its window, clients connect)
        if self.mode == "off" or self._seen < self.min_ticks or now - self._last < self.cooldown_s:
            return None
        measured = self.measured()
        d = ks_distance(measured, self.planned)
        if d <= self.threshold:
            return None
        self._last = now
        action: Literal["replan", "notify"] = "replan" if self.mode == "auto" else "notify"
        return DriftDecision(action, d, tuple(measured.tolist()), tuple(self.planned.tolist()), now)

    def replanned(self, weights: np.ndarray) -> None:
        """A new plan made for ``weights`` is in force: measure drift against it from now on."""
        self.planned = np.asarray(weights, dtype=np.float64)
