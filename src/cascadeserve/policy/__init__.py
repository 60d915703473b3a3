"""The pure policy core, shared unchanged by the simulator and the runtime.

Nothing here does I/O, reads a clock or imports asyncio, Ray or a web framework (an import-linter contract
enforces it). Callers pass time in; decisions come back as plain values.
"""

from __future__ import annotations

from cascadeserve.policy.aimd import AimdBatchLimit, AimdDecision
from cascadeserve.policy.batching import BatchTrigger, choose_replica, earliest_replica
from cascadeserve.policy.forwarding import LAST_STAGE, is_sure, sure_mask
from cascadeserve.policy.gears import GearDecision, GearSelector
from cascadeserve.policy.qps import QpsMeter
from cascadeserve.policy.routing import SmoothWeightedRoundRobin, swrr_sequence
from cascadeserve.policy.schedule import GearSchedule
from cascadeserve.policy.tables import PlanTables, Route

__all__ = [
    "LAST_STAGE",
    "AimdBatchLimit",
    "AimdDecision",
    "BatchTrigger",
    "GearDecision",
    "GearSchedule",
    "GearSelector",
    "PlanTables",
    "QpsMeter",
    "Route",
    "SmoothWeightedRoundRobin",
    "choose_replica",
    "earliest_replica",
    "is_sure",
    "sure_mask",
    "swrr_sequence",
]
