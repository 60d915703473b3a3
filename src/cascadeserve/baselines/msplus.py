"""MS+ (model switching, Zhang et al., with the paper's improvements, §6.2).

* **Placement:** as many models as fit on each device (the paper's improvement (iii)): every device takes first the
  model with the fewest replicas so far (most accurate first among ties), then every other model that still fits.
* **Switching:** one model serves all requests at a time, chosen from the QPS measured every 100 ms. Models are
  ordered most accurate first; model ``k`` serves QPS below ``headroom × capacity(k)``, where ``capacity(k)`` is
  its replicas' combined throughput in batches that run within the AIMD target (half the latency SLO), each batch
  costing its runtime plus the workload's per-batch overhead. A model
  that is no cheaper than a more accurate one never gets a range. Expressed as a gear plan with one single-model
  gear per QPS range; the producer's hysteresis is off (``alpha = 0``), as in MS.
* **Batching:** Clipper's AIMD on each replica's maximum batch size against the target (improvement (ii)); a free
  device takes up to that many queued requests (:class:`~cascadeserve.policy.AimdBatchLimit`).

Grid: the latency SLO it is tuned for (from the workload) × ``headroom`` × the AIMD target as a fraction of the SLO.
"""

from __future__ import annotations

from cascadeserve.baselines.common import (
    Config,
    Deployment,
    System,
    Workload,
    batch_for_latency,
    batch_ms,
    oracle_accuracy,
    pareto_models,
)
from cascadeserve.plan import Device, Gear, GearPlan, GearReplica, Replica
from cascadeserve.profile import Profile

__all__ = ["MSPlus", "colocate"]

HEADROOMS = (0.6, 0.8, 1.0)
TARGET_FRACTIONS = (0.5,)


def colocate(profile: Profile, models: list[str], devices: tuple[Device, ...]) -> list[Replica]:
    """Greedy colocation: on each device, the least-replicated model first, then every other model that fits."""
    count = dict.fromkeys(models, 0)
    rank = {m: i for i, m in enumerate(models)}
    out: list[Replica] = []
    for d in devices:
        free = d.memory_mb
        for m in sorted(models, key=lambda m: (count[m], rank[m])):
            need = profile.model(m).memory_mb
            if need <= free:
                out.append(Replica(model=m, device=d.name))
                free -= need
                count[m] += 1
    return out


class MSPlus(System):
    name = "ms+"

    def configs(self, w: Workload, devices: int) -> list[Config]:
        return [
            {"slo_ms": v, "headroom": h, "aimd_target": f}
            for v in w.latency_slos_ms
            for h in HEADROOMS
            for f in TARGET_FRACTIONS
        ]

    def accuracy_bound(self, w: Workload, config: Config) -> float:
        # each request is answered by one of the Pareto models (which one depends on the time, not the sample)
        return oracle_accuracy(w.profile, pareto_models(w.profile), len(w.trace))

    def deploy(self, w: Workload, devices: int, config: Config) -> Deployment | None:
        prof = w.profile
        models = pareto_models(prof)  # most accurate first
        devs = w.devices(devices)
        replicas = colocate(prof, models, devs)
        target_ms = float(config["slo_ms"]) * float(config["aimd_target"])
        caps: list[tuple[str, float]] = []
        for m in models:
            n = sum(r.model == m for r in replicas)
            if n == 0:
                continue
            mp = prof.model(m)
            b = batch_for_latency(mp, target_ms, overhead_ms=w.batch_overhead_ms)
            cap = n * b / (batch_ms(mp, b, w.batch_overhead_ms) / 1000.0) * float(config["headroom"])
            if not caps or cap > caps[-1][1]:
                caps.append((m, cap))
        if not caps:
            return None
        gears = []
        low = 0.0
        top = max(caps[-1][1] * 2.0, w.max_qps * 10.0)
        for k, (m, cap) in enumerate(caps):
            high = top if k == len(caps) - 1 else cap
            reps = [r for r in replicas if r.model == m]
            gears.append(
                Gear(
                    qps_low=low,
                    qps_high=high,
                    models=(m,),
                    thresholds=(),
                    replicas=tuple(
                        GearReplica(model=r.model, device=r.device, min_queue=1, share=1.0 / len(reps)) for r in reps
                    ),
                )
            )
            low = high
        plan = GearPlan(
            profile=prof.name,
            devices=devs,
            replicas=tuple(replicas),
            gears=tuple(gears),
            alpha=0.0,
            batch_overhead_ms=w.batch_overhead_ms,
        )
        return Deployment(
            self.name,
            dict(config),
            prof,
            plan,
            aimd_target_s=target_ms / 1000.0,
            notes={"switch_qps": [c for _, c in caps[:-1]]},
        )
