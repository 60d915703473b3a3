"""Runtime curves: how long one batch of a model takes, as a function of batch size.

A profile measures a handful of batch sizes (1, 2, 4, ...). Between them we interpolate linearly; past the largest
measured size we extrapolate along the last segment, because batch runtime on saturated hardware grows roughly
linearly with the batch. Below the smallest measured size we extrapolate along the first segment, floored at a
small positive time so that no batch is free.

The simulator asks for runtimes in its inner loop, so :meth:`RuntimeCurve.table` precomputes a plain list indexed
by batch size; a list index is several times cheaper than ``np.interp`` on a scalar.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

__all__ = ["RuntimeCurve"]

_MIN_MS = 1e-6


@dataclass(frozen=True)
class RuntimeCurve:
    """Median milliseconds per batch at measured batch sizes, with linear inter- and extrapolation."""

    batch_sizes: tuple[int, ...]
    ms: tuple[float, ...]
    _cache: dict[int, list[float]] = field(default_factory=dict, compare=False, repr=False)
    _ms_of: dict[int, float] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.batch_sizes:
            raise ValueError("a runtime curve needs at least one measured batch size")
        if len(self.batch_sizes) != len(self.ms):
            raise ValueError("batch_sizes and ms differ in length")
        if list(self.batch_sizes) != sorted(set(self.batch_sizes)):
            raise ValueError("batch sizes must be strictly increasing")
        if self.batch_sizes[0] < 1:
            raise ValueError("batch sizes start at 1")
        if any(not np.isfinite(v) or v <= 0 for v in self.ms):
            raise ValueError("runtimes must be positive and finite")

    @classmethod
    def from_mapping(cls, runtime_ms: Mapping[int, float]) -> RuntimeCurve:
        items = sorted((int(b), float(v)) for b, v in runtime_ms.items())
        return cls(tuple(b for b, _ in items), tuple(v for _, v in items))

    def as_mapping(self) -> dict[int, float]:
        return dict(zip(self.batch_sizes, self.ms, strict=True))

    def ms_at(self, batch_size: float | np.ndarray) -> np.ndarray:
        """Milliseconds for one batch of each given size (vectorised)."""
        b = np.asarray(batch_size, dtype=np.float64)
        xs = np.asarray(self.batch_sizes, dtype=np.float64)
        ys = np.asarray(self.ms, dtype=np.float64)
        if len(xs) == 1:
            # One measurement: assume the batch costs the same per sample as measured.
            out = ys[0] * b / xs[0]
        else:
            out = np.interp(b, xs, ys)
            hi = b > xs[-1]
            lo = b < xs[0]
            slope_hi = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
            slope_lo = (ys[1] - ys[0]) / (xs[1] - xs[0])
            out = np.where(hi, ys[-1] + slope_hi * (b - xs[-1]), out)
            out = np.where(lo, ys[0] + slope_lo * (b - xs[0]), out)
        return np.asarray(np.maximum(out, _MIN_MS))

    def ms_of(self, batch_size: int) -> float:
        """``float(ms_at(batch_size))`` for one integer size, memoised: the serving observers ask it for every batch,
        and ``ms_at`` on a scalar costs ~30 µs of numpy set-up on a 2-core host, against ~0.1 µs for a dict hit."""
        ms = self._ms_of.get(batch_size)
        if ms is None:
            ms = self._ms_of[batch_size] = float(self.ms_at(batch_size))
        return ms

    def seconds(self, batch_size: int) -> float:
        """Seconds for one batch (scalar convenience)."""
        return float(self.ms_at(batch_size)) / 1000.0

    def per_sample_ms(self, batch_size: float) -> float:
        """Amortised milliseconds per sample when batches have this size."""
        return float(self.ms_at(batch_size)) / max(float(batch_size), 1.0)

    def table(self, max_batch: int) -> list[float]:
        """Seconds per batch for sizes 0..max_batch as a list (index = batch size; entry 0 is 0)."""
        cached = self._cache.get(max_batch)
        if cached is None:
            secs = self.ms_at(np.arange(max_batch + 1)) / 1000.0
            secs[0] = 0.0
            cached = secs.tolist()
            self._cache[max_batch] = cached
        return cached
