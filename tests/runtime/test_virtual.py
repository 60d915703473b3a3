"""The virtual clock: a discrete-event scheduler under asyncio (time jumps, ties by order, no hang on a deadlock)."""

from __future__ import annotations

import asyncio
import time

import pytest

from cascadeserve.runtime.virtual import VirtualClock, VirtualDeadlock, run_virtual


def test_time_jumps_to_each_event_and_no_real_time_passes() -> None:
    clock = VirtualClock()
    seen: list[tuple[str, float]] = []

    async def sleeper(name: str, when: float) -> None:
        await clock.sleep_until(when)
        seen.append((name, clock.now()))

    async def main() -> float:
        t0 = time.perf_counter()
        await asyncio.gather(sleeper("late", 3600.0), sleeper("early", 0.5), sleeper("mid", 60.0))
        await asyncio.sleep(30.0)  # asyncio's own timers live in the same time
        return time.perf_counter() - t0

    real = run_virtual(main(), clock)
    assert seen == [("early", 0.5), ("mid", 60.0), ("late", 3600.0)]
    assert clock.now() == 3630.0 and clock.events == 3
    assert real < 5.0  # an hour of virtual time, in (much) less than the timeout of any test


def test_ties_go_by_order_then_first_come_and_each_settles_before_the_next() -> None:
    clock = VirtualClock()
    log: list[str] = []

    async def waiter(name: str, order: float) -> None:
        await clock.sleep_until(1.0, order=order)
        log.append(name)
        await asyncio.sleep(0)  # a consequence of the event: it runs before the next event of the instant
        log.append(name + "'")

    async def main() -> None:
        clock.call_at(1.0, lambda: log.append("timer@-1"), order=-1)
        await asyncio.gather(waiter("dev1", 1), waiter("dev0", 0), waiter("arrival", -0.5), waiter("dev0b", 0))

    run_virtual(main(), clock)
    assert log == ["timer@-1", "arrival", "arrival'", "dev0", "dev0'", "dev0b", "dev0b'", "dev1", "dev1'"]


def test_a_cancelled_timer_never_fires_and_quiet_waits_for_the_last_event() -> None:
    clock = VirtualClock()
    fired: list[float] = []

    async def main() -> float:
        keep = clock.call_at(2.0, lambda: fired.append(clock.now()))
        drop = clock.call_at(1.0, lambda: fired.append(-1.0))
        assert drop.cancel() and not keep.done()
        await clock.quiet()
        return clock.now()

    assert run_virtual(main(), clock) == 2.0
    assert fired == [2.0]


def test_a_wait_that_nothing_ends_raises_instead_of_hanging() -> None:
    clock = VirtualClock()

    async def main() -> None:
        await asyncio.get_running_loop().create_future()  # nobody will ever set it

    with pytest.raises(VirtualDeadlock, match="hang forever"):
        run_virtual(main(), clock)
