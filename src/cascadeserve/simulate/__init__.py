"""The event simulator: replays a trace against a gear plan using the shared policy core."""

from __future__ import annotations

from cascadeserve.simulate.engine import Simulator, simulate
from cascadeserve.simulate.result import BatchRecord, SimResult

__all__ = ["BatchRecord", "SimResult", "Simulator", "simulate"]
