"""cascadeserve: serve predictions from model cascades under bursty load.

An offline planner computes a gear plan (placement of replicas on devices and, per QPS range, a cascade with
thresholds, batch triggers and a load split); an online runtime measures QPS and switches gears. The simulator
and the runtime drive the same pure policy core (:mod:`cascadeserve.policy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cascadeserve.api import ServeConfig, Server, plan, profile, simulate
    from cascadeserve.workload import LoadedWorkload as Workload

__version__ = "0.1.0"

__all__ = ["ServeConfig", "Server", "Workload", "__version__", "plan", "profile", "simulate"]

_LAZY = {
    "ServeConfig": "cascadeserve.api.config",
    "Server": "cascadeserve.api.serving",
    "Workload": "cascadeserve.workload",
    "plan": "cascadeserve.api.steps",
    "profile": "cascadeserve.api.steps",
    "simulate": "cascadeserve.api.steps",
}


def __getattr__(name: str) -> Any:
    """The library's names, imported on first use: ``import cascadeserve`` stays quick (the CLI's --help too)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), "LoadedWorkload" if name == "Workload" else name)
    raise AttributeError(f"module 'cascadeserve' has no attribute {name!r}")
