"""The :class:`Trace` type: request arrival times in a window of known length.

A trace is what the simulator replays and what the planner measures load from: a sorted ``float64`` array of
arrival times in seconds, relative to the start of the window, all inside ``[0, duration_s)``, plus a human
description of where it came from. The arrays are made read-only so a trace can be shared safely.

Load statistics come from the arrivals: :meth:`Trace.per_second_counts` (requests in each whole second),
:attr:`Trace.max_qps` (the busiest whole second) and :meth:`Trace.qps_samples` (QPS measured in consecutive
short windows, an empirical distribution of the load the runtime's QPS monitor will see).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from cascadeserve.errors import TraceError
from cascadeserve.traces.counts import arrivals_from_counts, as_counts, check_positive

__all__ = ["Trace"]

# Durations are sums of float seconds; a window end within this of a boundary counts as on it.
_EPS = 1e-9


@dataclass(frozen=True, eq=False, repr=False)
class Trace:
    """Sorted request arrival times (seconds from the window start) inside ``[0, duration_s)``.

    Construction checks the invariants (1-D, finite, sorted ascending, inside the window) and raises
    :class:`~cascadeserve.errors.TraceError` otherwise. ``arrivals`` is stored as a read-only ``float64``
    array (copied if the caller could still modify it). Traces compare by identity (``eq=False``), since
    element-wise array comparison has no single truth value.
    """

    arrivals: npt.NDArray[np.float64]
    duration_s: float
    source: str = ""
    # each request's prompt and output tokens (``[n, 2]``), where the trace file has them (the Azure LLM inference
    # trace's ContextTokens and GeneratedTokens): ``simulate --trace-tokens`` prices each request by them
    tokens: npt.NDArray[np.int64] | None = None

    def __post_init__(self) -> None:
        duration = check_positive("duration_s", self.duration_s)
        given = self.arrivals
        arr = np.asarray(given, dtype=np.float64)
        if arr is given and arr.flags.writeable:
            arr = arr.copy()
        if arr.ndim != 1:
            raise TraceError(f"arrivals must be a 1-D array, got shape {arr.shape}")
        if arr.size:
            if not np.isfinite(arr).all():
                raise TraceError("arrivals must be finite")
            if (np.diff(arr) < 0).any():
                raise TraceError("arrivals must be sorted ascending")
            if arr[0] < 0 or arr[-1] >= duration:
                raise TraceError(
                    f"arrivals must lie in [0, {duration:g}) s, got [{arr[0]:g}, {arr[-1]:g}]",
                )
        arr.flags.writeable = False
        if self.tokens is not None:
            tok = np.array(self.tokens, dtype=np.int64)
            if tok.shape != (arr.size, 2) or (tok.size and tok.min() < 0):
                raise TraceError(f"tokens must be [{arr.size}, 2] counts >= 0 (prompt, output), got {tok.shape}")
            tok.flags.writeable = False
            object.__setattr__(self, "tokens", tok)
        object.__setattr__(self, "arrivals", arr)
        object.__setattr__(self, "duration_s", duration)
        object.__setattr__(self, "source", str(self.source))

    @classmethod
    def from_counts(
        cls,
        counts: npt.ArrayLike,
        bin_s: float = 1.0,
        *,
        arrival: str = "poisson",
        seed: int = 0,
        source: str = "",
    ) -> Trace:
        """A trace of ``len(counts) * bin_s`` seconds from per-bin counts (see ``arrivals_from_counts``)."""
        arr = as_counts(counts)
        if arr.size == 0:
            raise TraceError("cannot build a trace from an empty count series")
        arrivals = arrivals_from_counts(arr, bin_s, arrival=arrival, seed=seed)
        return cls(arrivals, arr.size * float(bin_s), source)

    def __len__(self) -> int:
        """Number of requests."""
        return int(self.arrivals.size)

    def __repr__(self) -> str:
        return (
            f"Trace(requests={len(self)}, duration_s={self.duration_s:g}, "
            f"mean_qps={self.mean_qps:.3g}, max_qps={self.max_qps}, source={self.source!r})"
        )

    @property
    def mean_qps(self) -> float:
        """Requests per second averaged over the whole window."""
        return len(self) / self.duration_s

    @property
    def max_qps(self) -> int:
        """Requests in the busiest whole second (0 for an empty trace)."""
        counts = self.per_second_counts()
        return int(counts.max()) if counts.size else 0

    def per_second_counts(self) -> npt.NDArray[np.int64]:
        """Requests in each second ``[k, k + 1)``; ``ceil(duration_s)`` of them (the last may be partial)."""
        n = math.ceil(self.duration_s)
        seconds = np.floor(self.arrivals).astype(np.int64)
        return np.bincount(seconds, minlength=n)[:n].astype(np.int64)

    def qps_samples(self, window_s: float = 0.1) -> npt.NDArray[np.float64]:
        """QPS measured in consecutive windows of ``window_s`` seconds: requests in the window / ``window_s``.

        Only whole windows count (a partial window at the end is left out), so the result has
        ``floor(duration_s / window_s)`` samples; use it as an empirical QPS distribution. Raises
        :class:`TraceError` if the trace is shorter than one window.
        """
        width = check_positive("window_s", window_s)
        n = math.floor(self.duration_s / width + _EPS)
        if n < 1:
            raise TraceError(f"a {self.duration_s:g} s trace holds no whole {width:g} s window")
        index = np.floor(self.arrivals / width).astype(np.int64)
        counts = np.bincount(index[index < n], minlength=n)
        return counts.astype(np.float64) / width

    def window(self, start_s: float, duration_s: float) -> Trace:
        """The arrivals in ``[start_s, start_s + duration_s)``, shifted to start at 0.

        The window must lie inside the trace; otherwise :class:`TraceError` says how long the trace is.
        """
        start = check_positive("window start", start_s, allow_zero=True)
        length = check_positive("window duration", duration_s)
        end = start + length
        if end > self.duration_s * (1 + _EPS):
            raise TraceError(
                f"window {start:g}:{length:g} ends at {end:g} s, past the end of the trace ({self.duration_s:g} s)"
            )
        lo, hi = np.searchsorted(self.arrivals, [start, end], side="left")
        shifted = self.arrivals[lo:hi] - start
        shifted = np.clip(shifted, 0.0, np.nextafter(length, 0.0))
        described = f"window {start:g}:{length:g} s"
        tokens = None if self.tokens is None else self.tokens[lo:hi]
        return Trace(shifted, length, f"{self.source}, {described}" if self.source else described, tokens)
