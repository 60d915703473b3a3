"""A gear plan compiled into lookup tables for the hot paths of the simulator and the runtime.

:class:`PlanTables` turns the plan's names into integer indices once: replica ``r`` serves model row
``replica_row[r]`` on device ``replica_device[r]``; for gear ``g`` and model row ``m``, ``threshold[g, m]`` is the
stage's certainty threshold (``-inf`` on the last stage, so it answers everything), ``next_row[g, m]`` the model
that uncertain samples go to (``-1`` after the last stage), and ``routes(g, m)`` the replicas of ``m`` with their
shares. Model rows are whatever the caller maps model names to: the profile's rows in the simulator and in
emulation, the runtime's own model registry otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from cascadeserve.plan import GearPlan
from cascadeserve.policy.batching import BatchTrigger
from cascadeserve.policy.forwarding import LAST_STAGE
from cascadeserve.policy.gears import GearSelector
from cascadeserve.policy.routing import SmoothWeightedRoundRobin

__all__ = ["PlanTables", "Route"]


@dataclass(frozen=True)
class Route:
    """The replicas that serve one model in one gear, and their shares of its load."""

    replicas: tuple[int, ...]
    shares: tuple[float, ...]

    def router(self) -> SmoothWeightedRoundRobin:
        return SmoothWeightedRoundRobin(self.shares)


class PlanTables:
    """Integer-indexed view of a :class:`GearPlan` (immutable; routers with state are made per run)."""

    def __init__(self, plan: GearPlan, model_rows: Mapping[str, int]) -> None:
        self.plan = plan
        n_rows = max(model_rows.values()) + 1
        g_count = len(plan.gears)
        self.n_replicas = len(plan.replicas)
        self.n_devices = len(plan.devices)
        self.replica_row = np.array([model_rows[r.model] for r in plan.replicas], dtype=np.int64)
        self.replica_device = np.array([plan.device_index[r.device] for r in plan.replicas], dtype=np.int64)
        self.device_replicas: tuple[tuple[int, ...], ...] = tuple(
            tuple(int(r) for r in np.flatnonzero(self.replica_device == d)) for d in range(self.n_devices)
        )
        self.threshold = np.full((g_count, n_rows), LAST_STAGE)
        self.next_row = np.full((g_count, n_rows), -1, dtype=np.int64)
        self.stage = np.full((g_count, n_rows), -1, dtype=np.int64)
        self.first_row = np.empty(g_count, dtype=np.int64)
        self._routes: dict[tuple[int, int], Route] = {}
        self._min_queue = np.ones((g_count, self.n_replicas), dtype=np.int64)
        max_wait_s = None if plan.max_wait_ms is None else plan.max_wait_ms / 1000.0
        for g, gear in enumerate(plan.gears):
            rows = [model_rows[m] for m in gear.models]
            self.first_row[g] = rows[0]
            for k, m in enumerate(rows):
                self.stage[g, m] = k
                if k < len(rows) - 1:
                    self.threshold[g, m] = gear.thresholds[k]
                    self.next_row[g, m] = rows[k + 1]
            for gr in gear.replicas:
                self._min_queue[g, plan.replica_index[gr.id]] = gr.min_queue
            for name, m in zip(gear.models, rows, strict=True):
                reps = [(plan.replica_index[gr.id], gr.share) for gr in gear.replicas_of(name) if gr.share > 0]
                self._routes[(g, m)] = Route(tuple(r for r, _ in reps), tuple(s for _, s in reps))
        self.triggers: tuple[tuple[BatchTrigger, ...], ...] = tuple(
            tuple(BatchTrigger(int(q), max_wait_s, plan.max_batch) for q in self._min_queue[g]) for g in range(g_count)
        )
        self.selector = GearSelector([g.qps_high for g in plan.gears], alpha=plan.alpha, qps_scale=plan.qps_scale)

    @property
    def n_gears(self) -> int:
        return len(self.plan.gears)

    def route(self, gear: int, row: int) -> Route:
        return self._routes[(gear, row)]

    def first_stage_replicas(self, gear: int) -> tuple[int, ...]:
        return self.route(gear, int(self.first_row[gear])).replicas

    def new_routers(self) -> dict[tuple[int, int], SmoothWeightedRoundRobin]:
        """Fresh routers (with their own state) for every (gear, model row)."""
        return {key: route.router() for key, route in self._routes.items()}
