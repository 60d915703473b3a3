"""Clocks: the runtime never reads time directly, it asks an injected :class:`Clock`.

:class:`MonotonicClock` is the real one (``time.monotonic``; loop timers, finished by a precise wake-up).
:class:`FakeClock` stands still until a test advances it by hand; every ``sleep`` is a timer in a heap, and
:meth:`FakeClock.advance_to` fires timers in deadline order, letting the event loop settle after each. With a fake
clock and emulated devices the runtime is fully deterministic, which is what lets a test compare its trajectory
with the simulator's to the last float. :class:`~cascadeserve.runtime.virtual.VirtualClock` jumps from event to event
by itself, under an event loop whose time it is: the runtime on it is the reference simulator.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from cascadeserve.runtime.precise import wake_at

__all__ = ["Cancellable", "Clock", "FakeClock", "MonotonicClock", "call_later", "timer_task"]


class Cancellable(Protocol):
    """A timer armed by :meth:`Clock.call_at`: cancel it to disarm (cancelling a fired timer does nothing)."""

    def cancel(self) -> object: ...


@runtime_checkable
class Clock(Protocol):
    """What the runtime needs from time: a reading and ways to wait (for a duration, or until an instant)."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...

    async def sleep_until(self, when: float, *, order: int | None = None) -> None:
        """Wait until ``now() >= when``. Timers due at the same instant fire by ``order`` (a fake clock only)."""
        ...

    def call_at(self, when: float, callback: Callable[[], None], *, order: int | None = None) -> Cancellable:
        """Call ``callback`` once ``now() >= when`` (a timer: a consumer's max wait); same order rules as
        :meth:`sleep_until`."""
        ...


# Event-loop timers are coarse: uvloop (libuv) rounds delays to whole milliseconds, so a 0.5 ms sleep returns at
# once, and both uvloop and asyncio wake ~0.7 ms late on a busy 2-core box. An emulated device that sleeps its
# batch runtime, and a max-wait timer, need better than that for the runtime to match the simulator, so the last
# stretch of every wait is a precise wake-up (runtime/precise.py: a timerfd the loop watches, or a helper thread).
_PRECISE_S = 0.002


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():  # its waiter was cancelled meanwhile
        future.set_result(None)


class _PreciseTimer:
    """A timer of :class:`MonotonicClock`: a loop timer that stops short of the instant, then a precise wake-up.

    What a task that runs ``sleep_until`` and then the callback did, without the task: no task step to start it,
    and cancelling one is a flag and the loop timer's cancel, not a ``CancelledError`` thrown into a coroutine
    (every request arms a deadline timer, and nearly every one is cancelled when it is answered)."""

    __slots__ = ("_callback", "_handle", "_loop", "_when", "cancelled")

    def __init__(self, loop: asyncio.AbstractEventLoop, when: float, callback: Callable[[], None]) -> None:
        self._loop = loop
        self._when = when
        self._callback = callback
        self.cancelled = False
        coarse = when - time.monotonic() - _PRECISE_S
        # the callback never runs inside call_at, even when due now: on the next loop turn, as the task's did
        self._handle = loop.call_later(coarse, self._near) if coarse > 0 else loop.call_soon(self._near)

    def _near(self) -> None:
        if self._when - time.monotonic() > 0:
            wake_at(self._loop, self._when, _PreciseTimer.fire, self)
        else:
            self.fire()

    def fire(self) -> None:
        if not self.cancelled:
            self.cancelled = True  # fired: a later cancel() does nothing
            self._callback()

    def cancel(self) -> None:
        self.cancelled = True
        self._handle.cancel()


class MonotonicClock:
    """Real time from ``time.monotonic`` (never wall-clock time, which can jump); waits precise to ~0.1 ms."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await self.sleep_until(time.monotonic() + seconds)

    async def sleep_until(self, when: float, *, order: int | None = None) -> None:
        coarse = when - time.monotonic() - _PRECISE_S
        if coarse > 0:
            await asyncio.sleep(coarse)  # the loop timer, which may wake up to ~1 ms late, stops short
        if when - time.monotonic() > 0:
            loop = asyncio.get_running_loop()
            woken: asyncio.Future[None] = loop.create_future()
            wake_at(loop, when, _wake, woken)
            await woken

    def call_at(self, when: float, callback: Callable[[], None], *, order: int | None = None) -> Cancellable:
        return _PreciseTimer(asyncio.get_running_loop(), when, callback)


class FakeClock:
    """A clock that moves only when a test calls :meth:`advance_to` or :meth:`advance`."""

    def __init__(self, start: float = 0.0, *, settle_rounds: int = 20) -> None:
        self._now = start
        self._timers: list[tuple[float, int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._settle_rounds = settle_rounds

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        # The deadline is ``now + seconds`` exactly, as in the simulator (``start + runtime``).
        await self.sleep_until(self._now + seconds)

    async def sleep_until(self, when: float, *, order: int | None = None) -> None:
        # A wait for the current instant with an explicit order still waits its turn: a consumer that re-decides at
        # ``now`` after a gear switch (order >= 0) must run after this instant's arrivals, as in the simulator,
        # not before them. Without an order (``sleep``) a wait that is already due returns at once.
        if when < self._now or (when == self._now and order is None):
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Ties at one instant go by ``order``: the simulator handles simultaneous events in device order, with
        # the producer's tick first; devices and the producer pass their rank here so that we do the same.
        heapq.heappush(self._timers, (when, 0 if order is None else order, next(self._seq), fut))
        await fut

    @property
    def pending(self) -> int:
        """Timers not yet fired (cancelled sleeps included until they reach the top)."""
        return len(self._timers)

    def next_deadline(self) -> float | None:
        while self._timers and self._timers[0][3].done():
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    async def settle(self) -> None:
        """Let every task that can run at the current time run (no time passes)."""
        for _ in range(self._settle_rounds):
            await asyncio.sleep(0)

    async def advance_to(self, t: float, *, up_to_order: float = math.inf) -> None:
        """Fire every timer due by ``t`` in deadline order, then leave the clock at ``t``.

        ``up_to_order`` stops at instant ``t`` after the timers of that order or lower: the simulator's order within
        one instant is the producer's tick (order -1), then the arrivals, then device events and max-wait timers
        (orders ≥ 0), so a replay advances with ``up_to_order=-1``, submits the arrivals of the instant, and lets
        the next advance fire the rest.
        """
        await self.settle()
        while True:
            nxt = self.next_deadline()
            if nxt is None or nxt > t or (nxt == t and self._timers[0][1] > up_to_order):
                break
            deadline, _, _, fut = heapq.heappop(self._timers)
            self._now = max(self._now, deadline)
            fut.set_result(None)
            await self.settle()
        self._now = max(self._now, t)
        await self.settle()

    def call_at(self, when: float, callback: Callable[[], None], *, order: int | None = None) -> Cancellable:
        return timer_task(self, when, callback, order)

    async def advance(self, seconds: float) -> None:
        await self.advance_to(self._now + seconds)

    async def run_until_idle(self, limit: float = 1e9) -> None:
        """Fire timers until none is left (or the next one lies past ``limit``)."""
        while True:
            nxt = self.next_deadline()
            if nxt is None or nxt > limit:
                await self.settle()
                return
            await self.advance_to(nxt)


def timer_task(clock: Clock, when: float, callback: Callable[[], None], order: int | None) -> asyncio.Task[None]:
    """A timer as a task that sleeps on ``clock`` until ``when`` (with ``order``) and then calls ``callback``."""

    async def fire() -> None:
        await clock.sleep_until(when, order=order)
        callback()

    return asyncio.get_running_loop().create_task(fire())


def call_later(clock: Clock, delay: float, callback: Callable[[], None]) -> Cancellable:
    """Run ``callback`` after ``delay`` seconds of ``clock`` time; cancel the returned timer to disarm."""
    if isinstance(clock, MonotonicClock):  # a real clock's timer needs no task (a fake or virtual one's order does)
        return clock.call_at(clock.now() + delay, callback)
    return timer_task(clock, clock.now() + delay, callback, None)
