"""Precise wake-ups (`runtime/precise.py`): on a timerfd where the loop watches file descriptors, else on helper
threads; both call back on the loop's thread, never before the instant, and every wait is called back."""

from __future__ import annotations

import asyncio
import os
import selectors
import sys
import threading
import time
from typing import Any

import pytest
import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadeserve.runtime import precise

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


class _NoFdLoop(asyncio.SelectorEventLoop):
    """A loop that watches no file descriptors (as Windows' proactor): the wake-ups fall back to helper threads."""

    def add_reader(self, fd: Any, callback: Any, *args: Any) -> None:
        raise NotImplementedError


def _collect(loop: asyncio.AbstractEventLoop, delays_s: list[float]) -> list[tuple[int, float, float, bool]]:
    """Ask for one wake per delay (in order); per wake: its index, instant, monotonic time at the call, and whether
    it ran on the loop's thread. Returns once every wake has run (a generous bound: CI machines are shared)."""
    fired: list[tuple[int, float, float, bool]] = []

    async def main() -> None:
        done = asyncio.Event()
        owner = threading.get_ident()
        start = time.monotonic()
        instants = [start + d for d in delays_s]

        def cb(i: int) -> None:
            fired.append((i, instants[i], time.monotonic(), threading.get_ident() == owner))
            if len(fired) == len(instants):
                done.set()

        for i, when in enumerate(instants):
            precise.wake_at(asyncio.get_running_loop(), when, cb, i)
        await asyncio.wait_for(done.wait(), 60.0)

    loop.run_until_complete(main())
    return fired


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux's")
@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_timerfd_wakes_each_wait_once_at_or_after_its_instant_in_instant_order(kind: str) -> None:
    loop = LOOPS[kind]()
    try:
        delays = [0.004, 0.001, 0.002, 0.002, 0.0, -0.001, 0.003]
        fired = _collect(loop, delays)
        assert isinstance(precise._loops[loop], precise._TimerFd)  # the timerfd path, not the threads
    finally:
        loop.close()
    assert sorted(i for i, *_ in fired) == list(range(len(delays)))
    assert all(now >= when for _, when, now, _ in fired)
    assert all(own for *_, own in fired)
    # earliest instant first; equal instants (indices 2 and 3) in the order they were asked for
    assert [i for i, *_ in fired] == [5, 4, 1, 2, 3, 6, 0]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(min_value=-0.002, max_value=0.01), min_size=1, max_size=30))
def test_timerfd_order_and_lateness_on_random_waits(delays: list[float]) -> None:
    loop = asyncio.new_event_loop()
    try:
        fired = _collect(loop, delays)
    finally:
        loop.close()
    assert all(now >= when for _, when, now, _ in fired)
    instants = {i: when for i, when, _, _ in fired}  # start + delay: delays a hair apart may be the same instant
    assert [i for i, *_ in fired] == sorted(instants, key=lambda i: (instants[i], i))


def test_a_loop_without_file_descriptors_falls_back_to_threads() -> None:
    loop = _NoFdLoop(selectors.DefaultSelector())
    try:
        fired = _collect(loop, [0.003, 0.0, 0.001])
        assert precise._loops[loop] is None  # the helper threads' path
    finally:
        loop.close()
    assert sorted(i for i, *_ in fired) == [0, 1, 2]
    assert all(now >= when for _, when, now, _ in fired)
    assert all(own for *_, own in fired)  # called back on the loop's thread, not the sleeper's


def test_sleepers_past_their_cap_queue_but_wake_every_wait() -> None:
    sleepers = precise._Sleepers(cap=2)
    loop = asyncio.new_event_loop()
    fired: list[tuple[int, float, float]] = []

    async def main() -> None:
        done = asyncio.Event()
        start = time.monotonic()

        def cb(i: int) -> None:
            fired.append((i, start + 0.002 * i, time.monotonic()))
            if len(fired) == 6:
                done.set()

        for i in range(6):
            sleepers.wake_at(asyncio.get_running_loop(), start + 0.002 * i, cb, i)
        await asyncio.wait_for(done.wait(), 60.0)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert sorted(i for i, *_ in fired) == list(range(6))
    assert all(now >= when for _, when, now in fired)
    assert sleepers._threads == 2  # never more threads than the cap


def test_a_sleeper_whose_loop_closed_meanwhile_drops_the_wait_and_keeps_working() -> None:
    sleepers = precise._Sleepers(cap=1)
    gone = asyncio.new_event_loop()
    sleepers.wake_at(gone, time.monotonic() + 0.05, lambda _: None, None)
    gone.close()  # the sleeper wakes into a closed loop: call_soon_threadsafe raises, and it is ignored
    loop = asyncio.new_event_loop()
    got: list[int] = []

    async def main() -> None:
        done = asyncio.Event()

        def cb(v: int) -> None:
            got.append(v)
            done.set()

        sleepers.wake_at(asyncio.get_running_loop(), time.monotonic() + 0.06, cb, 7)
        await asyncio.wait_for(done.wait(), 60.0)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert got == [7] and sleepers._threads == 1  # the one thread served the second loop after the first closed


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux's")
def test_a_raising_callback_is_reported_and_the_waits_after_it_still_run() -> None:
    loop = asyncio.new_event_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx))
    got: list[int] = []

    async def main() -> None:
        done = asyncio.Event()
        now = time.monotonic()

        def bad(_: object) -> None:
            raise ValueError("boom")

        def good(v: int) -> None:
            got.append(v)
            done.set()

        precise.wake_at(asyncio.get_running_loop(), now + 0.001, bad, None)
        precise.wake_at(asyncio.get_running_loop(), now + 0.001, good, 1)
        await asyncio.wait_for(done.wait(), 60.0)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert got == [1]
    assert [type(c["exception"]) for c in errors] == [ValueError]
    assert errors[0]["message"] == "a precise wake-up's callback raised"


def _timerfds() -> int:
    """How many timerfds this process holds open."""
    fds = os.listdir("/proc/self/fd")
    return sum(1 for fd in fds if _link(f"/proc/self/fd/{fd}") == "anon_inode:[timerfd]")


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:  # the listing's own descriptor, closed since
        return ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux's")
def test_a_closed_loops_timerfd_is_closed_when_the_next_loop_asks() -> None:
    first = asyncio.new_event_loop()
    _collect(first, [0.0])
    assert isinstance(precise._loops[first], precise._TimerFd)
    held = _timerfds()
    first.close()
    second = asyncio.new_event_loop()
    try:
        _collect(second, [0.0])
        assert first not in precise._loops
        assert _timerfds() == held  # the first loop's closed, the second's opened
    finally:
        second.close()
