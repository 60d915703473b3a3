"""The QPS meter: count arrivals, and turn the count into a rate on each producer tick.

The producer ticks every ``tick_s`` (100 ms by default, as in the paper) and reads the rate over the window that
just closed, stretched back over earlier ticks until it holds ``min_arrivals`` arrivals (at most
:data:`MAX_QPS_WINDOW_S`; :func:`~cascadeserve.policy.kernels.windowed_qps`): at a few requests per second one
tick holds 0 or 1 of them, and a gear picked from that is noise. ``min_arrivals`` 0 is the paper's one-tick meter.
The meter holds no clock: the caller passes ``now`` to :meth:`QpsMeter.tick`, so the simulator and the runtime
(with a real or a fake clock) drive the same object; the compiled simulator calls the same kernel on its
cumulative counts.
"""

from __future__ import annotations

import math

from cascadeserve.policy.kernels import windowed_qps

__all__ = ["MAX_QPS_WINDOW_S", "QpsMeter", "check_qps", "max_window_ticks", "measurement_sd"]

MAX_QPS_WINDOW_S = 5.0
"""The longest window the meter stretches to: a load that changes is seen within this long at any rate."""


def max_window_ticks(tick_s: float) -> int:
    """How many ticks the meter may look back (at least one)."""
    return max(1, round(MAX_QPS_WINDOW_S / tick_s))


def measurement_sd(qps: float, tick_s: float, min_arrivals: int) -> float:
    """The standard deviation of the meter's reading at a steady ``qps`` (Poisson arrivals): ``sqrt(qps / window)``
    with the window the meter stretches to. SP4 checks each range above its top by this much."""
    if qps <= 0:
        return 0.0
    window = min(max(tick_s, min_arrivals / qps), max_window_ticks(tick_s) * tick_s)
    return math.sqrt(qps / window)


def check_qps(qps_high: float, tick_s: float, *, top: bool = False, min_arrivals: int = 0) -> float:
    """The load a gear range is held to: its top QPS plus the standard deviation of the meter's reading there
    (:func:`measurement_sd`); the top range: its top QPS. The planner's SP4 checks each range at this load, and a
    re-plan's verdict counts a tick as overloaded only past it (a reading within the meter's noise of the range's
    top is what SP4 already simulated)."""
    if top or qps_high <= 0:
        return qps_high
    return qps_high + measurement_sd(qps_high, tick_s, min_arrivals)


class QpsMeter:
    """Arrivals per second over the last closed window(s)."""

    __slots__ = ("_count", "_cum", "_times", "max_ticks", "min_arrivals", "window_s")

    def __init__(self, window_s: float = 0.1, *, start: float = 0.0, min_arrivals: int = 0) -> None:
        if window_s <= 0:
            raise ValueError("window_s must be positive")
        if min_arrivals < 0:
            raise ValueError("min_arrivals must be ≥ 0")
        self.window_s = window_s
        self.min_arrivals = min_arrivals
        self.max_ticks = max_window_ticks(window_s) if min_arrivals > 0 else 1
        self._count = 0
        self._cum = [0]  # arrivals counted by each of the last max_ticks + 1 ticks, oldest first
        self._times = [start]

    def record(self, n: int = 1) -> None:
        """Count ``n`` arrivals in the current window."""
        self._count += n

    @property
    def total(self) -> int:
        """Every arrival counted so far."""
        return self._cum[-1] + self._count

    def tick(self, now: float) -> float:
        """Close the window at ``now`` and return the rate in requests per second."""
        self._cum.append(self._cum[-1] + self._count)
        self._times.append(now)
        self._count = 0
        if len(self._cum) > self.max_ticks + 1:
            del self._cum[0], self._times[0]
        return windowed_qps(self._cum, self._times, len(self._cum) - 1, self.min_arrivals, self.max_ticks)
