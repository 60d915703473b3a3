"""The Ray backend's entry point: :class:`RayBackend` builds runtimes on Ray, and :func:`model_sources` tells the
servers where to import their models from.

:class:`RayBackend` implements the runtime's :class:`~cascadeserve.runtime.Backend` protocol, as
:class:`~cascadeserve.runtime.LocalBackend` does, so ``cascadeserve serve --backend ray`` and the HTTP front end
need no Ray-specific code. It connects to Ray on first use (joining ``RayOptions.address``, or starting a local
instance that listens on 127.0.0.1 only: :mod:`~cascadeserve.backends.ray.loopback`), and refuses a fake clock: its
servers live in other processes, on real time.

A models config in the ``module:factory`` form lets each server import only the models placed on its device
(:func:`model_sources`); an adapter config's models are built by the front end and shipped to the servers pickled.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ray

from cascadeserve.backends.ray.frontend import RayRuntime
from cascadeserve.backends.ray.loopback import is_loopback_address, start_local, use_loopback
from cascadeserve.backends.ray.options import ModelSource, RayOptions
from cascadeserve.errors import CascadeServeError
from cascadeserve.plan import GearPlan
from cascadeserve.profile import Profile, Vote
from cascadeserve.runtime import Clock, ModelConfig, MonotonicClock, Observer, Runtime, RuntimeOptions

__all__ = ["RayBackend", "model_sources"]


class RayBackend:
    """Builds runtimes on Ray (:func:`~cascadeserve.backends.ray.frontend.RayRuntime`), connecting to Ray (or starting
    a local instance) on first use."""

    name = "ray"

    def __init__(self, options: RayOptions | None = None, *, model_sources: Mapping[str, ModelSource] | None = None):
        self.options = options or RayOptions()
        self.model_sources = model_sources  # module:factory refs the servers load themselves (see the CLI)

    def connect(self) -> None:
        """Join ``options.address``, or start a new local instance that listens on 127.0.0.1 only (never one named
        by ``RAY_ADDRESS`` or left by an earlier ``ray start``: joining a cluster is explicit)."""
        if ray.is_initialized():
            return
        address = self.options.address
        kwargs: dict[str, Any] = {"namespace": self.options.namespace, "log_to_driver": False}
        if address is None:
            start_local(**{"include_dashboard": False, **kwargs, **self.options.init_kwargs})
            return
        if is_loopback_address(address):  # a cluster on this host's loopback is joined on loopback
            use_loopback()
        ray.init(address=address, **{**kwargs, **self.options.init_kwargs})

    def emulated_runtime(
        self,
        profile: Profile,
        plan: GearPlan,
        *,
        clock: Clock | None = None,
        observer: Observer | None = None,
        options: RuntimeOptions | None = None,
    ) -> Runtime:
        _real_clock(clock)
        plan.check_against(profile)
        self.connect()
        return RayRuntime(
            plan, profile.model_names, profile=profile, ray_options=self.options, observer=observer, options=options
        )

    def local_runtime(
        self,
        plan: GearPlan,
        models: ModelConfig,
        *,
        clock: Clock | None = None,
        observer: Observer | None = None,
        options: RuntimeOptions | None = None,
    ) -> Runtime:
        _real_clock(clock)
        names = tuple(models.models)
        missing = sorted(set(plan.models()) - set(names))
        if missing:
            votes = [m for m in missing if Vote.parse(m, names) is not None]
            if votes:  # its members would have to share one actor's batch: not built on Ray
                raise CascadeServeError(f"vote stage {votes[0]} is served on the local backend only (--backend local)")
            raise KeyError(f"the plan needs models {', '.join(missing)}, which the models config does not define")
        self.connect()
        sources: Mapping[str, ModelSource] = self.model_sources or models.models
        return RayRuntime(
            plan,
            names,
            models=sources,
            certainty=models.certainty,
            ray_options=self.options,
            observer=observer,
            options=options,
        )


def model_sources(path: str | Path) -> dict[str, ModelSource] | None:
    """The ``module:factory`` references of a models config (factory form), for servers to import themselves, so
    each loads only the models placed on it. ``None`` for an adapter config (a ``models:`` list): its models are
    built by the front end and shipped to the servers pickled. The file is read and validated by
    :func:`~cascadeserve.models.config.load_models_file`, the one reader of it."""
    from cascadeserve.models.config import FactoryModelsConfig, load_models_file  # deferred, as in the runtime

    cfg = load_models_file(path)
    if not isinstance(cfg, FactoryModelsConfig):
        return None
    return {name: (ref.factory, dict(ref.kwargs)) for name, ref in cfg.models.items()}


def _real_clock(clock: Clock | None) -> None:
    if clock is not None and not isinstance(clock, MonotonicClock):
        raise ValueError("the Ray backend runs on real time only (servers live in other processes)")
