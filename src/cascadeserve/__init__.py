"""cascadeserve: serve predictions from model cascades under bursty load.

An offline planner computes a gear plan (placement of replicas on devices and, per QPS range, a cascade with
thresholds, batch triggers and a load split); an online runtime measures QPS and switches gears. The simulator
and the runtime drive the same pure policy core (:mod:`cascadeserve.policy`).

The library, as a script uses it (``examples/python_api.py``)::

    import cascadeserve as cs
    wl = cs.Workload.from_file("cascadeserve.yaml")     # or cs.Workload.example("demo/")
    prof = cs.profile(wl)                               # measured and calibrated, unless up to date
    plan = cs.plan(wl, prof)                            # the gear plan, unless up to date
    sim = cs.simulate(plan, prof, trace="synthetic:poisson:qps=20,duration=10")
    with cs.Server(wl, plan, prof, port=0) as srv:      # listening on 127.0.0.1 for the block
        ...                                             # srv.url, srv.name
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cascadeserve.api import ServeConfig, Server, plan, profile, simulate
    from cascadeserve.workload import LoadedWorkload as Workload

from cascadeserve.version import __version__

__all__ = ["ServeConfig", "Server", "Workload", "__version__", "plan", "profile", "simulate"]

_LAZY = {
    "ServeConfig": "cascadeserve.api.config",
    "Server": "cascadeserve.api.serving",
    "Workload": "cascadeserve.workload",
}


def __getattr__(name: str) -> Any:
    """The library's names, imported on first use: ``import cascadeserve`` stays quick (the CLI's --help too)."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), "LoadedWorkload" if name == "Workload" else name)
    raise AttributeError(f"module 'cascadeserve' has no attribute {name!r}")


class _Step:
    """``cascadeserve.profile`` (``plan``, ``simulate``): called, the workload step of :mod:`cascadeserve.api.steps`;
    otherwise the package of that name (``cascadeserve.profile.Profile``), imported on first use.

    Python binds a subpackage as an attribute of its parent once it is imported, over any function of that name, so
    the package root answers these three names itself (:class:`_Package`). The packages know nothing of it: the
    layers still point one way, and ``from cascadeserve.profile import Profile`` is untouched."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module("cascadeserve.api.steps"), self._name)(*args, **kwargs)

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(f"cascadeserve.{self._name}"), attr)

    def __repr__(self) -> str:
        return f"<cascadeserve.{self._name}: the workload step, and the package of that name>"


_STEPS = {name: _Step(name) for name in ("plan", "profile", "simulate")}


class _Package(types.ModuleType):
    def __getattribute__(self, name: str) -> Any:
        step = _STEPS.get(name)  # the module global: this class's own attribute lookups never reach here for it
        return step if step is not None else super().__getattribute__(name)


sys.modules[__name__].__class__ = _Package
