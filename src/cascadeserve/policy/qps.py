"""The QPS meter: count arrivals, and turn the count into a rate on each producer tick.

The producer ticks every ``tick_s`` (100 ms by default, as in the paper) and reads the rate over the window that
just closed. The meter holds no clock: the caller passes ``now`` to :meth:`QpsMeter.tick`, so the simulator and
the runtime (with a real or a fake clock) drive the same object.
"""

from __future__ import annotations

from cascadeserve.policy.kernels import qps_rate

__all__ = ["QpsMeter"]


class QpsMeter:
    """Arrivals per second over the last closed window."""

    __slots__ = ("_count", "_last_tick", "window_s")

    def __init__(self, window_s: float = 0.1, *, start: float = 0.0) -> None:
        if window_s <= 0:
            raise ValueError("window_s must be positive")
        self.window_s = window_s
        self._count = 0
        self._last_tick = start

    def record(self, n: int = 1) -> None:
        """Count ``n`` arrivals in the current window."""
        self._count += n

    def tick(self, now: float) -> float:
        """Close the window at ``now`` and return its rate in requests per second."""
        elapsed = now - self._last_tick
        qps = qps_rate(self._count, elapsed)
        self._count = 0
        self._last_tick = now
        return qps
