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
# The steps are the packages of the same names, made callable (cascadeserve.steps_module): importing one binds it.
_STEPS = ("plan", "profile", "simulate")


def __getattr__(name: str) -> Any:
    """The library's names, imported on first use: ``import cascadeserve`` stays quick (the CLI's --help too)."""
    import importlib

    if name in _STEPS:
        return importlib.import_module(f"cascadeserve.{name}")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), "LoadedWorkload" if name == "Workload" else name)
    raise AttributeError(f"module 'cascadeserve' has no attribute {name!r}")
