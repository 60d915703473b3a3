"""How many producer ticks a trace spans: the windows both engines replay, and where their queues drain."""

from __future__ import annotations

import numpy as np

__all__ = ["tick_windows"]


def tick_windows(arrivals: np.ndarray, tick_s: float) -> int:
    """How many producer ticks a trace spans: the windows ``[k·tick, (k+1)·tick)`` up to the last arrival's.

    The queues drain from the end of the last window on (``tick_windows(...) * tick_s``). Floor division alone would
    disagree with the window bounds: 0.5 // 0.1 is 4.0, yet 5 * 0.1 == 0.5, so an arrival at 0.5 lies in the sixth
    window, and without the correction it would never be admitted.
    """
    if not len(arrivals):
        return 0
    last = float(arrivals[-1])
    n = int(last // tick_s) + 1
    while tick_s * n <= last:
        n += 1
    return n
