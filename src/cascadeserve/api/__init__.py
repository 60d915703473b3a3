"""The library's composition root: what the commands do, as functions and classes a user imports.

``ServeConfig`` holds every serving setting once; ``Server`` runs a server for a ``with`` block and ``serve`` one
until a signal (``cascadeserve serve``); ``profile``, ``plan`` and ``simulate`` are a workload's offline steps
(``cascadeserve up`` runs them). Each name is imported on first use, so a command loads only what it runs."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cascadeserve.api.config import DEFAULTS, ServeConfig
    from cascadeserve.api.serving import Server, Serving, assemble, serve
    from cascadeserve.api.steps import plan, profile, simulate

__all__ = ["DEFAULTS", "ServeConfig", "Server", "Serving", "assemble", "plan", "profile", "serve", "simulate"]

_WHERE = {
    "DEFAULTS": "config",
    "ServeConfig": "config",
    "Server": "serving",
    "Serving": "serving",
    "assemble": "serving",
    "serve": "serving",
    "plan": "steps",
    "profile": "steps",
    "simulate": "steps",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"cascadeserve.api.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'cascadeserve.api' has no attribute {name!r}")
