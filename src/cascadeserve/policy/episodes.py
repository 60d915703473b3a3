"""Episodes: when shedding starts and stops, and when the served p95 misses the SLO and holds it again.

A server that says what it is doing says it once per change, not once per request: these are the decisions behind
its event lines and gauges (:mod:`cascadeserve.runtime.events` applies them, logs and counts).

* :class:`ShedWatch` reads the count of rows shed for overload every tick. The first shed after a quiet spell starts
  an episode (:class:`ShedEpisode` with ``started``); the episode stops once ``quiet_s`` pass with no shed, and the
  stop says how many rows were shed in it. Sheds that come and go within ``quiet_s`` are one episode, so a flapping
  overload starts at most one episode per ``quiet_s``.
* :class:`SloWatch` keeps each answer's latency and, at most every ``check_s``, the p95 of those that ended in the
  last ``window_s``. It declares a miss when that p95 is over the SLO with at least ``min_answers`` answers in the
  window, and the SLO met again when it is at or under it (or the window holds no answer: nothing waited). The state
  changes at most once per ``window_s`` (:class:`SloEpisode`), so a p95 hovering at the SLO says so once a window.

Nothing here reads a clock: callers pass ``now``.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

__all__ = ["EpisodeSettings", "ShedEpisode", "ShedWatch", "SloEpisode", "SloWatch"]


@dataclass(frozen=True, slots=True)
class EpisodeSettings:
    """How the episodes are told apart."""

    shed_quiet_s: float = 5.0  # shedding has stopped after this long without a shed
    slo_window_s: float = 10.0  # the served p95 is over this window; the SLO state changes at most once per window
    slo_min_answers: int = 20  # fewer answers in the window never declare a miss
    slo_check_s: float = 1.0  # how often the window's p95 is computed

    def __post_init__(self) -> None:
        for name in ("shed_quiet_s", "slo_window_s", "slo_check_s"):
            v = getattr(self, name)
            if not (v > 0 and math.isfinite(v)):
                raise ValueError(f"episode {name} must be a positive number, got {v!r}")
        if self.slo_min_answers < 1:
            raise ValueError(f"episode slo_min_answers must be at least 1, got {self.slo_min_answers!r}")


@dataclass(frozen=True, slots=True)
class ShedEpisode:
    """Shedding ``started`` (the first shed after a quiet spell) or stopped (no shed for the quiet spell)."""

    started: bool
    time: float  # when it was decided
    since: float  # when the episode's first shed was seen
    last: float  # when its last shed was seen (so far)
    shed: int  # rows shed in the episode (so far: a start counts the first tick's)


class ShedWatch:
    """Shedding episodes from a growing count of shed rows (module docstring)."""

    __slots__ = ("_count", "_last", "_seen", "_since", "active", "quiet_s")

    def __init__(self, quiet_s: float = 5.0) -> None:
        self.quiet_s = quiet_s
        self.active = False
        self._seen = 0  # the count at the last check
        self._since = self._last = -math.inf
        self._count = 0  # rows shed in the episode

    @property
    def shed(self) -> int:
        """Rows shed in the episode in progress (or the last one)."""
        return self._count

    def check(self, now: float, total: int) -> ShedEpisode | None:
        """The decision at ``now``, given ``total`` rows shed since the start."""
        new, self._seen = total - self._seen, total
        if new > 0:
            self._last = now
            if not self.active:
                self.active, self._since, self._count = True, now, new
                return ShedEpisode(True, now, now, now, new)
            self._count += new
            return None
        if self.active and now - self._last >= self.quiet_s:
            self.active = False
            return ShedEpisode(False, now, self._since, self._last, self._count)
        return None


@dataclass(frozen=True, slots=True)
class SloEpisode:
    """The served p95 over the window ``missed`` the SLO, or met it again."""

    missed: bool
    time: float  # when it was decided
    p95_ms: float  # the window's p95 (NaN: no answer in the window)
    slo_ms: float
    answers: int  # in the window
    window_s: float
    since: float  # when the state this one ends began (-inf: the start)


class SloWatch:
    """The served p95 over a sliding window against the SLO (module docstring)."""

    __slots__ = ("_changed", "_ends", "_latencies", "_next", "check_s", "min_answers", "missed", "p95_ms", "window_s")

    def __init__(self, window_s: float = 10.0, min_answers: int = 20, check_s: float = 1.0) -> None:
        self.window_s = window_s
        self.min_answers = min_answers
        self.check_s = check_s
        # two deques of floats, not one of tuples: each check reads the whole window into an array
        self._ends: deque[float] = deque()
        self._latencies: deque[float] = deque()
        self._next = -math.inf  # the next check's earliest time
        self._changed = -math.inf  # when the state last changed
        self.missed = False
        self.p95_ms: float | None = None  # at the last check (None: no answer in the window)

    def answered(self, end: float, latency_s: float) -> None:
        """One answer at ``end``, ``latency_s`` after its admission."""
        self._ends.append(end)
        self._latencies.append(latency_s)

    def check(self, now: float, slo_ms: float | None) -> SloEpisode | None:
        """The decision at ``now`` against ``slo_ms`` (``None``: no SLO, the p95 is only measured)."""
        if now < self._next:
            return None
        self._next = now + self.check_s
        ends, lat = self._ends, self._latencies
        old = now - self.window_s
        while ends and ends[0] < old:
            ends.popleft()
            lat.popleft()
        n = len(lat)
        p95 = float(np.percentile(np.fromiter(lat, dtype=np.float64, count=n), 95)) * 1000.0 if n else None
        self.p95_ms = p95
        if slo_ms is None or now - self._changed < self.window_s:
            return None
        if not self.missed and p95 is not None and n >= self.min_answers and p95 > slo_ms:
            missed = True
        elif self.missed and (p95 is None or p95 <= slo_ms):
            missed = False
        else:
            return None
        since, self._changed, self.missed = self._changed, now, missed
        return SloEpisode(missed, now, math.nan if p95 is None else p95, slo_ms, n, self.window_s, since)
