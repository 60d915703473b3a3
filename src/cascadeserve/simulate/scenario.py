"""What one simulation replays: a plan, a profile and the run's hooks, read by both engines.

:func:`cascadeserve.simulate.simulate` builds it; the reference (:mod:`cascadeserve.simulate.reference`) and the
compiled engine (:mod:`cascadeserve.simulate.compiled`) read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cascadeserve.plan import GearPlan
from cascadeserve.policy import AdmissionPolicy, GearPolicy, GearSchedule, PlanTables
from cascadeserve.policy.adaptive import BatchLimit
from cascadeserve.policy.cache import PredictionCache
from cascadeserve.policy.tuning import OnlineTuning
from cascadeserve.profile import Profile
from cascadeserve.profile.slowdown import Slowdowns

__all__ = ["Scenario"]


@dataclass(frozen=True)
class Scenario:
    """What one simulation replays: a plan, a profile and the run's hooks (fresh ones per run: some hold state)."""

    profile: Profile
    plan: GearPlan
    tables: PlanTables
    gear_policy: GearPolicy
    record_batches: bool = False
    batch_limit: BatchLimit | None = None
    gear_schedule: GearSchedule | None = None
    cache: PredictionCache[Any] | None = None
    slowdowns: Slowdowns | None = None
    admission: AdmissionPolicy | None = None
    tuning: OnlineTuning | None = None

    @property
    def tick_s(self) -> float:
        return self.plan.tick_ms / 1000.0
