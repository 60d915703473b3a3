"""Gear plans: the planner's output and the runtime's input.

A :class:`GearPlan` is frozen data with a JSON round trip and a schema version:

* ``devices``: name, memory and kind of each device;
* ``replicas``: the placement, one entry per model replica, with an id ``model@device``;
* ``gears``: for each QPS range ``[qps_low, qps_high)``, the cascade (models and thresholds) and, per replica
  that serves it (a :class:`GearReplica`: ``model``, ``device``), the minimum queue length that triggers a batch
  and the replica's share of its model's load;
* the SLO it was planned for, and each gear's predicted p95, accuracy and busiest device's busy fraction;
* online knobs: the hysteresis factor ``alpha``, the producer tick, a batch ``max_wait_ms`` (when absent,
  :data:`DEFAULT_MAX_WAIT_MS`, so that a queue short of its minimum length never waits forever) and
  ``max_batch``, and ``qps_scale`` (the measured-QPS scaling of paper appendix C.2 for accuracy SLOs);
* ``batch_overhead_ms``: a deployment's fixed cost per batch beyond the model's runtime, for the simulator;
* ``max_busy``: the device headroom the planner kept (each gear's busiest device at most this busy in SP4's
  simulation at its range's check load; 1, the default, asks for none); re-plans keep it;
* ``batching`` (``plan``, ``aimd`` or ``quantile``) and ``batch_target_ms``: Clipper's adaptive batching
  (:mod:`cascadeserve.policy.adaptive`); ``plan``, the default, is the minimum queue lengths alone.

Schema versions: version 3 (written today) adds an optional batch cap per replica in each gear
(``GearReplica.max_batch``: the most samples one batch of that replica takes; the planner sets it per model, see
:mod:`cascadeserve.planner.problem`). Version 2 lists each gear's replicas as objects with ``model`` and ``device``
fields and has no per-replica cap; such files load unchanged (no cap beyond the plan-wide ``max_batch``). Version 1
keyed them by ``"model@device"`` strings; such files still load (the keys are split into structured entries, and a
key that is not ``model@device`` is an error naming the gear and the key).

Validation happens twice: :class:`GearPlan` checks itself (ranges contiguous, shares sum to one per model,
replicas exist), and :meth:`GearPlan.check_against` checks it against a profile (models exist, memory fits,
naming the device that overflows).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from cascadeserve.cascade import Cascade
from cascadeserve.errors import PlanError
from cascadeserve.profile import ModelProfile, Profile, Vote, with_votes

__all__ = [
    "DEFAULT_MAX_WAIT_MS",
    "SCHEMA_VERSION",
    "SLO",
    "UPSTREAM_KIND",
    "Device",
    "Gear",
    "GearPlan",
    "GearReplica",
    "Replica",
    "fixed_plan",
    "load_plan",
    "plan_profile",
    "with_upstream_devices",
]

SCHEMA_VERSION = 3
_READABLE_VERSIONS = (1, 2, 3)
DEFAULT_MAX_WAIT_MS = 100.0
"""The max wait of a plan that sets none: a queue holding fewer samples than its gear's minimum queue length fires
once its oldest sample has waited this long (one producer tick at the default ``tick_ms``). Without it a lone
request under a gear with a minimum queue above 1 would wait for company that may never come. The simulator and
every runtime apply it alike (:class:`cascadeserve.policy.PlanTables`)."""
_SHARE_TOL = 1e-6
_SAME_SHARE_TOL = 1e-9
"""Two replica shares this close serve alike (:meth:`Gear.serves_like`): a weighted round-robin over them picks the
same replicas for a billion requests."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Device(_Frozen):
    name: str = Field(min_length=1)
    memory_mb: float = Field(gt=0)
    kind: str = "cpu"
    # The upstream stage this device stands for: a model another server runs (models/upstream.py), whose batches
    # wait on the network. It holds that model alone, and the model no other device; None: a device of this host.
    upstream: str | None = None

    def holds(self, model: ModelProfile) -> bool:
        """Whether ``model`` may be placed here: an upstream stage on its own device only, nothing else there."""
        return model.name == self.upstream if self.upstream is not None else not model.upstream


UPSTREAM_KIND = "upstream"


def with_upstream_devices(profile: Profile, devices: Sequence[Device]) -> tuple[Device, ...]:
    """``devices`` (this host's) plus a device of its own for each upstream stage of ``profile`` they lack.

    An upstream stage waits on another server: on one of this host's devices it would hold that device idle for
    every batch, and its capacity is the other server's (its concurrency, measured in its profiled runtimes), not
    a share of ours. So ``--devices N`` counts this host's devices, and every plan adds one per upstream stage."""
    have = {d.upstream for d in devices}
    extra = [
        Device(name=f"upstream-{m.name}", memory_mb=max(m.memory_mb, 1.0), kind=UPSTREAM_KIND, upstream=m.name)
        for m in profile.models
        if m.upstream and m.name not in have
    ]
    return (*devices, *extra)


class Replica(_Frozen):
    """One model loaded on one device: an entry of the plan's placement."""

    model: str = Field(min_length=1)
    device: str = Field(min_length=1)

    @property
    def id(self) -> str:
        """``"model@device"``: a label for messages and summaries (never parsed back)."""
        return f"{self.model}@{self.device}"


class GearReplica(Replica):
    """A placed replica's settings inside one gear: its batch trigger, its share of its model's load, and its batch
    cap (``max_batch``: the most samples one batch takes; ``None``: only the plan-wide ``max_batch`` applies)."""

    min_queue: int = Field(default=1, ge=1)
    share: float = Field(ge=0.0, le=1.0)
    max_batch: int | None = Field(default=None, ge=1)

    def cap(self, plan_max_batch: int | None) -> int | None:
        """The batch cap that applies to this replica: the smaller of its own and the plan-wide one."""
        if self.max_batch is None:
            return plan_max_batch
        return self.max_batch if plan_max_batch is None else min(self.max_batch, plan_max_batch)


class SLO(_Frozen):
    """Either ``p95_ms`` (p95 latency ≤ value; maximise accuracy) or ``accuracy`` (≥ value; minimise latency)."""

    kind: Literal["p95_ms", "accuracy"]
    value: float = Field(gt=0)

    def __str__(self) -> str:
        return f"p95 ≤ {self.value:g} ms" if self.kind == "p95_ms" else f"accuracy ≥ {self.value:g}"


class Gear(_Frozen):
    qps_low: float = Field(ge=0)
    qps_high: float = Field(gt=0)
    models: tuple[str, ...] = Field(min_length=1)
    thresholds: tuple[float, ...] = ()
    replicas: tuple[GearReplica, ...]
    predicted_p95_ms: float | None = None
    predicted_accuracy: float | None = None
    # the busiest device's busy fraction in the planner's check of this gear at its range's top QPS (plan --max-busy)
    predicted_busy: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _check(self) -> Gear:
        if self.qps_high <= self.qps_low:
            raise ValueError(f"qps_high ({self.qps_high}) must exceed qps_low ({self.qps_low})")
        Cascade(self.models, self.thresholds)  # raises ValueError with a clear message
        seen: set[tuple[str, str]] = set()
        for r in self.replicas:
            if (r.model, r.device) in seen:
                raise ValueError(f"replica {r.id!r} is listed twice")
            seen.add((r.model, r.device))
            if r.model not in self.models:
                raise ValueError(f"replica {r.id!r} serves a model that is not in this gear's cascade")
        for m in self.models:
            total = sum(r.share for r in self.replicas_of(m))
            if abs(total - 1.0) > _SHARE_TOL:
                raise ValueError(f"the shares of model {m!r}'s replicas sum to {total:g}, not 1")
        return self

    @property
    def cascade(self) -> Cascade:
        return Cascade(self.models, self.thresholds)

    def serves_like(self, other: Gear) -> bool:
        """Whether ``other`` serves exactly as this gear does: the same cascade, thresholds and replica settings
        (batch triggers, shares, caps). Such gears differ at most in their QPS range and predictions, so moving
        between them changes nothing and is no gear switch (:attr:`GearPlan.gear_runs`). Shares count as equal
        within ``_SAME_SHARE_TOL``: the planner balances each range with its own LP solve, whose shares for the
        same placement differ in the last bits."""
        if (self.models, self.thresholds) != (other.models, other.thresholds) or len(self.replicas) != len(
            other.replicas
        ):
            return False
        return all(
            (a.model, a.device, a.min_queue, a.max_batch) == (b.model, b.device, b.min_queue, b.max_batch)
            and abs(a.share - b.share) <= _SAME_SHARE_TOL
            for a, b in zip(self.replicas, other.replicas, strict=True)
        )

    def replicas_of(self, model: str) -> tuple[GearReplica, ...]:
        """This gear's entries for ``model``'s replicas, in plan order (empty if the gear does not use it)."""
        return tuple(r for r in self.replicas if r.model == model)

    def replica(self, model: str, device: str) -> GearReplica:
        """The entry of ``model``'s replica on ``device``; ``KeyError`` naming both if this gear has none."""
        for r in self.replicas:
            if r.model == model and r.device == device:
                return r
        raise KeyError(f"gear {self.qps_low:g}-{self.qps_high:g} QPS has no replica of {model!r} on {device!r}")


def _upgrade_v1_gear(gear: object, index: int) -> object:
    """Schema 1 keyed a gear's replicas by ``"model@device"``: turn them into :class:`GearReplica` entries."""
    if not isinstance(gear, dict) or not isinstance(gear.get("replicas"), dict):
        return gear
    entries: list[object] = []
    for key, value in gear["replicas"].items():
        model, sep, device = str(key).partition("@")
        if not sep or not model or not device:
            raise ValueError(
                f"gears.{index}.replicas: key {key!r} is not of the form 'model@device' (schema-1 plans key "
                f"each gear's replicas by model@device)"
            )
        entries.append({**value, "model": model, "device": device} if isinstance(value, dict) else value)
    return {**gear, "replicas": entries}


class GearPlan(_Frozen):
    schema_version: Literal[3] = 3
    profile: str
    devices: tuple[Device, ...] = Field(min_length=1)
    replicas: tuple[Replica, ...] = Field(min_length=1)
    gears: tuple[Gear, ...] = Field(min_length=1)
    slo: SLO | None = None
    alpha: float = Field(default=8.0, ge=0)
    tick_ms: float = Field(default=100.0, gt=0)
    # The QPS meter reads over the last tick, stretched back over earlier ticks until it holds this many arrivals
    # (at most policy.qps.MAX_QPS_WINDOW_S): at LLM rates one tick holds 0 or 1 and a gear picked from it is noise.
    # 0: one tick, the paper's meter (and plans made before this field).
    qps_min_arrivals: int = Field(default=0, ge=0)
    max_wait_ms: float | None = Field(default=None, gt=0)
    max_batch: int | None = Field(default=None, ge=1)
    qps_scale: float = Field(default=1.0, gt=0)
    # Fixed time every batch costs on top of the model's runtime (dispatch, event-loop and thread wake-ups),
    # measured once per deployment (``eval fidelity --calibrate``); the simulator adds it to each batch.
    batch_overhead_ms: float = Field(default=0.0, ge=0)
    # Where the plan is served: on "ray" every stage a request passes that sits in another process than the last
    # costs a hop (an actor call and its answer's way back), ``hop_ms`` each, which the simulator adds to the
    # request's latency (simulate/hops.py; latency only, no device time). 0 with "ray": the profile's ray_hop_ms.
    # ``hop_p95_ms`` above ``hop_ms``: each hop is drawn from a distribution of that mean and p95 (the measured tail).
    backend: Literal["local", "ray"] = "local"
    hop_ms: float = Field(default=0.0, ge=0)
    hop_p95_ms: float = Field(default=0.0, ge=0)
    # Adaptive batching (policy/adaptive.py): "plan" keeps the planner's triggers only; "aimd" and "quantile" add
    # Clipper's per-replica cap, sized against batch_target_ms (default: derived from the p95 SLO).
    batching: Literal["plan", "aimd", "quantile"] = "plan"
    batch_target_ms: float | None = Field(default=None, gt=0)
    # Online threshold tuning (serve --tune): the share of early exits audited (also run through the later stages,
    # off the critical path). The planner sized the plan for that extra work; serve --tune audits this share by
    # default. 0: planned without audits. (An optional field with a default: plans without it still load.)
    audit_fraction: float = Field(default=0.0, ge=0.0, le=1.0)
    # Device headroom the planner kept (Planner(max_busy=...)): every gear's busiest device was simulated at most
    # this busy at its range's check load. Re-plans (serve --replan) keep it. 1: no headroom asked for.
    max_busy: float = Field(default=1.0, gt=0.0, le=1.0)
    notes: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: object) -> object:
        """Read schema-1 data (replicas keyed by ``"model@device"``) and schema-2 data (no per-replica batch cap)
        as schema 3."""
        if not isinstance(data, dict):
            return data
        version = data.get("schema_version", 1)
        if version == 1:
            gears = data.get("gears")
            if isinstance(gears, list | tuple):
                data = {**data, "gears": [_upgrade_v1_gear(g, i) for i, g in enumerate(gears)]}
            return {**data, "schema_version": 3}
        if version == 2:
            return {**data, "schema_version": 3}
        return data

    @model_validator(mode="after")
    def _check(self) -> GearPlan:
        names = [d.name for d in self.devices]
        if len(set(names)) != len(names):
            raise ValueError("device names must be unique")
        ids = [r.id for r in self.replicas]
        if len(set(ids)) != len(ids):
            raise ValueError("a model has two replicas on one device")
        for r in self.replicas:
            if r.device not in names:
                raise ValueError(f"replica {r.id!r} is on unknown device {r.device!r}")
        if self.gears[0].qps_low != 0:
            raise ValueError("the first gear must start at qps_low = 0")
        for a, b in zip(self.gears, self.gears[1:], strict=False):
            if abs(a.qps_high - b.qps_low) > 1e-9:
                raise ValueError(f"gear ranges must be contiguous: {a.qps_high:g} is followed by {b.qps_low:g}")
        for g in self.gears:
            for gr in g.replicas:
                if gr.id not in ids:
                    raise ValueError(f"gear {g.qps_low:g}-{g.qps_high:g} QPS names unknown replica {gr.id!r}")
        return self

    # -- derived views --------------------------------------------------------------------------------------
    @cached_property
    def replica_index(self) -> dict[str, int]:
        return {r.id: i for i, r in enumerate(self.replicas)}

    @cached_property
    def device_index(self) -> dict[str, int]:
        return {d.name: i for i, d in enumerate(self.devices)}

    @property
    def max_qps(self) -> float:
        return self.gears[-1].qps_high

    @property  # not cached: ``model_copy`` would carry a cached value over to a copy with other gears
    def gear_runs(self) -> tuple[tuple[int, int], ...]:
        """The plan's *distinct* gears: each run of neighbouring gears that serve alike (:meth:`Gear.serves_like`),
        as its first and last gear index, lowest QPS first. The planner often gives several neighbouring ranges the
        same gear; the plan keeps one gear per range (so old plans and per-range notes stay as they are), and the
        gear selector, the switch counts and the plots treat each run as one gear."""
        runs: list[tuple[int, int]] = []
        for i, g in enumerate(self.gears):
            # against the run's first gear, the one served: shares equal within a tolerance cannot drift along a run
            if runs and self.gears[runs[-1][0]].serves_like(g):
                runs[-1] = (runs[-1][0], i)
            else:
                runs.append((i, i))
        return tuple(runs)

    def models(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.model for r in self.replicas))

    # -- validation against a profile -----------------------------------------------------------------------
    def check_against(self, profile: Profile, *, path: str | Path | None = None) -> None:
        """Raise :class:`PlanError` if the plan names models the profile lacks, or overfills a device."""
        known = set(profile.model_names)
        for r in self.replicas:
            if r.model not in known:
                raise PlanError(
                    f"replica {r.id!r} names model {r.model!r}, which profile {profile.name!r} does "
                    f"not have (it has {', '.join(profile.model_names)})",
                    path=path,
                )
        for g in self.gears:
            for m in g.models:
                if m not in known:
                    raise PlanError(f"gear {g.qps_low:g}-{g.qps_high:g} QPS uses unknown model {m!r}", path=path)
        # one pass over the replicas (the planner's SP4 simulates plans of dozens of replicas many times over)
        mem = {m.name: m.memory_mb for m in profile.models}
        per_device: dict[str, list[str]] = {}
        for r in self.replicas:
            per_device.setdefault(r.device, []).append(r.model)
        for d in self.devices:
            models = per_device.get(d.name, [])
            if d.upstream is not None and any(m != d.upstream for m in models):
                raise PlanError(
                    f"device {d.name!r} stands for upstream stage {d.upstream!r} and holds only it, not "
                    f"{', '.join(sorted(set(models) - {d.upstream}))}",
                    path=path,
                )
            used = sum(mem[m] for m in models)
            if used > d.memory_mb + 1e-9:
                on = ", ".join(models)
                raise PlanError(
                    f"device {d.name!r} is overfilled: its replicas ({on}) need {used:g} MB but it has "
                    f"{d.memory_mb:g} MB",
                    path=path,
                )

    # -- JSON -----------------------------------------------------------------------------------------------
    def to_json(self, indent: int | None = 2) -> str:
        return self.model_dump_json(indent=indent)

    @classmethod
    def from_json(cls, text: str, *, path: str | Path | None = None) -> GearPlan:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise PlanError(f"invalid JSON: {e.msg}", path=path, line=e.lineno, column=e.colno) from None
        if isinstance(raw, dict) and raw.get("schema_version", 1) not in _READABLE_VERSIONS:
            raise PlanError(
                f"unsupported schema_version {raw.get('schema_version')!r}; this cascadeserve reads "
                f"versions {', '.join(map(str, _READABLE_VERSIONS))}",
                path=path,
            )
        try:
            return cls.model_validate(raw)
        except ValidationError as e:
            first = e.errors()[0]
            msg = str(first["msg"]).removeprefix("Value error, ")
            # an error raised for the whole plan either names its field itself (``gears.0.replicas: ...``) or not
            where = ".".join(str(p) for p in first["loc"]) or ("" if msg.startswith("gears.") else "plan")
            raise PlanError(f"{where}: {msg}" if where else msg, path=path) from None

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        try:
            p.write_text(self.to_json() + "\n", encoding="utf-8")
        except OSError as e:  # a missing folder or no permission is the user's to fix: no traceback
            raise PlanError(f"cannot write the plan: {e.strerror or e}", path=p) from None
        return p


def plan_profile(profile: Profile, plan: GearPlan) -> Profile:
    """``profile`` plus the vote stages (:mod:`cascadeserve.profile.vote`) that ``plan`` names: the profile the plan
    is checked, simulated and served with (a vote stage's records are derived from its members', never stored)."""
    votes = [v for m in plan.models() if (v := Vote.parse(m, profile.model_names)) is not None]
    return with_votes(profile, votes)


def load_plan(path: str | Path, profile: Profile | None = None) -> GearPlan:
    """Read a plan file, validate it, and (given a profile) check it against the profile."""
    p = Path(path)
    if not p.is_file():
        raise PlanError("plan file does not exist", path=p)
    plan = GearPlan.from_json(p.read_text(encoding="utf-8"), path=p)
    if profile is not None:
        plan.check_against(plan_profile(profile, plan), path=p)
    return plan


def fixed_plan(
    profile: Profile,
    cascade: Cascade,
    devices: Sequence[Device],
    *,
    max_qps: float = 1e9,
    min_queue: int = 1,
    slo: SLO | None = None,
    max_wait_ms: float | None = None,
    max_batch: int | None = None,
    batch_caps: Mapping[str, int] | None = None,
    batch_overhead_ms: float | None = None,
    backend: Literal["local", "ray"] = "local",
) -> GearPlan:
    """A one-gear plan: every cascade model on every device where it still fits, load split evenly; an upstream
    stage on a device of its own (:func:`with_upstream_devices`).

    Models are placed in cascade order, so when memory is short the earlier (cheaper) stages win the space.
    This is the hand-made plan for tests and baselines; the planner does better. ``batch_caps`` sets each named
    model's per-replica batch cap (e.g. :func:`cascadeserve.planner.default_batch_caps`, the planner's rule).
    ``batch_overhead_ms`` defaults to the profile's recorded per-batch overhead; a plan for the ``"ray"`` backend
    charges the profile's recorded ``ray_hop_ms`` (and its ``ray_hop_p95_ms``) per hop.
    """
    for m in cascade.models:
        profile.index(m)  # unknown model -> KeyError with the list of known ones
    devices = with_upstream_devices(profile, devices)
    replicas: list[Replica] = []
    for d in devices:
        free = d.memory_mb
        for m in cascade.models:
            need = profile.model(m).memory_mb
            if need <= free and d.holds(profile.model(m)):
                replicas.append(Replica(model=m, device=d.name))
                free -= need
    for m in cascade.models:
        if not any(r.model == m for r in replicas):
            raise PlanError(f"model {m!r} needs {profile.model(m).memory_mb:g} MB and fits on no device")
    per_model = {m: sum(r.model == m for r in replicas) for m in cascade.models}
    gear = Gear(
        qps_low=0.0,
        qps_high=max_qps,
        models=cascade.models,
        thresholds=cascade.thresholds,
        replicas=tuple(
            GearReplica(
                model=r.model,
                device=r.device,
                min_queue=min_queue,
                share=1.0 / per_model[r.model],
                max_batch=None if batch_caps is None else batch_caps.get(r.model),
            )
            for r in replicas
        ),
    )
    return GearPlan(
        profile=profile.name,
        devices=tuple(devices),
        replicas=tuple(replicas),
        gears=(gear,),
        slo=slo,
        max_wait_ms=max_wait_ms,
        max_batch=max_batch,
        batch_overhead_ms=profile.batch_overhead_ms if batch_overhead_ms is None else batch_overhead_ms,
        backend=backend,
        hop_ms=profile.ray_hop_ms if backend == "ray" else 0.0,
        hop_p95_ms=profile.ray_hop_p95_ms if backend == "ray" else 0.0,
    )
