"""Precise wake-ups for :class:`~cascadeserve.runtime.clock.MonotonicClock`: the last stretch of a wait.

Event-loop timers are coarse (uvloop rounds delays to whole milliseconds, and both uvloop and asyncio wake ~0.7 ms
late on a busy 2-core box), so a clock's wait runs on the loop timer until shortly before its instant and hands the
rest to :func:`wake_at`, which calls back on the loop's thread once ``time.monotonic()`` has reached the instant.

On Linux each loop gets one timerfd (``CLOCK_MONOTONIC``, the clock ``time.monotonic`` reads) that the loop watches
like a socket: the loop idles in its poll until the kernel's high-resolution timer fires, and wakes once, as for
any I/O. The timerfd is armed at the earliest pending instant, and each wake calls back every wait that is due.
Elsewhere (or where a timerfd cannot be made) helper threads ``time.sleep`` to the instant and wake the loop with
``call_soon_threadsafe``: the same wake on the loop, plus a thread's wake and a hand-off of the GIL per wait, which
cost the loop's process about twice the CPU of the timerfd (an emulated device waits once per batch).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import heapq
import itertools
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any

__all__ = ["wake_at"]

Callback = Callable[[Any], object]


class _Sleepers:
    """The helper threads (where there is no timerfd): each sleeps until its wait's instant and wakes the loop.

    Every wait has a thread of its own (an idle one, or a new one up to ``cap``), so waits never queue behind a
    later one; past ``cap`` they queue, as a thread pool of that size would."""

    def __init__(self, cap: int = 64) -> None:
        self._jobs: SimpleQueue[tuple[asyncio.AbstractEventLoop, float, Callback, Any]] = SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._threads = 0
        self._cap = cap

    def wake_at(self, loop: asyncio.AbstractEventLoop, when: float, callback: Callback, arg: Any) -> None:
        with self._lock:
            spawn = False
            if self._idle:
                self._idle -= 1
            elif self._threads < self._cap:
                self._threads += 1
                spawn = True
        if spawn:
            name = f"cascadeserve-clock_{self._threads}"
            threading.Thread(target=self._work, name=name, daemon=True).start()
        self._jobs.put((loop, when, callback, arg))

    def _work(self) -> None:
        while True:
            loop, when, callback, arg = self._jobs.get()
            delay = when - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody is waiting any more
                loop.call_soon_threadsafe(callback, arg)
            with self._lock:
                self._idle += 1


class _TimeSpec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _ITimerSpec(ctypes.Structure):
    _fields_ = [("it_interval", _TimeSpec), ("it_value", _TimeSpec)]


_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1


def _libc() -> Any:
    """libc's timerfd calls, or ``None`` where there are none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.timerfd_settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_ITimerSpec), ctypes.c_void_p]
    except (OSError, AttributeError):
        return None
    return libc


class _TimerFd:
    """One loop's timerfd and the waits pending on it, earliest first (ties in the order they were asked for)."""

    def __init__(self, libc: Any, fd: int) -> None:
        self.fd = fd
        self._settime = libc.timerfd_settime
        self._spec = _ITimerSpec()
        self._value = self._spec.it_value  # a view into _spec, made once (each attribute read makes a new one)
        self._ref = ctypes.byref(self._spec)
        self._pending: list[tuple[float, int, Callback, Any]] = []
        self._seq = itertools.count()
        self._armed = math.inf  # the instant the timerfd fires at (inf: disarmed)

    def wake_at(self, when: float, callback: Callback, arg: Any) -> None:
        heapq.heappush(self._pending, (when, next(self._seq), callback, arg))
        if when < self._armed:
            self._arm(when)

    def _arm(self, when: float) -> None:
        self._armed = when
        sec = math.floor(when)
        # rounded up: fired at or after ``when``, so the wait it fires is due when time.monotonic() is read
        nsec = min(math.ceil((when - sec) * 1e9), 999_999_999)
        self._value.tv_sec, self._value.tv_nsec = sec, nsec
        if self._settime(self.fd, _TFD_TIMER_ABSTIME, self._ref, None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")

    def readable(self) -> None:
        with contextlib.suppress(BlockingIOError):  # re-armed since it fired: nothing to read
            os.read(self.fd, 8)
        self._armed = math.inf
        pending = self._pending
        now = time.monotonic()
        while pending and pending[0][0] <= now:
            _, _, callback, arg = heapq.heappop(pending)
            try:
                callback(arg)
            except Exception as e:  # one callback's error must not strand the waits after it
                asyncio.get_running_loop().call_exception_handler(
                    {"message": "a precise wake-up's callback raised", "exception": e}
                )
        if pending:  # fired a hair early by rounding: armed again (at once, if its instant has passed)
            self._arm(pending[0][0])


_LIBC = _libc()
_sleepers = _Sleepers()
_lock = threading.Lock()
_loops: dict[asyncio.AbstractEventLoop, _TimerFd | None] = {}  # per loop: its timerfd, or None: the threads
_UNSEEN: Any = object()


def _waker(loop: asyncio.AbstractEventLoop) -> _TimerFd | None:
    """``loop``'s timerfd, made on its first wait (and the timerfds of loops closed since, closed)."""
    with _lock:
        if loop in _loops:
            return _loops[loop]
        for old in [lp for lp in _loops if lp.is_closed()]:
            tfd = _loops.pop(old)
            if tfd is not None:
                os.close(tfd.fd)
        tfd = None
        if _LIBC is not None:
            fd = _LIBC.timerfd_create(_CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
            if fd >= 0:
                tfd = _TimerFd(_LIBC, fd)
                try:
                    loop.add_reader(fd, tfd.readable)
                except NotImplementedError:  # a loop that watches no file descriptors (Windows' proactor)
                    os.close(fd)
                    tfd = None
        _loops[loop] = tfd
        return tfd


def wake_at(loop: asyncio.AbstractEventLoop, when: float, callback: Callback, arg: Any) -> None:
    """Call ``callback(arg)`` on ``loop``'s thread once ``time.monotonic() >= when``; call it from that thread."""
    tfd = _loops.get(loop, _UNSEEN)
    if tfd is _UNSEEN:
        tfd = _waker(loop)
    if tfd is None:
        _sleepers.wake_at(loop, when, callback, arg)
    else:
        tfd.wake_at(when, callback, arg)
