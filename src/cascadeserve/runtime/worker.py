"""A device's worker thread: where a real model's batch runs, so that the event loop never runs model code.

The event loop serves HTTP, gRPC, health probes and deadline timers for every device. A model call made on it
(as cheap models once were, to save the hop to a thread) stops all of that for as long as the call takes, and a
model that stalls (a lock, a network call, a wedged library) then freezes the whole server: probes time out and
deadlines never fire. So every call runs here, and the loop only waits.

Waiting is the cost to keep low. ``run_in_executor`` pays ~130 µs a call on the 2-core CI-class machine (a
``concurrent.futures`` work item and Future, the worker's wake-up, then the loop's wake-up through its self-pipe
and two callback hops), several times what a cheap model computes. A :class:`Worker` call is a bare lock
hand-off (~17 µs there), and for a call expected to be cheap the loop waits for it in place, with the GIL
released, for at most ``wait_s``: a cheap call is answered without a trip through the loop, and a call that
overruns (the model stalled, or the machine preempted it) is awaited asynchronously from then on, so the loop
is blocked for at most ``wait_s``, whatever the model does.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["Call", "Worker"]

T = TypeVar("T")


class Call(Generic[T]):
    """One call handed to a :class:`Worker`: its outcome, and who waits for it."""

    __slots__ = ("_error", "_finished", "_fn", "_lock", "_result", "_waiter", "done")

    def __init__(self, fn: Callable[[], T]) -> None:
        self._fn = fn
        self._result: T | None = None
        self._error: BaseException | None = None
        self._finished = False
        self._waiter: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None
        self._lock = threading.Lock()  # orders "finished" against "an async waiter arrived" (no lost wake-up)
        self.done = threading.Lock()  # held until the call has finished: the in-place wait acquires it
        self.done.acquire()

    def run(self) -> None:
        """Run the call on the calling thread (the worker's) and wake whoever waits for it."""
        try:
            self._result = self._fn()
        except BaseException as e:  # handed back to the caller, raised there
            self._error = e
        with self._lock:
            self._finished = True
            waiter = self._waiter
        self.done.release()
        if waiter is not None:
            loop, fut = waiter
            with contextlib.suppress(RuntimeError):  # the loop closed while the call ran: nobody is left to tell
                loop.call_soon_threadsafe(_wake, fut)

    def outcome(self) -> T:
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]

    async def wait(self, in_place_s: float = 0.0) -> T:
        """The call's outcome: waited for in place (the loop blocked, the GIL released) for at most
        ``in_place_s``, then asynchronously."""
        if in_place_s > 0 and self.done.acquire(timeout=in_place_s):
            return self.outcome()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if not self._finished:
                self._waiter = (loop, fut)
        if self._waiter is not None:
            await fut
        return self.outcome()


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():  # a waiter cancelled (its request's client went away) needs no wake-up
        fut.set_result(None)


class Worker:
    """One thread that runs the calls handed to it, in order (a device runs one batch at a time)."""

    __slots__ = ("_calls", "_closed", "_go", "_thread", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._calls: deque[Call[Any] | None] = deque()
        self._go = threading.Semaphore(0)
        self._closed = False
        # a daemon: a model stalled for good must not keep the process from exiting
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            self._go.acquire()
            call = self._calls.popleft()
            if call is None:
                return
            call.run()

    def submit(self, fn: Callable[[], T]) -> Call[T]:
        if self._closed:
            raise RuntimeError(f"worker {self.name!r} is closed")
        call = Call(fn)
        self._calls.append(call)
        self._go.release()
        return call

    def close(self) -> None:
        """Stop after the calls already handed over (a stalled one is left to the daemon thread)."""
        if not self._closed:
            self._closed = True
            self._calls.append(None)
            self._go.release()
