"""cascadeserve: serve predictions from model cascades under bursty load.

An offline planner computes a gear plan (placement of replicas on devices and, per QPS range, a cascade with
thresholds, batch triggers and a load split); an online runtime measures QPS and switches gears. The simulator
and the runtime drive the same pure policy core (:mod:`cascadeserve.policy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cascadeserve.api import ServeConfig, Server

__version__ = "0.1.0"

__all__ = ["ServeConfig", "Server", "__version__"]

_LAZY = {"ServeConfig": "cascadeserve.api.config", "Server": "cascadeserve.api.serving"}


def __getattr__(name: str) -> Any:
    """The library's names, imported on first use: ``import cascadeserve`` stays quick (the CLI's --help too)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'cascadeserve' has no attribute {name!r}")
