"""ThreadDevice: a model runs on the device's worker thread, except one so cheap that the hop costs more than the
work, which runs on the event loop once it has shown that it is cheap."""

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


def test_a_cheap_model_runs_on_the_loop_after_its_first_batch() -> None:
    threads: list[str] = []
    device = ThreadDevice("d0", {0: _recording(0.0, threads)})
    asyncio.run(_batches(device, [1] * 20))
    device.close()
    loop_thread = threading.current_thread().name  # asyncio.run's loop runs on this thread
    assert threads[0].startswith("cascadeserve-d0")  # first: never seen, so on the worker thread
    # then on the loop, once a batch took under the bound (the first, cold, may not have; nor one that the machine
    # preempted, after which the next goes back to the thread)
    assert threads.count(loop_thread) >= 10


def test_a_model_slower_than_the_hop_stays_on_its_thread() -> None:
    threads: list[str] = []
    device = ThreadDevice("d0", {0: _recording(20 * INLINE_S, threads)})
    asyncio.run(_batches(device, [1, 1, 1]))
    device.close()
    assert all(t.startswith("cascadeserve-d0") for t in threads)


def test_a_much_bigger_batch_of_a_cheap_model_goes_back_to_the_thread() -> None:
    threads: list[str] = []
    device = ThreadDevice("d0", {0: _recording(0.0, threads)})
    device._last[0] = (INLINE_S / 4, 1)  # seen: a quarter of the bound for one row
    asyncio.run(_batches(device, [2, 8]))  # expected: half the bound, then twice it
    device.close()
    assert threads[0] == threading.current_thread().name
    assert threads[1].startswith("cascadeserve-d0")
