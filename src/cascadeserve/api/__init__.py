"""The library's composition root: what the commands do, as functions and classes a user imports.

``cascadeserve.ServeConfig`` holds every serving setting once; ``cascadeserve.Server`` runs a server for a
``with`` block; :func:`~cascadeserve.api.serving.serve` runs one until a signal (``cascadeserve serve``)."""

from __future__ import annotations

from cascadeserve.api.config import DEFAULTS, ServeConfig
from cascadeserve.api.serving import Server, Serving, assemble, serve

__all__ = ["DEFAULTS", "ServeConfig", "Server", "Serving", "assemble", "serve"]
