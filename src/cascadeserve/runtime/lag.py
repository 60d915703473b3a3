"""How late the event loop runs: the queue in front of admission that admission cannot count.

A request is read from its socket only when the event loop gets to it. While the loop keeps up, that takes
microseconds; when it does not (more requests to parse, shed or answer than one core handles, or a host that gives
the process less than a core), requests wait in the kernel's buffers, unseen by the bound on requests in flight.
:class:`LoopLag` measures that wait the way Node's ``monitorEventLoopDelay`` does: a timer due every
``interval_s`` records how late it fired, and a reading between firings also counts how late the pending one
already is (the loop is busy with something right now). A late firing is held for ``hold_s``: the requests that
piled up during a stall are read in the few iterations after it, and they waited as long.

Admission reads it (:meth:`~cascadeserve.policy.AdmissionPolicy.decide`'s ``lag_s``); only a runtime on the real
clock starts one, since on a virtual clock nothing waits to be read and the reference simulator must not gain
events of its own.
"""

from __future__ import annotations

import asyncio

__all__ = ["LoopLag"]


class LoopLag:
    """The event loop's lateness in seconds (:meth:`lag_s`), from a timer every ``interval_s``."""

    __slots__ = ("_due", "_handle", "_held", "_held_until", "_loop", "hold_s", "interval_s")

    def __init__(self, interval_s: float = 0.005, hold_s: float = 0.05) -> None:
        if not (interval_s > 0 and hold_s >= 0):
            raise ValueError(f"interval_s must be positive and hold_s >= 0, got {interval_s!r}, {hold_s!r}")
        self.interval_s = interval_s
        self.hold_s = hold_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._held = 0.0  # the largest lateness seen within the hold
        self._held_until = 0.0

    def start(self) -> None:
        """Start timing the running loop."""
        self._loop = asyncio.get_running_loop()
        self._arm(self._loop.time())

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle, self._loop = None, None

    def _arm(self, now: float) -> None:
        assert self._loop is not None
        self._due = now + self.interval_s
        self._handle = self._loop.call_at(self._due, self._fired)

    def _fired(self) -> None:
        assert self._loop is not None
        now = self._loop.time()
        late = now - self._due
        if late >= self._held or now >= self._held_until:
            self._held, self._held_until = late, now + self.hold_s
        self._arm(now)

    def lag_s(self) -> float:
        """How late the loop runs now: the pending timer's lateness so far, or a later firing within the hold."""
        loop = self._loop
        if loop is None:
            return 0.0
        now = loop.time()
        held = self._held if now < self._held_until else 0.0
        return max(now - self._due, held, 0.0)
