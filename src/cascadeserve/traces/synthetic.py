"""Synthetic load patterns for tests, examples and the paper's burst experiments.

Every generator returns a :class:`~cascadeserve.traces.trace.Trace` and is deterministic given ``seed``:

* :func:`constant`: a steady rate.
* :func:`poisson`: a true Poisson process (independent exponential inter-arrival times).
* :func:`step`: one rate, then another from ``at_s`` on.
* :func:`spike`: a base rate with a sudden burst to ``peak`` for ``width_s`` seconds (the scenario of the
  CascadeServe paper's Figs. 8-9, where load jumps faster than replicas can be added).
* :func:`zipf`: each period of ``seconds_per_level`` seconds runs at a QPS level drawn from a Zipf law over
  ``levels`` equal steps in ``(0, max_qps]``, so low load is common and peaks are rare.

Except for :func:`poisson`, a generator first fixes how many requests fall in each second (and in each
piece of a second cut by a rate change): the whole part of the cumulative expected count, so that a rate of
0.5 QPS gives one request every other second and the total matches ``rate * time``. ``arrival`` then places
them inside their piece: ``"poisson"`` at sorted random positions, ``"uniform"`` evenly spaced.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from cascadeserve.errors import TraceError
from cascadeserve.traces.counts import arrivals_in_bins, check_arrival, check_positive
from cascadeserve.traces.trace import Trace

__all__ = ["constant", "piecewise", "poisson", "spike", "step", "zipf"]

# Guards floor() of a cumulative count against a value like 2.9999999999 that should be 3.
_COUNT_EPS = 1e-9


def piecewise(
    breaks: npt.ArrayLike,
    rates: npt.ArrayLike,
    duration_s: float,
    *,
    arrival: str = "poisson",
    seed: int = 0,
    source: str = "",
) -> Trace:
    """A trace whose rate is ``rates[i]`` QPS from ``breaks[i]`` until the next break (or ``duration_s``).

    ``breaks`` must start at 0 and increase strictly; rates must be finite and non-negative. Requests are
    counted per second (split at the breaks) and placed with ``arrival``, as the module docstring explains.
    """
    duration = check_positive("duration_s", duration_s)
    kind = check_arrival(arrival)
    starts = np.asarray(breaks, dtype=np.float64)
    levels = np.asarray(rates, dtype=np.float64)
    if starts.ndim != 1 or levels.shape != starts.shape or starts.size == 0:
        raise TraceError("breaks and rates must be 1-D sequences of the same, non-zero length")
    if starts[0] != 0 or (np.diff(starts) <= 0).any() or starts[-1] >= duration:
        raise TraceError("breaks must start at 0, increase strictly and stay below duration_s")
    if not np.isfinite(levels).all() or (levels < 0).any():
        raise TraceError("rates must be finite and >= 0")
    edges = np.union1d(np.arange(math.ceil(duration), dtype=np.float64), starts)
    edges = np.append(edges[edges < duration], duration)
    widths = np.diff(edges)
    rate = levels[np.searchsorted(starts, edges[:-1], side="right") - 1]
    cumulative = np.concatenate(([0.0], np.cumsum(rate * widths)))
    counts = np.diff(np.floor(cumulative + _COUNT_EPS)).astype(np.int64)
    rng = np.random.default_rng(seed)
    arrivals = arrivals_in_bins(counts, edges[:-1], widths, duration, kind, rng)
    return Trace(arrivals, duration, source or f"synthetic piecewise rate ({kind} arrivals, seed {seed})")


def constant(qps: float, duration_s: float, *, arrival: str = "poisson", seed: int = 0) -> Trace:
    """A steady ``qps`` for ``duration_s`` seconds (``qps * duration_s`` requests, rounded down)."""
    rate = check_positive("qps", qps, allow_zero=True)
    duration = check_positive("duration_s", duration_s)
    return piecewise(
        [0.0],
        [rate],
        duration,
        arrival=arrival,
        seed=seed,
        source=f"synthetic constant {rate:g} QPS for {duration:g} s ({arrival} arrivals, seed {seed})",
    )


def poisson(qps: float, duration_s: float, seed: int = 0) -> Trace:
    """A Poisson process of rate ``qps``: exponential inter-arrival times with mean ``1 / qps``."""
    rate = check_positive("qps", qps, allow_zero=True)
    duration = check_positive("duration_s", duration_s)
    source = f"synthetic Poisson process {rate:g} QPS for {duration:g} s (seed {seed})"
    if rate == 0:
        return Trace(np.zeros(0), duration, source)
    rng = np.random.default_rng(seed)
    chunks: list[npt.NDArray[np.float64]] = []
    now = 0.0
    while now < duration:
        expected = (duration - now) * rate
        size = int(expected + 6 * math.sqrt(expected) + 16)
        times = now + np.cumsum(rng.exponential(1.0 / rate, size))
        chunks.append(times)
        now = float(times[-1])
    arrivals = np.concatenate(chunks)
    return Trace(arrivals[arrivals < duration], duration, source)


def step(low: float, high: float, at_s: float, duration_s: float, *, arrival: str = "poisson", seed: int = 0) -> Trace:
    """``low`` QPS until ``at_s``, then ``high`` QPS until ``duration_s`` (``0 < at_s < duration_s``)."""
    a = check_positive("low", low, allow_zero=True)
    b = check_positive("high", high, allow_zero=True)
    duration = check_positive("duration_s", duration_s)
    at = check_positive("at_s", at_s)
    if at >= duration:
        raise TraceError(f"at_s must lie inside the trace (0 < at_s < duration_s = {duration:g}), got {at:g}")
    return piecewise(
        [0.0, at],
        [a, b],
        duration,
        arrival=arrival,
        seed=seed,
        source=f"synthetic step {a:g} -> {b:g} QPS at {at:g} s of {duration:g} s ({arrival} arrivals, seed {seed})",
    )


def spike(
    base: float,
    peak: float,
    at_s: float,
    width_s: float,
    duration_s: float,
    *,
    arrival: str = "poisson",
    seed: int = 0,
) -> Trace:
    """``base`` QPS with a burst to ``peak`` QPS during ``[at_s, at_s + width_s)`` (cut at ``duration_s``)."""
    a = check_positive("base", base, allow_zero=True)
    b = check_positive("peak", peak, allow_zero=True)
    duration = check_positive("duration_s", duration_s)
    at = check_positive("at_s", at_s, allow_zero=True)
    width = check_positive("width_s", width_s)
    if at >= duration:
        raise TraceError(f"at_s must lie inside the trace (0 <= at_s < duration_s = {duration:g}), got {at:g}")
    breaks, rates = ([at], [b]) if at == 0 else ([0.0, at], [a, b])
    if at + width < duration:
        breaks.append(at + width)
        rates.append(a)
    return piecewise(
        breaks,
        rates,
        duration,
        arrival=arrival,
        seed=seed,
        source=(
            f"synthetic spike {a:g} -> {b:g} QPS at {at:g} s for {width:g} s of {duration:g} s "
            f"({arrival} arrivals, seed {seed})"
        ),
    )


def zipf(
    max_qps: float,
    duration_s: float,
    *,
    exponent: float = 1.1,
    levels: int = 10,
    seconds_per_level: float = 1.0,
    arrival: str = "poisson",
    seed: int = 0,
) -> Trace:
    """Bursty load: every ``seconds_per_level`` s a QPS level drawn from a Zipf law over ``levels`` steps.

    The levels are ``max_qps * k / levels`` for ``k = 1..levels``, drawn with probability proportional to
    ``k ** -exponent``: the lowest level is the most frequent and ``max_qps`` the rarest. The level draws and
    the arrival placement both derive from ``np.random.default_rng(seed)``.
    """
    top = check_positive("max_qps", max_qps)
    duration = check_positive("duration_s", duration_s)
    power = check_positive("exponent", exponent, allow_zero=True)
    hold = check_positive("seconds_per_level", seconds_per_level)
    if isinstance(levels, bool) or not isinstance(levels, int | np.integer) or levels < 1:
        raise TraceError(f"levels must be a whole number >= 1, got {levels!r}")
    n_levels = int(levels)
    kind = check_arrival(arrival)
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, n_levels + 1, dtype=np.float64)
    weights = ranks**-power
    periods = math.ceil(duration / hold - _COUNT_EPS)
    drawn = rng.choice(n_levels, size=periods, p=weights / weights.sum()) + 1
    rates = top * drawn / n_levels
    breaks = np.arange(periods, dtype=np.float64) * hold
    # One generator for everything: derive the placement seed from it so the result depends on seed alone.
    placement_seed = int(rng.integers(2**63))
    trace = piecewise(breaks, rates, duration, arrival=kind, seed=placement_seed)
    source = (
        f"synthetic Zipf load up to {top:g} QPS for {duration:g} s (exponent {power:g}, {n_levels} levels, "
        f"{hold:g} s per level, {kind} arrivals, seed {seed})"
    )
    return Trace(trace.arrivals, trace.duration_s, source)
