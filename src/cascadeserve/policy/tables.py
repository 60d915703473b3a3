"""A gear plan compiled into lookup tables for the hot paths of the simulator and the runtime.

:class:`PlanTables` turns the plan's names into integer indices once: replica ``r`` serves model row
``replica_row[r]`` on device ``replica_device[r]``; for gear ``g`` and model row ``m``, ``threshold[g, m]`` is the
stage's certainty threshold (``-inf`` on the last stage, so it answers everything), ``next_row[g, m]`` the model
that uncertain samples go to (``-1`` after the last stage), and ``routes(g, m)`` the replicas of ``m`` with their
shares. Model rows are whatever the caller maps model names to: the profile's rows in the simulator and in
emulation, the runtime's own model registry otherwise.

The tables also answer the plan's stateless questions for both engines: each stage's exit decision for a batch
(:meth:`PlanTables.exits`, per-sample gears or one gear), Q0 for the hysteresis (:meth:`PlanTables.q0`), the
batch trigger of every replica in every gear (its minimum queue; its batch cap, the smaller of the replica's own
``max_batch`` and the plan-wide one, which also bounds a draining queue; and
:data:`~cascadeserve.plan.DEFAULT_MAX_WAIT_MS` when the plan sets no max wait, so that no queue can starve), and
the replica that takes over from a lost one (:meth:`PlanTables.failover`). The stateful replica choice (smooth
weighted round-robin by the gear's shares) is :class:`Routers`, one per run or plan generation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from cascadeserve.plan import DEFAULT_MAX_WAIT_MS, GearPlan
from cascadeserve.policy.batching import BatchTrigger, drain_trigger
from cascadeserve.policy.forwarding import LAST_STAGE, sure_list, sure_mask
from cascadeserve.policy.gears import GearPolicy, GearSelector
from cascadeserve.policy.routing import SmoothWeightedRoundRobin
from cascadeserve.policy.schedule import GearSchedule
from cascadeserve.policy.thresholds import ThresholdDecision

__all__ = ["PlanTables", "Route", "Routers"]


@dataclass(frozen=True)
class Route:
    """The replicas that serve one model in one gear, and their shares of its load."""

    replicas: tuple[int, ...]
    shares: tuple[float, ...]

    def router(self) -> SmoothWeightedRoundRobin:
        return SmoothWeightedRoundRobin(self.shares)


class PlanTables:
    """Integer-indexed view of a :class:`GearPlan` (routers with state are made per run). Only the thresholds may
    change after construction, by applying a :class:`ThresholdDecision` (online tuning); everything else is fixed."""

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
        # Whose router a sample forwarded from replica r uses (its *lane*). A router's state (where it stands in
        # its round-robin) lives in the process that picks: on the embedded runtime that is one process, so one
        # router per route serves every forward (lane 0); on Ray each device's server forwards the samples its
        # batches were unsure of with routers of its own, so the lane is the device. Two servers alternating
        # independently send the next stage's samples to the same replica more often than one router alternating
        # for both, and their queues wait longer: the simulator replays that, rather than the one-router order
        # a Ray plan never has. New requests are routed by the front end alone (one process): always lane 0.
        self.forward_lane = (
            self.replica_device.copy() if plan.backend == "ray" else np.zeros(self.n_replicas, dtype=np.int64)
        )
        self.threshold = np.full((g_count, n_rows), LAST_STAGE)
        self.next_row = np.full((g_count, n_rows), -1, dtype=np.int64)
        self.stage = np.full((g_count, n_rows), -1, dtype=np.int64)
        self.n_gears = g_count
        self.first_row = np.empty(g_count, dtype=np.int64)
        self._routes: dict[tuple[int, int], Route] = {}
        self._min_queue = np.ones((g_count, self.n_replicas), dtype=np.int64)
        # The batch cap of every replica in every gear (schema 3: per replica, bounded by the plan-wide one).
        caps: list[list[int | None]] = [[plan.max_batch] * self.n_replicas for _ in range(g_count)]
        # A queue short of its minimum must not wait forever for samples that may never come (a lone request at
        # low load): without a max wait in the plan, the documented default applies. It changes nothing where the
        # minimum queue length is 1, which fires on any sample.
        max_wait_s = (DEFAULT_MAX_WAIT_MS if plan.max_wait_ms is None else plan.max_wait_ms) / 1000.0
        self._gear_rows: list[tuple[int, ...]] = []
        for g, gear in enumerate(plan.gears):
            rows = [model_rows[m] for m in gear.models]
            self._gear_rows.append(tuple(rows))
            self.first_row[g] = rows[0]
            for k, m in enumerate(rows):
                self.stage[g, m] = k
                if k < len(rows) - 1:
                    self.threshold[g, m] = gear.thresholds[k]
                    self.next_row[g, m] = rows[k + 1]
            routed: dict[str, list[tuple[int, float]]] = {}  # per model, its replicas with a share, in plan order
            for gr in gear.replicas:  # one pass (the planner's SP4 builds these tables for every check it simulates)
                i = plan.replica_index[gr.id]
                self._min_queue[g, i] = gr.min_queue
                caps[g][i] = gr.cap(plan.max_batch)
                if gr.share > 0:
                    routed.setdefault(gr.model, []).append((i, gr.share))
            for name, m in zip(gear.models, rows, strict=True):
                reps = routed.get(name, [])
                self._routes[(g, m)] = Route(tuple(r for r, _ in reps), tuple(s for _, s in reps))
        self.triggers: tuple[tuple[BatchTrigger, ...], ...] = tuple(
            tuple(BatchTrigger(int(q), max_wait_s, c) for q, c in zip(self._min_queue[g], caps[g], strict=True))
            for g in range(g_count)
        )
        # A draining queue still respects its replica's cap: the cap is a limit of the server, not of the gear.
        self._drain: tuple[tuple[BatchTrigger, ...], ...] = tuple(
            tuple(drain_trigger(c) for c in caps[g]) for g in range(g_count)
        )
        self._first_stage = [self._routes[(g, int(self.first_row[g]))].replicas for g in range(g_count)]
        # Each gear's top is its run's (neighbouring gears that serve alike, GearPlan.gear_runs): the selector then
        # answers only the first gear of a run, so moving between identical gears is no switch (no new generation,
        # nothing counted) in the simulator and in every runtime alike.
        self.canonical = np.empty(g_count, dtype=np.int64)  # gear -> the first gear of its run
        tops = [0.0] * g_count
        for first, last in plan.gear_runs:
            self.canonical[first : last + 1] = first
            tops[first : last + 1] = [plan.gears[last].qps_high] * (last - first + 1)
        self.selector = GearSelector(tops, alpha=plan.alpha, qps_scale=plan.qps_scale)
        self._thr_lists: list[list[float]] = self.threshold.tolist()

    def thresholds_of(self, gear: int) -> tuple[float, ...]:
        """The thresholds in force for ``gear``'s stages but the last (the plan's, or the last re-tuned ones)."""
        rows = self._gear_rows[gear]
        return tuple(float(self.threshold[gear, m]) for m in rows[:-1])

    def gear_rows(self, gear: int) -> tuple[int, ...]:
        """``gear``'s cascade as model rows, first stage first."""
        return self._gear_rows[gear]

    def apply_thresholds(self, d: ThresholdDecision) -> None:
        """Apply a tuning decision: ``d.gear``'s thresholds become ``d.new`` in place; every exit decided from now on
        uses them, samples in flight included; queues and routers are untouched, so nothing is dropped. The last
        stage keeps answering everything."""
        gear, thresholds = d.gear, d.new
        rows = self._gear_rows[gear]
        if len(thresholds) != len(rows) - 1:
            raise ValueError(f"gear {gear} has {len(rows) - 1} thresholds, got {len(thresholds)}")
        for m, t in zip(rows[:-1], thresholds, strict=True):
            self.threshold[gear, m] = t
            self._thr_lists[gear][m] = t

    def route(self, gear: int, row: int) -> Route:
        return self._routes[(gear, row)]

    def routes(self) -> dict[tuple[int, int], Route]:
        """Every ``(gear, model row)`` route of the plan (a copy)."""
        return dict(self._routes)

    def first_stage_replicas(self, gear: int) -> tuple[int, ...]:
        return self._first_stage[gear]

    def gear_policy(self, schedule: GearSchedule | None = None) -> GearPolicy:
        """The producer's gear decision for this plan (raises ``ValueError`` when ``schedule`` names a gear the
        plan does not have). A schedule's gears are read as the first gear of their run, as the selector's are."""
        policy = GearPolicy(self.selector, schedule)
        if schedule is None or not np.any(self.canonical[schedule.gears] != schedule.gears):
            return policy
        return GearPolicy(self.selector, GearSchedule(self.canonical[schedule.gears]))

    def q0(self, gear: int, queue_length: Callable[[int], int]) -> int:
        """The hysteresis input: the first stage's queue length in ``gear``, summed over its replicas."""
        return sum([queue_length(r) for r in self._first_stage[gear]])

    def exits(self, row: int, certainty: np.ndarray, gears: np.ndarray | None) -> np.ndarray:
        """Which samples of a batch of model ``row`` exit (are answered) there: ``gears`` holds each sample's gear,
        or is ``None`` when the plan has one gear."""
        if gears is None or self.n_gears == 1:
            return sure_mask(certainty, float(self.threshold[0, row]))
        return sure_mask(certainty, self.threshold[gears, row])

    def exits_list(self, row: int, certainty: list[float], gears: list[int] | None) -> list[bool]:
        """:meth:`exits` for a short Python list (the engines' per-sample paths on small batches)."""
        thr = self._thr_lists
        if gears is None or self.n_gears == 1:
            return sure_list(certainty, thr[0][row])
        return sure_list(certainty, [thr[g][row] for g in gears])

    def triggers_for(self, gear: int, *, draining: bool = False) -> tuple[BatchTrigger, ...]:
        """Every replica's trigger in ``gear``, or the drain trigger when the queues are draining."""
        return self._drain[gear] if draining else self.triggers[gear]

    def batch_cap(self, gear: int, replica: int) -> int | None:
        """The most samples one batch of ``replica`` takes in ``gear`` (``None``: the whole queue)."""
        return self.triggers[gear][replica].max_batch

    def failover(self, gear: int, replica: int, lost_device: int) -> int:
        """The replica that takes the samples of ``replica`` when its device is lost: the next replica of the same
        model in ``gear``'s route (by replica index, wrapping around) on another device, or ``replica`` itself
        when no other device serves the model (the caller then waits for the device to come back)."""
        reps = self.route(gear, int(self.replica_row[replica])).replicas
        others = [r for r in reps if int(self.replica_device[r]) != lost_device]
        if not others:
            return replica
        later = [r for r in others if r > replica]
        return (later or others)[0]

    def new_routers(self) -> Routers:
        """Fresh routers (with their own state) for every (gear, model row)."""
        return Routers(self)


class Routers:
    """The replica choice of one run (simulator) or one plan generation (runtime): per (gear, model row), the
    smooth weighted round-robin over the route's replicas by their shares. :meth:`pick` routes one sample,
    :meth:`split` many at once; both walk the same sequence, so the engines make identical choices."""

    __slots__ = ("_first", "_lane", "_lanes", "_next", "_routers", "tables")

    def __init__(self, tables: PlanTables) -> None:
        self.tables = tables
        self._routers: dict[tuple[int, int], tuple[tuple[int, ...], SmoothWeightedRoundRobin]] = {
            key: (route.replicas, route.router()) for key, route in tables.routes().items()
        }
        # forwards of the other lanes (PlanTables.forward_lane: a Ray server's own routers), made on first use
        self._lanes: dict[tuple[int, int, int], tuple[tuple[int, ...], SmoothWeightedRoundRobin]] = {}
        self._lane: list[int] = tables.forward_lane.tolist()
        # Plain lists: the runtime routes every request through these, and numpy scalar indexing costs more.
        self._first: list[int] = tables.first_row.tolist()
        self._next: list[list[int]] = tables.next_row.tolist()

    def pick(self, gear: int, row: int) -> int:
        """The replica of model ``row`` that the next sample in ``gear`` goes to."""
        reps, router = self._routers[(gear, row)]
        return reps[0] if len(reps) == 1 else reps[router.pick()]

    def admit(self, gear: int) -> int:
        """The first-stage replica for a new request admitted under ``gear``."""
        return self.pick(gear, self._first[gear])

    def forward(self, gear: int, row: int, source: int | None = None) -> int:
        """The next stage's replica for a sample that model ``row`` was unsure of, in ``gear``'s cascade; ``source``
        is the replica whose batch was unsure (its lane picks the router: :attr:`PlanTables.forward_lane`)."""
        nxt = self._next[gear][row]
        lane = 0 if source is None else self._lane[source]
        if lane == 0:
            return self.pick(gear, nxt)
        entry = self._lanes.get((gear, nxt, lane))
        if entry is None:
            route = self.tables.route(gear, nxt)
            entry = self._lanes[(gear, nxt, lane)] = (route.replicas, route.router())
        reps, router = entry
        return reps[0] if len(reps) == 1 else reps[router.pick()]

    def split(self, gear: int, row: int, ids: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """Route the samples ``ids`` to model ``row``'s replicas in ``gear``; the non-empty groups, in route order."""
        reps, router = self._routers[(gear, row)]
        if len(reps) == 1:
            return [(reps[0], ids)]
        if len(ids) <= 32:
            # Small groups (most forwarded batches): a Python pass beats one boolean mask per replica.
            return [(r, np.array(b, dtype=np.int64)) for r, b in self.split_list(gear, row, ids.tolist())]
        picks = router.pick_many(len(ids))
        return [(rr, sub) for j, rr in enumerate(reps) if len(sub := ids[picks == j])]

    def forward_split(self, row: int, ids: np.ndarray, gears: np.ndarray | None) -> list[tuple[int, np.ndarray]]:
        """:meth:`forward` for many samples that model ``row`` was unsure of (``gears``: each one's gear, ``None``
        for a one-gear plan): each is routed by its own gear's router, and each replica's group keeps the order of
        ``ids``, as when they are forwarded one by one."""
        if gears is None or gears.min() == gears.max():
            g = 0 if gears is None else int(gears[0])
            return self.split(g, self._next[g][row], ids)
        dest = np.empty(len(ids), dtype=np.int64)
        for g in np.unique(gears).tolist():
            for rr, at in self.split(g, self._next[g][row], np.flatnonzero(gears == g)):
                dest[at] = rr
        return [(rr, ids[dest == rr]) for rr in np.unique(dest).tolist()]

    def forward_split_list(self, row: int, ids: list[int], gears: list[int] | None) -> list[tuple[int, list[int]]]:
        """:meth:`forward_split` for a short Python list (the simulator's per-sample path)."""
        if gears is None:
            return self.split_list(0, self._next[0][row], ids)
        dest: dict[int, list[int]] = {}
        for i, g in zip(ids, gears, strict=True):
            dest.setdefault(self.forward(g, row), []).append(i)
        return list(dest.items())

    def admit_split(self, gear: int, ids: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """:meth:`admit` for many new requests at once (the simulator's arrivals of one tick)."""
        return self.split(gear, self._first[gear], ids)

    def split_list(self, gear: int, row: int, ids: list[int]) -> list[tuple[int, list[int]]]:
        """:meth:`split` for a short Python list (the simulator's per-sample path)."""
        reps, router = self._routers[(gear, row)]
        if len(reps) == 1:
            return [(reps[0], ids)]
        buckets: list[list[int]] = [[] for _ in reps]
        for i in ids:
            buckets[router.pick()].append(i)
        return [(reps[j], b) for j, b in enumerate(buckets) if b]
