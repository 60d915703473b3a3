"""Backends: where a runtime's devices live. The seam between the HTTP front end and the execution engine.

A :class:`Backend` builds a :class:`~cascadeserve.runtime.Runtime` for a plan, either on emulated devices
(profiled runtimes, recorded answers) or on real models. :class:`LocalBackend`, the default, builds the embedded
runtime of this package (one asyncio loop, a worker thread per device). ``cascadeserve.backends.ray`` provides
another: a plain :class:`Runtime` composed with a Ray placement that puts replicas on Ray actors; the HTTP layer only
ever sees the :class:`Runtime` interface, so it imports no backend.
"""

from __future__ import annotations

from typing import Protocol

from cascadeserve.plan import GearPlan
from cascadeserve.profile import Profile
from cascadeserve.runtime.clock import Clock
from cascadeserve.runtime.factory import emulated_runtime, local_runtime
from cascadeserve.runtime.loading import ModelConfig
from cascadeserve.runtime.observer import Observer
from cascadeserve.runtime.server import Runtime, RuntimeOptions

__all__ = ["Backend", "LocalBackend"]


class Backend(Protocol):
    """Builds runtimes; ``name`` is what ``cascadeserve serve --backend`` calls it."""

    name: str

    def emulated_runtime(
        self,
        profile: Profile,
        plan: GearPlan,
        *,
        clock: Clock | None = None,
        observer: Observer | None = None,
        options: RuntimeOptions | None = None,
    ) -> Runtime: ...

    def local_runtime(
        self,
        plan: GearPlan,
        models: ModelConfig,
        *,
        clock: Clock | None = None,
        observer: Observer | None = None,
        options: RuntimeOptions | None = None,
    ) -> Runtime: ...


class LocalBackend:
    """The embedded runtime: every device in this process."""

    name = "local"

    def emulated_runtime(
        self,
        profile: Profile,
        plan: GearPlan,
        *,
        clock: Clock | None = None,
        observer: Observer | None = None,
        options: RuntimeOptions | None = None,
    ) -> Runtime:
        return emulated_runtime(profile, plan, clock=clock, observer=observer, options=options)

    def local_runtime(
        self,
        plan: GearPlan,
        models: ModelConfig,
        *,
        clock: Clock | None = None,
        observer: Observer | None = None,
        options: RuntimeOptions | None = None,
    ) -> Runtime:
        return local_runtime(
            plan, models.models, certainty=models.certainty, clock=clock, observer=observer, options=options
        )
