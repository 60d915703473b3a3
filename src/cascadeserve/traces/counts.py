"""Binned request counts: checking, dropping empty bins, scaling, and turning counts into arrival times.

A binned trace is a 1-D array of non-negative ``int64`` counts, one per bin of ``bin_s`` seconds (1 s for the
Twitter trace, 60 s for the Azure Functions trace). Serving papers scale such a trace linearly so that its
busiest bin reaches a chosen maximum QPS and drop the empty bins first (:func:`scale_counts`,
:func:`drop_zero_bins`). :func:`arrivals_from_counts` then places the requests of each bin in time:

* ``"poisson"``: sorted uniform random positions inside the bin. Given its count, this is exactly how a
  Poisson process places its arrivals in an interval, so a count series becomes a piecewise Poisson process.
* ``"uniform"``: evenly spaced, the ``i``-th of ``c`` requests at ``(i + 0.5) / c`` of the bin.

Everything here is vectorised numpy; millions of arrivals take a fraction of a second.
"""

from __future__ import annotations

import math
from typing import Final, Literal, cast

import numpy as np
import numpy.typing as npt

from cascadeserve.errors import TraceError

__all__ = [
    "ARRIVAL_KINDS",
    "ArrivalKind",
    "arrivals_from_counts",
    "as_counts",
    "check_arrival",
    "drop_zero_bins",
    "scale_counts",
]

ArrivalKind = Literal["poisson", "uniform"]
"""How requests are placed inside a bin: random (Poisson) or evenly spaced."""

ARRIVAL_KINDS: Final[tuple[str, ...]] = ("poisson", "uniform")


def check_arrival(arrival: str) -> ArrivalKind:
    """Return ``arrival`` as an :data:`ArrivalKind`, or raise :class:`TraceError` listing the valid kinds."""
    if arrival not in ARRIVAL_KINDS:
        raise TraceError(f"unknown arrival process {arrival!r}; valid: {', '.join(ARRIVAL_KINDS)}")
    return cast(ArrivalKind, arrival)


def check_positive(name: str, value: float, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a float if it is finite and positive (or zero), else raise :class:`TraceError`."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TraceError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise TraceError(f"{name} must be a finite number {bound}, got {value!r}")
    return number


def as_counts(counts: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Return ``counts`` as a 1-D ``int64`` array, checking that every count is a non-negative integer.

    Float input is accepted when every value is integral (``[2.0, 0.0]``). A negative or fractional count
    raises :class:`TraceError` naming the bin.
    """
    arr = np.asarray(counts)
    if arr.ndim != 1:
        raise TraceError(f"counts must be a 1-D sequence, got an array of shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.number):
        raise TraceError(f"counts must be integers, got an array of {arr.dtype}")
    if not np.issubdtype(arr.dtype, np.integer):
        bad = ~np.isfinite(arr) | (arr != np.round(arr)) if np.isrealobj(arr) else np.ones(arr.shape, bool)
        if bad.any():
            i = int(np.argmax(bad))
            raise TraceError(f"count in bin {i} is not a whole number: {arr[i].item()!r}")
    negative = arr < 0
    if negative.any():
        i = int(np.argmax(negative))
        raise TraceError(f"count in bin {i} is negative: {arr[i].item()!r}")
    return arr.astype(np.int64, copy=False)


def drop_zero_bins(counts: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Return ``counts`` without its zero bins (the CascadeServe paper drops empty seconds before scaling)."""
    arr = as_counts(counts)
    return arr[arr > 0]


def scale_counts(
    counts: npt.ArrayLike, max_qps: float, *, bin_s: float = 1.0, drop_zero: bool = False
) -> npt.NDArray[np.int64]:
    """Scale ``counts`` linearly so that the busiest bin reaches ``max_qps`` requests per second.

    A bin of ``bin_s`` seconds at the peak gets ``max_qps * bin_s`` requests; every bin is multiplied by the
    same factor and rounded to the nearest integer (``np.rint``, no randomness). With ``drop_zero`` the zero
    bins are removed first, so the result may be shorter than ``counts``. Raises :class:`TraceError` when
    there is no request to scale.
    """
    target = check_positive("max_qps", max_qps)
    width = check_positive("bin_s", bin_s)
    arr = drop_zero_bins(counts) if drop_zero else as_counts(counts)
    peak = int(arr.max()) if arr.size else 0
    if peak == 0:
        raise TraceError("cannot scale a trace with no requests to a maximum QPS")
    scaled: npt.NDArray[np.int64] = np.rint(arr * (target * width / peak)).astype(np.int64)
    return scaled


def arrivals_from_counts(
    counts: npt.ArrayLike, bin_s: float = 1.0, *, arrival: str = "poisson", seed: int = 0
) -> npt.NDArray[np.float64]:
    """Place ``counts[i]`` arrivals in bin ``i``, ``[i * bin_s, (i + 1) * bin_s)``; return sorted seconds.

    ``arrival="poisson"`` draws sorted uniform positions with ``np.random.default_rng(seed)``;
    ``arrival="uniform"`` puts the ``j``-th of ``c`` arrivals at ``(i + (j + 0.5) / c) * bin_s``, so counts
    ``[2, 0, 1]`` give ``[0.25, 0.75, 2.5]``. Every arrival lies in ``[0, len(counts) * bin_s)``.
    """
    arr = as_counts(counts)
    width = check_positive("bin_s", bin_s)
    kind = check_arrival(arrival)
    starts = np.arange(arr.size, dtype=np.float64) * width
    widths = np.full(arr.size, width, dtype=np.float64)
    return arrivals_in_bins(arr, starts, widths, arr.size * width, kind, np.random.default_rng(seed))


def arrivals_in_bins(
    counts: npt.NDArray[np.int64],
    starts: npt.NDArray[np.float64],
    widths: npt.NDArray[np.float64],
    duration_s: float,
    arrival: ArrivalKind,
    rng: np.random.Generator,
) -> npt.NDArray[np.float64]:
    """Place ``counts[i]`` arrivals in ``[starts[i], starts[i] + widths[i])`` for bins of any width.

    ``starts`` must be non-decreasing with ``starts[i] + widths[i] <= starts[i + 1]``; the result is sorted
    and clamped below ``duration_s`` (so rounding never puts an arrival at the very end). Internal helper of
    :func:`arrivals_from_counts` and of the trace builders, which also need partial bins.
    """
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.float64)
    bins = np.repeat(np.arange(counts.size), counts)
    if arrival == "uniform":
        first = np.cumsum(counts) - counts
        rank = np.arange(total) - np.repeat(first, counts)
        frac = (rank + 0.5) / counts[bins]
    else:
        # Sort bin index + uniform offset: this sorts the offsets inside each bin in one vectorised pass.
        keys = bins + rng.random(total)
        keys.sort()
        frac = np.minimum(keys - bins, np.nextafter(1.0, 0.0))
    positions = starts[bins] + frac * widths[bins]
    return np.minimum(positions, np.nextafter(duration_s, 0.0))
