"""What every system in a comparison shares: the workload, a deployment, and the outcome of one run.

A **system** (cascadeserve, a baseline or an ablation) turns a :class:`Workload` and a device count into a list of
hyper-parameter settings (:meth:`System.configs`) and each setting into a :class:`Deployment`
(:meth:`System.deploy`): a profile (possibly derived, e.g. an ensemble's votes), a gear plan, and optionally the
two policy hooks (an AIMD batch limit, a gear schedule). Every deployment runs on the *same* simulator
(:meth:`Deployment.simulate`) and on the same runtime (:meth:`Deployment.emulated_runtime`, or
:meth:`Deployment.runtime_options` for any other runtime), both given the same hooks, so no system gets a private
execution path. :class:`Outcome` is one run's cost, p95 and accuracy.

A workload's ``batch_overhead_ms`` (a deployment's fixed cost per batch beyond the profiled runtime, e.g. from
``eval fidelity --calibrate``) applies to every system alike: each deployment's plan carries it, so the simulator
charges it on every batch, and every system-internal batch-size or capacity estimate includes it
(:func:`batch_for_latency`, :func:`batch_ms`; the planner with ``Planner(batch_overhead_ms=…)``).

Autoscaled systems (Cocktail+) decide their own device count over time; their cost is the time-mean of the
devices they had provisioned (rounded up), and their peak may not exceed the device budget.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cascadeserve.errors import InfeasibleError
from cascadeserve.plan import SLO, Device, GearPlan
from cascadeserve.planner import Planner, QpsDistribution
from cascadeserve.policy import AimdBatchLimit, GearSchedule
from cascadeserve.profile import ModelProfile, Profile
from cascadeserve.runtime import Clock, Observer, Runtime, RuntimeOptions, emulated_runtime
from cascadeserve.simulate import SimResult, memo, simulate
from cascadeserve.simulate.memo import replay
from cascadeserve.traces import Trace

__all__ = [
    "ACCURACY_TOL",
    "Config",
    "Deployment",
    "Outcome",
    "System",
    "Workload",
    "batch_for_latency",
    "batch_ms",
    "fit_plan",
    "oracle_accuracy",
    "pareto_models",
    "planned_single_model",
    "sub_profile",
]

# Replaying a trace cycles through the validation set, so a run's accuracy differs from the set's by a partial
# cycle; a cell's accuracy target counts as met within this (the same for every system).
ACCURACY_TOL = 5e-4

Config = dict[str, Any]


@dataclass(frozen=True, eq=False)
class Workload:
    """The profile, the trace, the SLO grid and the hardware that every system is compared on."""

    profile: Profile
    trace: Trace
    latency_slos_ms: tuple[float, ...]
    accuracy_targets: tuple[float, ...]
    device_memory_mb: float = 16000.0
    qps_dist: QpsDistribution | str = "zipf"
    seed: int = 0
    batch_overhead_ms: float = 0.0  # fixed cost per batch beyond the profiled runtime, for every system

    def __post_init__(self) -> None:
        if not (self.batch_overhead_ms >= 0 and math.isfinite(self.batch_overhead_ms)):
            raise ValueError(f"batch_overhead_ms must be a finite number ≥ 0, got {self.batch_overhead_ms!r}")

    @property
    def max_qps(self) -> float:
        return float(max(1, self.trace.max_qps))

    def devices(self, n: int) -> tuple[Device, ...]:
        return tuple(Device(name=f"dev{i}", memory_mb=self.device_memory_mb) for i in range(n))

    def with_trace(self, trace: Trace) -> Workload:
        return Workload(
            self.profile,
            trace,
            self.latency_slos_ms,
            self.accuracy_targets,
            self.device_memory_mb,
            self.qps_dist,
            self.seed,
            self.batch_overhead_ms,
        )

    def carry(self, plan: GearPlan) -> GearPlan:
        """``plan`` with this workload's per-batch overhead (so the simulator and runtime charge it)."""
        if plan.batch_overhead_ms == self.batch_overhead_ms:
            return plan
        return plan.model_copy(update={"batch_overhead_ms": self.batch_overhead_ms})


@dataclass(frozen=True)
class Outcome:
    """One simulated run of one system setting."""

    system: str
    config: Config
    devices: int  # cost: devices provisioned (autoscaled: time-mean, rounded up)
    p95_ms: float
    accuracy: float
    mean_devices: float
    peak_devices: int

    def meets(self, p95_ms: float, accuracy: float) -> bool:
        return self.p95_ms <= p95_ms and self.accuracy >= accuracy - ACCURACY_TOL

    def to_dict(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "config": self.config,
            "devices": self.devices,
            "p95_ms": self.p95_ms,
            "accuracy": self.accuracy,
            "mean_devices": self.mean_devices,
            "peak_devices": self.peak_devices,
        }


@dataclass(frozen=True, eq=False)
class Deployment:
    """A system setting ready to run: the profile and plan, plus optional AIMD batching and a gear schedule."""

    system: str
    config: Config
    profile: Profile
    plan: GearPlan
    aimd_target_s: float | None = None
    schedule: GearSchedule | None = None
    provisioned: np.ndarray | None = None  # devices provisioned per tick (autoscaled systems)
    notes: dict[str, Any] = field(default_factory=dict)

    def batch_limit(self) -> AimdBatchLimit | None:
        """A *fresh* AIMD batch limit (it keeps per-replica state, so every run needs its own), or ``None``."""
        return None if self.aimd_target_s is None else AimdBatchLimit(self.aimd_target_s)

    def simulate(self, arrivals: np.ndarray) -> SimResult:
        return simulate(self.profile, self.plan, arrivals, batch_limit=self.batch_limit(), gear_schedule=self.schedule)

    def runtime_options(self, base: RuntimeOptions | None = None) -> RuntimeOptions:
        """``base`` (default: the defaults) with this deployment's hooks, a fresh batch limit included: for one
        runtime only."""
        return dataclasses.replace(
            base or RuntimeOptions(), batch_limit=self.batch_limit(), gear_schedule=self.schedule
        )

    def emulated_runtime(
        self,
        *,
        clock: Clock | None = None,
        observer: Observer | None = None,
        options: RuntimeOptions | None = None,
    ) -> Runtime:
        """The deployment on the asyncio runtime with emulated devices, with the same hooks as :meth:`simulate`.
        Payloads are sample indices of :attr:`profile` (which, for an ensemble, is the derived profile)."""
        return emulated_runtime(
            self.profile, self.plan, clock=clock, observer=observer, options=self.runtime_options(options)
        )

    @property
    def hook_free(self) -> bool:
        """No policy hook and no provisioning schedule: a plain replay that :mod:`~cascadeserve.simulate.memo` may
        remember."""
        return self.aimd_target_s is None and self.schedule is None and self.provisioned is None

    def evaluate(self, arrivals: np.ndarray) -> Outcome:
        """The outcome of one run on ``arrivals`` (a hook-free run is answered from memory when a cost grid
        opened one and replayed it before)."""
        if self.hook_free:
            return self._outcome(*replay(self.profile, self.plan, arrivals))
        return self.outcome(self.simulate(arrivals))

    def outcome(self, res: SimResult) -> Outcome:
        return self._outcome(res.percentile_ms(95), res.accuracy)

    def _outcome(self, p95_ms: float, accuracy: float) -> Outcome:
        if self.provisioned is not None and len(self.provisioned):
            mean = float(np.mean(self.provisioned))
            peak = int(np.max(self.provisioned))
            cost = math.ceil(mean - 1e-9)
        else:
            cost = peak = len(self.plan.devices)
            mean = float(cost)
        return Outcome(self.system, self.config, cost, p95_ms, accuracy, mean, peak)


class System(ABC):
    """A serving system under comparison: settings to try at a device count, and a deployment per setting."""

    name: str = ""
    autoscaled: bool = False  # True: the device count is the system's own decision (``devices`` is the budget)

    @abstractmethod
    def configs(self, w: Workload, devices: int) -> list[Config]:
        """The hyper-parameter settings to grid-search at ``devices`` devices."""

    @abstractmethod
    def deploy(self, w: Workload, devices: int, config: Config) -> Deployment | None:
        """The deployment for one setting, or ``None`` when it cannot be built (e.g. the planner says infeasible)."""

    def accuracy_bound(self, w: Workload, config: Config) -> float | None:
        """An upper bound on the accuracy of any run of ``config`` on the workload's trace (at any device count),
        or ``None`` when the system knows none. The cost grid skips a setting whose bound is below a cell's
        target: it could not meet the cell."""
        return None

    def evaluate(self, w: Workload, devices: int, config: Config) -> Outcome | None:
        """One setting's outcome on the workload's trace, or ``None`` when it cannot be deployed."""
        dep = self.deploy(w, devices, config)
        return None if dep is None else dep.evaluate(w.trace.arrivals)

    def run(self, w: Workload, devices: int) -> list[Outcome]:
        """Every setting's outcome on the workload's trace."""
        outs = (self.evaluate(w, devices, cfg) for cfg in self.configs(w, devices))
        return [o for o in outs if o is not None]


def sub_profile(profile: Profile, models: Sequence[str], *, name: str | None = None) -> Profile:
    """The profile restricted to ``models`` (same samples and records)."""
    rows = [profile.index(m) for m in models]
    return Profile(
        name=name or profile.name,
        models=tuple(profile.models[r] for r in rows),
        sample_ids=np.array(profile.sample_ids),
        labels=np.array(profile.labels),
        predictions=np.array(profile.predictions[rows]),
        certainties=np.array(profile.certainties[rows]),
        task=profile.task,
        device=profile.device,
        source=profile.source,
        batch_overhead_ms=profile.batch_overhead_ms,
    )


def pareto_models(profile: Profile, batch: int = 32) -> list[str]:
    """Models not beaten on both accuracy and per-sample cost (at ``batch``) by another; most accurate first."""
    rows = []
    for i, m in enumerate(profile.models):
        rows.append((float(profile.accuracies[i]), m.runtime.per_sample_ms(batch), m.name))
    keep = [
        name
        for acc, cost, name in rows
        if not any((a >= acc and c <= cost) and (a > acc or c < cost) for a, c, _ in rows)
    ]
    return sorted(keep, key=lambda n: -float(profile.accuracies[profile.index(n)]))


def oracle_accuracy(profile: Profile, models: Sequence[str], n_requests: int) -> float:
    """The accuracy of ``n_requests`` requests (request ``i`` on sample ``i mod n``) if each were answered by
    whichever of ``models`` is right on its sample: a bound on any system that answers every request by one of
    them."""
    rows = [profile.index(m) for m in models]
    right = np.any(profile.predictions[rows] == profile.labels, axis=0)
    full, rest = divmod(max(n_requests, 0), profile.n_samples)
    if full == 0 and rest == 0:
        return float(right.mean())
    return float((full * right.sum() + right[:rest].sum()) / (full * profile.n_samples + rest))


def batch_ms(model: ModelProfile, batch: int, overhead_ms: float = 0.0) -> float:
    """Milliseconds one batch of ``batch`` takes: the profiled runtime plus the per-batch overhead."""
    return float(model.runtime.ms_at(batch)) + overhead_ms


def batch_for_latency(model: ModelProfile, budget_ms: float, cap: int | None = None, overhead_ms: float = 0.0) -> int:
    """The largest batch whose runtime plus ``overhead_ms`` fits ``budget_ms`` (at least 1), at most ``cap`` (default:
    the model's ``batch_limit``, so no estimate rests on runtimes extrapolated past the profiled batch sizes)."""
    sizes = np.arange(1, (model.batch_limit if cap is None else cap) + 1)
    ok = np.flatnonzero(model.runtime.ms_at(sizes) + overhead_ms <= budget_ms)
    return int(sizes[ok[-1]]) if len(ok) else 1


def fit_plan(planner: Planner, profile: Profile, w: Workload, devices: int, slo: SLO) -> GearPlan | None:
    """``planner``'s plan for ``profile`` on ``devices`` of the workload's hardware under ``slo``, replayed on the
    workload's trace (its trace check), or ``None`` when it finds none. While a cost grid runs the fit is remembered
    by its inputs (:mod:`cascadeserve.simulate.memo`): DynBa and the no-switching ablation plan the same single
    models, and a fit is deterministic."""
    arrivals = w.trace.arrivals
    settings = (planner.n_ranges, planner.alpha, planner.seed, planner.batch_overhead_ms, planner.qps_dist)
    parts = (
        "planner-fit",
        memo.fingerprint(profile),
        repr(settings),
        f"{devices}x{w.device_memory_mb!r}",
        slo.model_dump_json(),
        repr(w.max_qps),
        memo.fingerprint(arrivals),
    )
    hit = memo.recall(*parts)
    if hit is not None:
        return GearPlan.model_validate_json(hit) if hit else None
    try:
        planner.fit(profile, w.devices(devices), slo, w.max_qps, check_arrivals=arrivals)
    except InfeasibleError:
        memo.remember("", *parts)
        return None
    assert planner.plan_ is not None
    memo.remember(planner.plan_.model_dump_json(), *parts)
    return planner.plan_


def planned_single_model(name: str, w: Workload, devices: int, config: Config, model: str) -> Deployment | None:
    """One model, statically on every device, batched by the planner for the latency SLO ``config["slo_ms"]``
    (DynBa's setting, also tried by no-switching); ``None`` when the planner finds no feasible plan."""
    one = sub_profile(w.profile, [model])
    planner = Planner(n_ranges=10, qps_dist=w.qps_dist, seed=w.seed, batch_overhead_ms=w.batch_overhead_ms)
    plan = fit_plan(planner, one, w, devices, SLO(kind="p95_ms", value=float(config["slo_ms"])))
    return None if plan is None else Deployment(name, dict(config), one, plan)

