"""Every device reports how busy the host was when each batch started: real models on worker threads, and emulated
devices that apply the contention rule (profile/host.py) on the real clock."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve
from cascadeserve.runtime import FakeClock, RuntimeOptions, emulated_runtime, local_runtime
from cascadeserve.runtime.observer import BatchEvent, NullObserver


class _Batches(NullObserver):
    def __init__(self) -> None:
        self.events: list[BatchEvent] = []

    def batch(self, event: BatchEvent) -> None:
        self.events.append(event)


def _profile(busy_factor: float = 1.0) -> Profile:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 8)
    model = ModelProfile("m", 1.0, RuntimeCurve((1, 8), (80.0, 80.0)), busy_factor=busy_factor)
    return Profile.from_scores("host", [model], y, {"m": rng.random((8, 2))})


def _two_devices(prof: Profile):  # type: ignore[no-untyped-def]
    devs = (Device(name="d0", memory_mb=10), Device(name="d1", memory_mb=10))
    return fixed_plan(prof, Cascade(("m",), ()), devs)


async def _two_requests(rt, gap_s: float) -> None:  # type: ignore[no-untyped-def]
    """One request, then a second ``gap_s`` later (the router sends them to the two devices in turn)."""
    await rt.start()
    a = rt.submit([0])
    await asyncio.sleep(gap_s)
    b = rt.submit([1])
    await asyncio.gather(a[0].future, b[0].future)
    await rt.stop()


def test_real_devices_report_the_share_of_the_host_busy_when_a_batch_started() -> None:
    second_started = threading.Event()
    calls: list[int] = []

    def model(batch: np.ndarray) -> np.ndarray:
        calls.append(1)
        if len(calls) == 1:  # the first batch runs until the second has started (whatever the machine's load)
            assert second_started.wait(timeout=60.0)
        else:
            second_started.set()
        return np.tile([0.9, 0.1], (len(batch), 1))

    prof = _profile()
    seen = _Batches()
    rt = local_runtime(_two_devices(prof), {"m": model}, observer=seen, options=RuntimeOptions(run_producer=False))
    asyncio.run(_two_requests(rt, 0.01))
    first, second = sorted(seen.events, key=lambda e: e.start)
    assert first.device != second.device
    assert (first.host_share, second.host_share) == (0.0, 1.0)


def test_emulated_devices_slow_a_batch_that_starts_on_a_busy_host() -> None:
    seen = _Batches()
    prof = _profile(busy_factor=2.0)

    async def main() -> None:
        clock = FakeClock()
        opts = RuntimeOptions(run_producer=False)
        rt = emulated_runtime(prof, _two_devices(prof), clock=clock, observer=seen, options=opts)
        await rt.start()
        rt.submit([0])
        await clock.advance_to(0.020)
        rt.submit([1])
        await clock.advance_to(0.500)
        rt.submit([2])  # the host idle again
        await clock.advance_to(1.0)

    asyncio.run(main())
    spans = [(e.start, e.end, e.host_share) for e in sorted(seen.events, key=lambda e: e.start)]
    # alone: the profiled 80 ms; with the other device busy: twice that
    assert spans == [(0.0, 0.080, 0.0), (0.020, pytest.approx(0.180), 1.0), (0.5, 0.58, 0.0)]


def test_a_batch_beside_an_upstream_stages_device_finds_the_host_idle() -> None:
    """The same two overlapping batches as above, the second device standing for an upstream stage: it runs on
    another server, so neither batch sees the host busy (what calibration fits and the simulator charges)."""
    second_started = threading.Event()
    calls: list[int] = []

    def model(batch: np.ndarray) -> np.ndarray:
        calls.append(1)
        if len(calls) == 1:
            assert second_started.wait(timeout=60.0)
        else:
            second_started.set()
        return np.tile([0.9, 0.1], (len(batch), 1))

    prof = _profile()
    plan = _two_devices(prof)
    devices = (plan.devices[0], plan.devices[1].model_copy(update={"upstream": "m"}))
    plan = plan.model_copy(update={"devices": devices})
    seen = _Batches()
    rt = local_runtime(plan, {"m": model}, observer=seen, options=RuntimeOptions(run_producer=False))
    asyncio.run(_two_requests(rt, 0.01))
    first, second = sorted(seen.events, key=lambda e: e.start)
    assert first.device != second.device
    assert (first.host_share, second.host_share) == (0.0, 0.0)
