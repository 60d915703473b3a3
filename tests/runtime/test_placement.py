"""The runtime's injection seam: a :class:`Placement` builds each generation's transport and consumers and hears
of the lifecycle; :class:`LocalPlacement` is the default; ``deadline_slack_s`` delays the runtime's own timers."""

from __future__ import annotations

import asyncio

import pytest

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, GearPlan, fixed_plan
from cascadeserve.profile import Profile
from cascadeserve.runtime import (
    DeadlineExceeded,
    EmulatedDevice,
    FakeClock,
    Generation,
    LocalPlacement,
    NullObserver,
    Runtime,
    RuntimeOptions,
)
from cascadeserve.runtime.transport import LocalTransport


class _Spy(LocalPlacement):
    """A local placement that records the lifecycle events the runtime reports."""

    def __init__(self, profile: Profile, clock: FakeClock) -> None:
        super().__init__(lambda name, order: EmulatedDevice(name, profile, clock, order=order), clock, NullObserver())
        self.events: list[str] = []

    def transport(self, number: int, plan: GearPlan) -> LocalTransport:
        self.events.append(f"transport {number}")
        return super().transport(number, plan)

    def place(self, gen: Generation) -> None:
        self.events.append(f"place {gen.number}")
        super().place(gen)

    async def start(self) -> None:
        self.events.append("start")

    def retire(self, gen: Generation) -> None:
        self.events.append(f"retire {gen.number}")
        super().retire(gen)

    async def stop(self) -> None:
        self.events.append("stop")
        await super().stop()


def _plan(profile: Profile, device: str = "d0") -> GearPlan:
    return fixed_plan(profile, Cascade(("m0",), ()), (Device(name=device, memory_mb=1000),), max_wait_ms=1.0)


def test_runtime_reports_every_lifecycle_event_to_its_placement(toy_profile: Profile) -> None:
    clock = FakeClock()
    spy = _Spy(toy_profile, clock)
    rt = Runtime(
        _plan(toy_profile), toy_profile.model_names, placement=spy, clock=clock, observer=spy.observer,
        options=RuntimeOptions(run_producer=False),
    )  # fmt: skip

    async def main() -> None:
        await rt.start()
        first = rt.submit([1, 2])
        rt.swap_plan(_plan(toy_profile, "d1"))
        await clock.advance_to(0.5)  # the old generation drains, then retires
        assert all(r.done for r in first)
        assert rt.emulated and "d1" in spy.consumers
        await rt.stop(grace_s=0.0)

    asyncio.run(main())
    assert spy.events == ["transport 0", "place 0", "start", "transport 1", "place 1", "retire 0", "stop"]
    assert spy.consumers == {}


def test_runtime_takes_a_device_factory_or_a_placement(toy_profile: Profile) -> None:
    clock = FakeClock()
    spy = _Spy(toy_profile, clock)
    with pytest.raises(ValueError, match="not both"):
        Runtime(_plan(toy_profile), toy_profile.model_names, spy.device_factory, placement=spy, clock=clock)
    with pytest.raises(ValueError, match="not both"):
        Runtime(_plan(toy_profile), toy_profile.model_names, clock=clock)


def test_deadline_slack_delays_the_runtimes_own_timer(toy_profile: Profile) -> None:
    clock = FakeClock()
    # A placement that serves no device here: requests wait, as on a remote server that never answers.
    nowhere = LocalPlacement(
        lambda name, order: EmulatedDevice(name, toy_profile, clock), clock, NullObserver(), devices=()
    )
    opts = RuntimeOptions(run_producer=False, deadline_slack_s=0.5)
    rt = Runtime(_plan(toy_profile), toy_profile.model_names, placement=nowhere, clock=clock, options=opts)

    async def main() -> None:
        await rt.start()
        (req,) = rt.submit([3], timeout_s=0.1)
        await clock.advance_to(0.59)
        assert not req.done  # the deadline (0.1 s) is the servers' to enforce; this timer is the safety net
        await clock.advance_to(0.61)
        assert isinstance(req.future.exception(), DeadlineExceeded)
        await rt.stop(grace_s=0.0)

    asyncio.run(main())
