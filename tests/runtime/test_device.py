"""ThreadDevice: every model call runs on the device's worker thread, never on the event loop; a batch expected to
be cheap is waited for in place, for a bounded time, and a model that stalls holds only its own device."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np

from cascadeserve.runtime import ThreadDevice
from cascadeserve.runtime.device import INLINE_S


def _recording(sleep_s: float, threads: list[str]):  # type: ignore[no-untyped-def]
    def model(batch: np.ndarray) -> np.ndarray:
        threads.append(threading.current_thread().name)
        if sleep_s:
            time.sleep(sleep_s)
        return np.tile([0.9, 0.1], (len(batch), 1))

    return model


async def _batches(device: ThreadDevice, sizes: list[int]) -> None:
    for n in sizes:
        out = await device.run(0, np.zeros((n, 1)))
        assert out.labels.tolist() == [0] * n


def test_a_cheap_model_runs_on_its_thread_and_is_waited_for_in_place() -> None:
    threads: list[str] = []
    device = ThreadDevice("d0", {0: _recording(0.0, threads)})
    assert not device._inline(0, np.zeros((1, 1)))  # never seen: no expectation yet
    asyncio.run(_batches(device, [1] * 20))
    device.close()
    assert len(threads) == 20 and all(t.startswith("cascadeserve-d0") for t in threads)
    device._last[0] = (INLINE_S / 4, 1)  # seen: a quarter of the bound for one row
    assert device._inline(0, np.zeros((2, 1)))  # expected: half the bound
    assert not device._inline(0, np.zeros((8, 1)))  # expected: twice the bound


def test_a_model_slower_than_the_hop_stays_on_its_thread() -> None:
    threads: list[str] = []
    device = ThreadDevice("d0", {0: _recording(20 * INLINE_S, threads)})
    asyncio.run(_batches(device, [1, 1, 1]))
    device.close()
    assert all(t.startswith("cascadeserve-d0") for t in threads)
    assert not device._inline(0, np.zeros((1, 1)))


def test_a_cheap_model_that_stalls_leaves_the_loop_free() -> None:
    """The model was cheap (waited for in place), then stalls until the loop itself releases it: only a loop that
    keeps running while the model stalls can, so a blocked loop shows as a stall that ran out its 30 s."""
    release = threading.Event()
    stalls = [False]

    def model(batch: np.ndarray) -> np.ndarray:
        if stalls[0]:
            stalls[0] = release.wait(timeout=30.0)  # True: the loop released it; False: it never could
        return np.tile([0.9, 0.1], (len(batch), 1))

    device = ThreadDevice("d0", {0: model})

    async def scenario() -> bool:
        await _batches(device, [1] * 5)
        device._last[0] = (0.0, 1)  # seen cheap, whatever the machine's speed: waited for in place
        stalls[0] = True
        batch = asyncio.ensure_future(device.run(0, np.zeros((1, 1))))
        await asyncio.sleep(0.05)  # the loop runs this task while the model stalls
        release.set()
        await batch
        return stalls[0]

    released_by_loop = asyncio.run(scenario())
    device.close()
    assert released_by_loop


def test_a_failing_model_raises_its_error_to_the_caller() -> None:
    def model(batch: np.ndarray) -> np.ndarray:
        raise ValueError("boom")

    device = ThreadDevice("d0", {0: model})

    async def run() -> str:
        try:
            await device.run(0, np.zeros((1, 1)))
        except ValueError as e:
            return str(e)
        return ""

    assert asyncio.run(run()) == "boom"
    device.close()
