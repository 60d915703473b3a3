"""Statistics of timed runs, shared by the profilers: a robust mean, and a batch's fixed and per-token cost."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["fit_fixed_and_slope", "timed_mean"]


def timed_mean(samples: Sequence[float]) -> float:
    """The mean of timed runs, the slowest left out from five runs on (one stall of the OS is not the model)."""
    xs = sorted(samples)
    if len(xs) >= 5:
        xs = xs[:-1]
    return float(np.mean(xs))


def fit_fixed_and_slope(tokens: np.ndarray, ms: np.ndarray, fallback_slope: float) -> tuple[float, float]:
    """``ms ≈ fixed + slope·tokens`` by least squares, both ≥ 0 (a negative part is a fit to noise: it goes to 0 and
    the other carries the mean); with no spread in ``tokens``, ``fallback_slope`` and the rest fixed."""
    mean_t, mean_ms = float(tokens.mean()), float(ms.mean())
    if np.ptp(tokens) > 0 and len(tokens) >= 3:
        slope, fixed = (float(v) for v in np.polyfit(tokens, ms, 1))
    else:
        slope, fixed = fallback_slope, mean_ms - fallback_slope * mean_t
    if slope < 0:
        return max(mean_ms, 0.0), 0.0
    if fixed < 0:
        return 0.0, max(mean_ms, 0.0) / max(mean_t, 1.0)
    return fixed, slope
