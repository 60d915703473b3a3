"""Cocktail+ (Gunasekaran et al., with the paper's improvements, §6.2): an ensemble with autoscaling.

* **Ensemble:** a subset of the family answers every request by vote: ``majority`` (plurality; ties go to the
  most accurate member) or ``weighted`` (each member votes with its certainty). An ensemble is served as one
  *virtual model* on each device whose batch runs its members one after the other (runtime = the sum of the
  members' runtimes, memory = their sum): the device time per request is the same as with members on separate
  devices, the latency at low load is higher by the members other than the slowest. Only ensembles on the
  accuracy/cost Pareto front that can reach some accuracy target are tried; single models count as ensembles.
* **Autoscaling with the ground-truth future load** (improvement (i)): every ``interval_s`` the autoscaler looks at
  the true peak per-second QPS of the next interval and provisions ``ceil(peak / (utilisation × capacity))``
  devices (capacity: one device's throughput in batches that run within half the latency SLO, each batch costing
  its runtime plus the workload's per-batch overhead), at least 1 and at
  most the device budget. VMs start instantly (improvement (ii)); a new replica still loads its model and runs one
  warm-up batch before it takes requests. Because the load is known in advance, it is requested that much
  *earlier* (a strengthening over the paper's Cocktail+, which was under-provisioned at every peak): it is paid
  for while loading. Scale-down is immediate; a replica that leaves still drains its queue.
* **Batching:** cascadeserve's (improvement (iii)), work-conserving: a free device takes its whole queue.
* **Load time** (not in any profile, so a documented parameter): ``load_fixed_s`` (process and framework start,
  default 1 s) + memory / ``load_mb_per_s`` (default 1000 MB/s) + the ensemble's runtime at batch 1 (plus the
  per-batch overhead).
* **Cost:** the time-mean of the provisioned devices, rounded up; the peak is reported too.

Expressed on the shared simulator as a plan with one replica per device of the budget and one gear per active
device count (gear ``k`` routes evenly to the first ``k + 1`` replicas), driven by a
:class:`~cascadeserve.policy.GearSchedule`. Grid: ensemble × vote × latency SLO × ``utilisation`` × ``interval_s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cascadeserve.baselines.common import (
    ACCURACY_TOL,
    Config,
    Deployment,
    System,
    Workload,
    batch_for_latency,
    batch_ms,
)
from cascadeserve.plan import Gear, GearPlan, GearReplica, Replica
from cascadeserve.policy import GearSchedule
from cascadeserve.profile import ModelProfile, Profile
from cascadeserve.profile.vote import vote_front, vote_model, vote_records

__all__ = ["CocktailPlus", "LoadTime", "ensemble_profile"]

UTILISATIONS = (0.6, 0.9)
INTERVALS_S = (5.0, 30.0)


@dataclass(frozen=True)
class LoadTime:
    """Seconds from requesting a replica to its first request: fixed + memory / bandwidth + one warm-up batch."""

    fixed_s: float = 1.0
    mb_per_s: float = 1000.0

    def seconds(self, model: ModelProfile, overhead_ms: float = 0.0) -> float:
        return self.fixed_s + model.memory_mb / self.mb_per_s + batch_ms(model, 1, overhead_ms) / 1000.0


def ensemble_profile(profile: Profile, min_accuracy: float = 0.0) -> Profile:
    """A profile of virtual ensemble models: the Pareto front (accuracy vs per-sample cost) of all votes
    (:func:`~cascadeserve.profile.vote.vote_front`, the same vote stages the planner may use)."""
    front = [v for v, _, _ in vote_front(profile, min_accuracy, ACCURACY_TOL)]
    preds = [vote_records(profile, v)[0] for v in front]
    return Profile(
        name=f"{profile.name}-ensembles",
        models=tuple(vote_model(profile, v) for v in front),
        sample_ids=np.array(profile.sample_ids),
        labels=np.array(profile.labels),
        predictions=np.stack(preds),
        certainties=np.ones((len(front), profile.n_samples)),  # an ensemble answers every request: never unsure
        task=profile.task,
        device=profile.device,
        source=f"ensembles of {profile.name}",
    )


class CocktailPlus(System):
    name = "cocktail+"
    autoscaled = True

    def __init__(self, load_time: LoadTime | None = None) -> None:
        self.load_time = load_time or LoadTime()
        self._ens: dict[int, Profile] = {}

    def ensembles(self, w: Workload) -> Profile:
        hit = self._ens.get(id(w.profile))
        if hit is None:
            low = min(w.accuracy_targets) if w.accuracy_targets else 0.0
            hit = self._ens[id(w.profile)] = ensemble_profile(w.profile, low)
        return hit

    def configs(self, w: Workload, devices: int) -> list[Config]:
        return [
            {"ensemble": m, "slo_ms": v, "utilisation": u, "interval_s": t}
            for m in self.ensembles(w).model_names
            for v in w.latency_slos_ms
            for u in UTILISATIONS
            for t in INTERVALS_S
        ]

    def deploy(self, w: Workload, devices: int, config: Config) -> Deployment | None:
        ens = self.ensembles(w)
        mp = ens.model(str(config["ensemble"]))
        devs = w.devices(devices)
        if mp.memory_mb > w.device_memory_mb:
            return None
        ov = w.batch_overhead_ms
        b = batch_for_latency(mp, float(config["slo_ms"]) / 2.0, overhead_ms=ov)
        cap = b / (batch_ms(mp, b, ov) / 1000.0)
        replicas = tuple(Replica(model=mp.name, device=d.name) for d in devs)
        gears = tuple(
            Gear(
                qps_low=float(k),
                qps_high=float(k + 1),
                models=(mp.name,),
                replicas=tuple(
                    GearReplica(model=r.model, device=r.device, min_queue=1, share=1.0 / (k + 1))
                    for r in replicas[: k + 1]
                ),
            )
            for k in range(devices)
        )
        gears = (gears[0].model_copy(update={"qps_low": 0.0}), *gears[1:])
        plan = GearPlan(profile=ens.name, devices=devs, replicas=replicas, gears=gears, alpha=0.0, batch_overhead_ms=ov)
        tick = plan.tick_ms / 1000.0
        counts = w.trace.per_second_counts()
        interval = float(config["interval_s"])
        n_int = max(1, math.ceil(w.trace.duration_s / interval))
        need = np.ones(n_int, dtype=np.int64)
        for i in range(n_int):
            seg = counts[int(i * interval) : math.ceil((i + 1) * interval)]
            peak = float(seg.max()) if len(seg) else 0.0
            need[i] = min(devices, max(1, math.ceil(peak / (float(config["utilisation"]) * cap))))
        n_ticks = math.ceil(w.trace.duration_s / tick) + 1
        t = tick * np.arange(n_ticks)
        idx = np.minimum((t // interval).astype(np.int64), n_int - 1)
        active = need[idx]
        delay = self.load_time.seconds(mp, ov)
        # a replica for interval i+1 is requested `delay` before it starts, and paid for from then on
        nxt = need[np.minimum(idx + 1, n_int - 1)]
        loading = (t >= (idx + 1) * interval - delay) & (idx + 1 < n_int)
        provisioned = np.where(loading, np.maximum(active, nxt), active)
        return Deployment(
            self.name,
            dict(config),
            ens,
            plan,
            schedule=GearSchedule(active - 1),
            provisioned=provisioned,
            notes={"load_s": delay, "capacity_qps_per_device": cap},
        )
