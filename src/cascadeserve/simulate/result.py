"""Simulation results: per-request outcomes, per-tick time series, and the summary figures.

Per request (arrays indexed by request number): arrival and finish time, the model row that answered, the gear
it was admitted under, and whether the answer was right. Per producer tick: measured QPS, the gear in force, the
first stage's queue length (Q0), and the busy fraction of each device during the tick. Optionally, every batch
(for exact-trajectory tests and debugging).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from cascadeserve.policy.tuning import ThresholdDecision

__all__ = ["BatchRecord", "SimResult", "TickSeries", "build_result"]


@dataclass(frozen=True, slots=True)
class BatchRecord:
    start: float
    end: float
    device: int
    replica: int
    row: int  # model row
    size: int
    answered: int


class TickSeries(NamedTuple):
    """What an engine recorded per producer tick, for :func:`build_result`."""

    tick_s: float  # the tick's length
    n_ticks: int
    qps: np.ndarray  # the metered QPS
    gear: np.ndarray  # the gear in force
    q0: np.ndarray  # the first stage's queue length
    busy_s: np.ndarray  # [tick, device] busy seconds of the batches that start in the tick (a last row: the drain)


@dataclass
class SimResult:
    arrivals: np.ndarray
    finish: np.ndarray
    answer_row: np.ndarray  # model row that answered each request
    answer_stage: np.ndarray  # stage (0-based) of that model in the request's cascade
    gear: np.ndarray  # gear each request was admitted under
    correct: np.ndarray
    tick_times: np.ndarray
    tick_qps: np.ndarray
    tick_gear: np.ndarray
    tick_q0: np.ndarray
    tick_busy: np.ndarray  # [ticks, devices] busy fraction of each tick (batches counted where they start)
    wall_s: float
    batches: list[BatchRecord] = field(default_factory=list)
    cached: np.ndarray | None = None  # per request: answered from the prediction cache (None: no cache)
    shed: np.ndarray | None = None  # bool per request: refused by admission (never queued); None: no admission

    @property
    def n_shed(self) -> int:
        return 0 if self.shed is None else int(np.count_nonzero(self.shed))

    threshold_changes: list[ThresholdDecision] = field(default_factory=list)  # online tuning's swaps, in order
    engine: str = "reference"  # which engine ran: "compiled" or "reference" (the same trajectory either way)
    engine_note: str = ""  # why the reference ran ("" for the compiled engine)

    @property
    def latency_s(self) -> np.ndarray:
        return np.asarray(self.finish - self.arrivals)

    @property
    def completed(self) -> int:
        return int(np.count_nonzero(np.isfinite(self.finish)))

    @property
    def gear_switches(self) -> int:
        return int(np.count_nonzero(np.diff(self.tick_gear))) if len(self.tick_gear) > 1 else 0

    @property
    def unanswered(self) -> int:
        """Requests admitted that never completed (counted, never hidden among the completed)."""
        return len(self.arrivals) - self.completed - self.n_shed

    def percentile_ms(self, q: float) -> float:
        """Latency percentile over every admitted request; ``inf`` when more than ``100 - q`` % went unanswered."""
        lat = self.latency_s if self.shed is None else self.latency_s[~self.shed]
        return float(np.percentile(lat, q) * 1000.0) if len(lat) else 0.0

    @property
    def p95_ms(self) -> float:
        """The latency SLO's percentile (:meth:`percentile_ms` of 95)."""
        return self.percentile_ms(95)

    @property
    def accuracy(self) -> float:
        return float(self.correct.mean()) if len(self.correct) else 0.0

    def summary(self) -> dict[str, Any]:
        n = len(self.arrivals)
        done = np.isfinite(self.finish)
        span = float(self.finish[done].max() - self.arrivals.min()) if done.any() else 0.0
        return {
            "requests": n,
            "completed": self.completed,
            "unanswered": self.unanswered,
            "shed": self.n_shed,
            "p50_ms": self.percentile_ms(50),
            "p95_ms": self.percentile_ms(95),
            "p99_ms": self.percentile_ms(99),
            "mean_ms": float(self.latency_s.mean() * 1000.0) if n else 0.0,  # inf when any went unanswered
            "accuracy": self.accuracy,
            "throughput_qps": self.completed / span if span > 0 else 0.0,
            "gear_switches": self.gear_switches,
            "gear_ticks": {int(g): int(c) for g, c in zip(*np.unique(self.tick_gear, return_counts=True), strict=True)},
            "utilisation": [float(u) for u in self.tick_busy.mean(axis=0)] if len(self.tick_busy) else [],
            "wall_s": self.wall_s,
            "simulated_requests_per_s": n / self.wall_s if self.wall_s > 0 else 0.0,
        }


def build_result(
    *,
    arrivals: np.ndarray,
    samples: np.ndarray | None,
    finish: np.ndarray,
    answer_row: np.ndarray,
    gear: np.ndarray,
    predictions: np.ndarray,
    labels: np.ndarray,
    stage_table: np.ndarray,
    ticks: TickSeries,
    wall_s: float,
    batches: list[BatchRecord],
    cached: np.ndarray | None,
    shed: np.ndarray | None,
    threshold_changes: list[ThresholdDecision],
    engine: str,
    correct: np.ndarray | None = None,
    stage: np.ndarray | None = None,
) -> SimResult:
    """The :class:`SimResult` of a run, from per-request outcomes and the per-tick series (both engines).

    ``correct`` and ``stage`` come precomputed from the compiled loop (which also takes ``samples=None``); the
    reference leaves them to this function."""
    n = len(arrivals)
    if correct is None:
        assert samples is not None
        # An unanswered request (answer_row -1) is never correct; without the mask, -1 would index the last model.
        correct = (
            (predictions[answer_row, samples] == labels[samples]) & (answer_row >= 0) if n else np.zeros(0, dtype=bool)
        )
    if stage is None:
        stage = stage_table[gear, answer_row] if n else np.zeros(0, dtype=np.int64)
    tick_s, n_ticks = ticks.tick_s, ticks.n_ticks
    d_count = ticks.busy_s.shape[1]
    busy_frac = np.minimum(ticks.busy_s[:n_ticks] / tick_s, 1.0) if n_ticks else np.zeros((0, d_count))
    return SimResult(
        arrivals=arrivals,
        finish=finish,
        answer_row=answer_row,
        answer_stage=stage,
        gear=gear,
        correct=np.asarray(correct, dtype=bool),
        tick_times=tick_s * np.arange(n_ticks),
        tick_qps=ticks.qps,
        tick_gear=ticks.gear,
        tick_q0=ticks.q0,
        tick_busy=busy_frac,
        wall_s=wall_s,
        batches=batches,
        cached=cached,
        shed=shed,
        threshold_changes=threshold_changes,
        engine=engine,
    )
