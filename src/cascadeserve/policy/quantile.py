"""Clipper's alternative adaptive batching: fit the p99 of batch latency against batch size, take what fits.

Clipper (Crankshaw et al., NSDI 2017, §4.3) also sized batches by quantile regression: model the 99th percentile
of a container's batch latency as a function of the batch size, and cap batches at the largest size whose
predicted p99 stays within the latency objective. :class:`QuantileBatchLimit` does that online, per replica:

* it keeps the last ``window`` observations ``(size, seconds)`` of each replica;
* the fit is a line ``p99(b) = a + c·b``: ordinary least squares for the slope, then the intercept raised so that
  99 % of the window's residuals lie under the line (the empirical quantile of the residuals). Batch runtimes are
  close to linear in the batch size (the profile's own model), so this is the quantile-regression line whenever
  the spread of runtimes does not depend on the size, and it costs O(window) per batch rather than an LP;
* the cap is the largest ``b`` with ``a + c·b ≤ target_s``, between 1 and ``ceiling``, and never more than
  ``grow`` times the largest size seen so far: a fit is trusted only near the data it came from.

While a replica has fewer than ``min_points`` observations, or all of them at one size (no slope can be fitted),
the cap grows additively (``+step``) after a batch within the objective and halves after one over it, as AIMD
does. Like :class:`~cascadeserve.policy.AimdBatchLimit` it is a pure decision: ``limit(r)`` when a batch is
taken, ``observe(r, seconds, size)`` when it ends; no clock is read.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

__all__ = ["QuantileBatchLimit", "QuantileDecision", "QuantileFit", "fit_p99"]


@dataclass(frozen=True, slots=True)
class QuantileFit:
    """The fitted p99 line ``seconds = intercept + slope·size``."""

    intercept: float
    slope: float

    def largest_within(self, target_s: float) -> int:
        """The largest batch size whose predicted p99 is within ``target_s`` (0 when even one sample is not)."""
        if self.slope <= 0:
            return 0 if self.intercept + self.slope > target_s else 1 << 30
        return max(0, math.floor((target_s - self.intercept) / self.slope + 1e-9))


@dataclass(frozen=True, slots=True)
class QuantileDecision:
    """One update of a replica's cap (loggable, replayable)."""

    replica: int
    size: int
    runtime_s: float
    limit: int
    fit: QuantileFit | None  # None while the replica is still exploring


def fit_p99(sizes: np.ndarray, seconds: np.ndarray, q: float = 0.99) -> QuantileFit | None:
    """The p99 line through the points, or ``None`` when they hold fewer than two distinct sizes."""
    if len(sizes) < 2 or float(np.ptp(sizes)) == 0.0:
        return None
    x = sizes.astype(np.float64)
    xm = float(x.mean())
    ym = float(seconds.mean())
    slope = float(np.dot(x - xm, seconds - ym) / np.dot(x - xm, x - xm))
    slope = max(slope, 0.0)  # a batch never gets cheaper by growing; noise must not say otherwise
    resid = seconds - slope * x
    return QuantileFit(float(np.quantile(resid, q)), slope)


class QuantileBatchLimit:
    """Per-replica batch caps from an online p99 fit of batch latency against batch size."""

    __slots__ = ("_caps", "_obs", "ceiling", "grow", "min_points", "quantile", "start", "step", "target_s", "window")

    def __init__(
        self,
        target_s: float,
        *,
        window: int = 256,
        quantile: float = 0.99,
        min_points: int = 8,
        step: int = 2,
        grow: float = 2.0,
        start: int = 1,
        ceiling: int = 4096,
    ) -> None:
        if not target_s > 0:
            raise ValueError("target_s must be positive")
        if window < 2 or min_points < 2 or step < 1 or start < 1 or ceiling < start or grow < 1:
            raise ValueError("need window, min_points >= 2, step >= 1, 1 <= start <= ceiling, grow >= 1")
        if not 0 < quantile < 1:
            raise ValueError("quantile must lie in (0, 1)")
        self.target_s = target_s
        self.window = window
        self.quantile = quantile
        self.min_points = min_points
        self.step = step
        self.grow = grow
        self.start = start
        self.ceiling = ceiling
        self._caps: dict[int, int] = {}
        self._obs: dict[int, deque[tuple[int, float]]] = {}

    def limit(self, replica: int) -> int:
        """The largest batch ``replica`` may take now."""
        return self._caps.get(replica, self.start)

    def observe(self, replica: int, runtime_s: float, size: int | None = None) -> QuantileDecision:
        """Record a batch of ``size`` samples that ran ``runtime_s`` seconds and refit the replica's cap."""
        cap = self._caps.get(replica, self.start)
        n = cap if size is None else size
        obs = self._obs.get(replica)
        if obs is None:
            obs = self._obs[replica] = deque(maxlen=self.window)
        obs.append((n, runtime_s))
        fit = None
        if len(obs) >= self.min_points:
            arr = np.asarray(obs, dtype=np.float64)
            fit = fit_p99(arr[:, 0], arr[:, 1], self.quantile)
        if fit is None:  # explore as AIMD does until a slope can be fitted
            new = min(self.ceiling, cap + self.step) if runtime_s <= self.target_s else max(1, cap // 2)
        else:
            seen = max(s for s, _ in obs)
            new = min(fit.largest_within(self.target_s), math.floor(seen * self.grow), self.ceiling)
            new = max(1, new)
        self._caps[replica] = new
        return QuantileDecision(replica, n, runtime_s, new, fit)
