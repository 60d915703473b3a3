"""Convenience constructors: a runtime on emulated devices, or on local devices with real models."""

from __future__ import annotations

from collections.abc import Mapping

from cascadeserve.plan import GearPlan
from cascadeserve.profile import Profile
from cascadeserve.profile.slowdown import Slowdowns
from cascadeserve.runtime.clock import Clock, MonotonicClock
from cascadeserve.runtime.device import Device, EmulatedDevice, HostLoad, ModelFn, ThreadDevice
from cascadeserve.runtime.observer import Observer
from cascadeserve.runtime.server import Runtime, RuntimeOptions
from cascadeserve.runtime.vote import with_vote_models

__all__ = ["emulated_runtime", "local_runtime"]


def emulated_runtime(
    profile: Profile,
    plan: GearPlan,
    *,
    clock: Clock | None = None,
    observer: Observer | None = None,
    options: RuntimeOptions | None = None,
    slowdowns: Slowdowns | None = None,
    batch_overhead_s: float = 0.0,
) -> Runtime:
    """A runtime whose devices wait the profiled runtimes and answer from the profile's records.

    Payloads are validation sample *indices* (rows of the profile), as in the simulator. ``slowdowns`` is the
    emulated devices' fault hook (the simulator's ``slowdowns``); ``batch_overhead_s`` a fixed cost each batch adds.
    """
    plan.check_against(profile)
    clk = clock or MonotonicClock()

    slow = slowdowns if slowdowns is not None else (options.slowdowns if options is not None else None)
    host = HostLoad.of(plan)  # this host's devices contend (profile/host.py); an upstream's does not

    def make(name: str, order: int) -> Device:
        return EmulatedDevice(name, profile, clk, order=order, slowdowns=slow, overhead_s=batch_overhead_s, host=host)

    return Runtime(plan, profile.model_names, make, clock=clk, observer=observer, options=options)


def local_runtime(
    plan: GearPlan,
    models: Mapping[str, ModelFn],
    *,
    certainty: str = "margin",
    clock: Clock | None = None,
    observer: Observer | None = None,
    options: RuntimeOptions | None = None,
) -> Runtime:
    """A runtime that runs ``models`` (name -> ``scores = f(batch)``) on one worker thread per device; a vote stage
    the plan names is built from its members (``runtime/vote.py``)."""
    models = with_vote_models(models, plan.models(), certainty)
    names = tuple(models)
    missing = sorted(set(plan.models()) - set(names))
    if missing:
        raise KeyError(f"the plan needs models {', '.join(missing)}, which the models config does not define")
    fns = {i: models[n] for i, n in enumerate(names)}
    clk = clock or MonotonicClock()
    slow = options.slowdowns if options is not None else None
    rows = dict(enumerate(names))
    host = HostLoad.of(plan)  # how loaded the host is when each batch starts (calibration reads it)

    def make(name: str, order: int) -> Device:
        return ThreadDevice(name, fns, certainty, slowdowns=slow, clock=clk, model_names=rows, host=host, order=order)

    return Runtime(plan, names, make, clock=clk, observer=observer, options=options)
