"""A gear schedule: the gear for every producer tick, fixed in advance instead of chosen from measured QPS.

The producer normally picks the gear from the QPS it measured (:class:`~cascadeserve.policy.GearSelector`). An
autoscaler that is *told* the future load (the Cocktail+ baseline, paper §6.2) decides ahead of time instead: its
decisions, including the delay before a newly requested replica has loaded its model and warmed up, become one
gear per tick. :meth:`GearSchedule.gear_at` is the whole decision; the simulator consults it on every tick when
it is given one (``simulate(..., gear_schedule=...)``), and so does the runtime producer on its tick
(``gear_at(int(now / tick))``) in place of the selector.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cascadeserve.policy.kernels import scheduled_gear

__all__ = ["GearSchedule"]


class GearSchedule:
    """Gear per tick; past the end the last entry holds."""

    __slots__ = ("_gears",)

    def __init__(self, gears: Sequence[int] | np.ndarray) -> None:
        arr = np.asarray(gears, dtype=np.int64)
        if arr.ndim != 1 or arr.size == 0 or np.any(arr < 0):
            raise ValueError("a gear schedule is a non-empty 1-D sequence of non-negative gear indices")
        arr.setflags(write=False)
        self._gears = arr

    def __len__(self) -> int:
        return int(self._gears.size)

    @property
    def gears(self) -> np.ndarray:
        return self._gears

    def gear_at(self, tick: int) -> int:
        """The gear for producer tick ``tick`` (0-based)."""
        return scheduled_gear(self._gears, tick)
