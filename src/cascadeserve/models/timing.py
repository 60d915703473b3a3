"""Statistics of timed runs, shared by the profilers: a robust mean, how well it is known, when to stop repeating,
and a batch's fixed and per-token cost.

:func:`repeat_until_stable` times a batch size until its :func:`timed_mean` is known to within a target: the
relative half-width of its 95 % confidence interval (Student's t on the kept runs) at most ``target``, after at least
``least`` runs and at most ``most``, or once ``budget_s`` of work went by (after three runs). What it found is a
:class:`~cascadeserve.profile.noise.PointNoise`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import numpy as np

from cascadeserve.profile.noise import PointNoise

__all__ = ["fit_fixed_and_slope", "point_noise", "relative_ci", "repeat_until_stable", "timed_mean"]

# Student's t, two-sided 95 %, by degrees of freedom 1..30 (past 30: 1.96 + 2.4 / df, within 0.2 % of the table)
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
    2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def _kept(samples: Sequence[float]) -> list[float]:
    xs = sorted(samples)
    return xs[:-1] if len(xs) >= 5 else xs


def timed_mean(samples: Sequence[float]) -> float:
    """The mean of timed runs, the slowest left out from five runs on (one stall of the OS is not the model)."""
    return float(np.mean(_kept(samples)))


def relative_ci(samples: Sequence[float]) -> float | None:
    """The relative half-width of the 95 % confidence interval of :func:`timed_mean` (None under two runs)."""
    xs = _kept(samples)
    if len(xs) < 2:
        return None
    mean = float(np.mean(xs))
    df = len(xs) - 1
    t = _T975[df - 1] if df <= len(_T975) else 1.96 + 2.4 / df
    sd = float(np.std(xs, ddof=1))
    return t * sd / math.sqrt(len(xs)) / mean if mean > 0 else math.inf


def point_noise(samples: Sequence[float], target: float) -> PointNoise:
    """What the runs of one batch size say about its runtime: the interval, the spread, stable or not."""
    ci = relative_ci(samples)
    mean = float(np.mean(samples)) if samples else 0.0
    cv = float(np.std(samples, ddof=1)) / mean if len(samples) >= 2 and mean > 0 else 0.0
    ci = None if ci is None else min(ci, 1e6)
    return PointNoise(len(samples), ci, cv, ci is not None and ci <= target)


def repeat_until_stable(
    run: Callable[[], float], *, least: int, most: int, target: float, budget_s: float, pause_s: float = 0.0
) -> list[float]:
    """Call ``run`` (one timed run, its milliseconds) until the mean is stable (module docstring); the runs' times.
    ``pause_s``: the idle time ``run`` spends before each timed run, which the budget does not count."""
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < max(least, most):
        samples.append(run())
        if len(samples) >= least:
            ci = relative_ci(samples)
            if ci is not None and ci <= target:
                break
        if len(samples) >= 3 and time.perf_counter() - start > budget_s + len(samples) * pause_s:
            break
    return samples


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
