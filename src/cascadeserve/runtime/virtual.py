"""Virtual time: the runtime's own code, on a clock that jumps to the next event, is the reference simulator.

:class:`VirtualClock` is a discrete-event scheduler. Every wait of the runtime (a device running a batch, a max-wait
timer, the producer's tick, a deadline, an arrival of a replayed trace) is a timer in one heap ordered by
``(time, order, sequence)``: at one instant the lowest ``order`` goes first (the producer's tick, then the arrivals,
then the devices by rank), and equal orders go first come, first served. No time passes while anything can run;
when nothing can, the clock jumps to the earliest timer and fires that one alone, so every consequence of an event
(a batch's answers, the requests it forwards, the pumps they cause) settles before the next event at the same
instant. Nothing spins and nothing sleeps: a replay costs what its events cost.

:func:`run_virtual` runs a coroutine on an asyncio event loop whose time *is* the virtual clock: the loop asks its
selector to wait only when it has nothing ready, and the selector answers by firing the next timer (or by moving
time to the loop's own next ``call_later``), so asyncio's own timers (``asyncio.sleep``, ``wait_for``) live in the
same time. With :class:`~cascadeserve.runtime.device.EmulatedDevice` devices the whole runtime then replays a trace
deterministically, as fast as Python runs it; :mod:`cascadeserve.simulate.reference` is that replay.

A wait that nothing will ever end (every task blocked, no timer left) is a bug in the code under the clock; the
loop raises :class:`VirtualDeadlock` instead of hanging.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import selectors
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

__all__ = ["VirtualClock", "VirtualDeadlock", "run_virtual"]

T = TypeVar("T")


class _Timer:
    """A callback timer in the clock's heap: cheaper than a task that sleeps (no task, no future, no loop turn)."""

    __slots__ = ("callback", "cancelled", "fired")

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.fired = False
        self.cancelled = False

    def done(self) -> bool:
        return self.fired or self.cancelled

    def cancel(self) -> bool:
        was = not self.done()
        self.cancelled = True
        return was

    def set_result(self, _: None) -> None:
        self.fired = True
        self.callback()


class VirtualDeadlock(RuntimeError):
    """Every task waits and no timer is left: under virtual time this would hang forever."""


class VirtualClock:
    """A clock that stands still while anything can run and jumps to the next timer when nothing can."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._timers: list[tuple[float, float, int, asyncio.Future[None] | _Timer]] = []
        self._seq = itertools.count()
        self.events = 0  # timers fired: the replay's event count
        self._quiet: list[asyncio.Future[None]] = []  # waiters for the moment no timer is left

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        # The deadline is ``now + seconds`` exactly (a batch that starts at t and lasts s ends at the float t + s).
        await self.sleep_until(self._now + seconds)

    async def sleep_until(self, when: float, *, order: float | None = None) -> None:
        """Wait until ``when``. A wait for the current instant with an explicit ``order`` still waits its turn
        behind the instant's lower orders (a consumer re-deciding at ``now`` runs after this instant's arrivals);
        without one, a wait that is already due returns at once."""
        if when < self._now or (when == self._now and order is None):
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._timers, (when, 0.0 if order is None else order, next(self._seq), fut))
        await fut

    def call_at(self, when: float, callback: Callable[[], None], *, order: float | None = None) -> _Timer:
        """Call ``callback`` at ``when`` (order as in :meth:`sleep_until`; a time already past fires at the next
        idle moment). The callback runs while the loop is idle, so it may only schedule work (``call_soon``)."""
        timer = _Timer(callback)
        heapq.heappush(self._timers, (when, 0.0 if order is None else order, next(self._seq), timer))
        return timer

    def next_deadline(self) -> float | None:
        """When the next live timer is due (cancelled waits dropped), or ``None``."""
        timers = self._timers
        while timers and timers[0][3].done():
            heapq.heappop(timers)
        return timers[0][0] if timers else None

    def on_idle(self, loop_timeout: float | None) -> None:
        """The loop has nothing ready and its own next timer is ``loop_timeout`` away (``None``: it has none): fire
        the earliest of our timers, or move time to the loop's own."""
        nxt = self.next_deadline()
        if nxt is not None and (loop_timeout is None or nxt <= self._now + loop_timeout):
            when, _, _, fut = heapq.heappop(self._timers)
            if when > self._now:
                self._now = when
            self.events += 1
            fut.set_result(None)  # a future's callbacks join the loop's ready queue and run on this same loop turn
        elif loop_timeout is not None:
            self._now += loop_timeout
        elif self._quiet:
            for waiter in self._quiet:
                if not waiter.done():
                    waiter.set_result(None)
            self._quiet.clear()
        else:
            raise VirtualDeadlock("every task waits and no timer is left: the run would hang forever")

    async def quiet(self) -> None:
        """Wait until nothing can run and no timer is left: every event of a replay has happened."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._quiet.append(waiter)
        await waiter


class _Selector(selectors.BaseSelector):
    """A selector with no I/O: waiting means letting virtual time pass."""

    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock
        self._keys: dict[Any, selectors.SelectorKey] = {}

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._keys[fileobj] = key  # the loop's self-pipe: registered, never ready (no thread wakes this loop)
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._keys.pop(fileobj)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None or timeout > 0:  # 0: the loop has callbacks ready, so no time may pass yet
            self._clock.on_idle(timeout)
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._keys

    def close(self) -> None:
        self._keys.clear()


class _VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self, clock: VirtualClock) -> None:
        self._vclock = clock
        super().__init__(_Selector(clock))

    def time(self) -> float:
        return self._vclock.now()


def run_virtual(main: Coroutine[Any, Any, T], clock: VirtualClock) -> T:
    """Run ``main`` to completion on an event loop whose time is ``clock`` (no real time passes) and return its
    result; the loop is closed afterwards, its leftover tasks cancelled."""
    loop = _VirtualLoop(clock)
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in pending:
                t.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        finally:
            loop.close()
