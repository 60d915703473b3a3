"""DynBa (paper §6.2): one model for every request, statically provisioned on all devices, dynamic batching.

For each model whose accuracy can reach some accuracy target of the grid, DynBa places one replica of it on every
device and splits the load evenly. Its batching is cascadeserve's own (the paper's improvement): either
work-conserving (``min_queue=1``: a free device takes its whole queue up to the model's batch cap, the planner's
rule without a latency bound, :func:`~cascadeserve.planner.default_batch_caps`), or the planner's per-QPS-range minimum
queue lengths, obtained by running the gear planner on the one-model profile under each latency SLO (with one
model the planner can only place, balance and batch; it replays its plan on the workload's trace and tightens the
batching while the replay misses the SLO, as it does for cascadeserve). Both are grid-searched; the best setting
per cell wins. The workload's per-batch overhead is in both plans (the planner plans with it).
"""

from __future__ import annotations

from cascadeserve.baselines.common import ACCURACY_TOL, Config, Deployment, System, Workload, planned_single_model
from cascadeserve.cascade import Cascade
from cascadeserve.errors import PlanError
from cascadeserve.plan import fixed_plan
from cascadeserve.planner import default_batch_caps
from cascadeserve.planner.static import replay_accuracy

__all__ = ["DynBa"]


class DynBa(System):
    name = "dynba"

    def configs(self, w: Workload, devices: int) -> list[Config]:
        low = min(w.accuracy_targets) - ACCURACY_TOL if w.accuracy_targets else 0.0
        out: list[Config] = []
        for i, m in enumerate(w.profile.models):
            if float(w.profile.accuracies[i]) < low:
                continue  # could meet no cell
            out.append({"model": m.name, "batching": "min_queue=1"})
            out.extend({"model": m.name, "batching": "planner", "slo_ms": v} for v in w.latency_slos_ms)
        return out

    def accuracy_bound(self, w: Workload, config: Config) -> float:
        # one model answers every request: its accuracy on the replayed samples, or less when some go unanswered
        return replay_accuracy(w.profile, Cascade((str(config["model"]),), ()), len(w.trace))

    def deploy(self, w: Workload, devices: int, config: Config) -> Deployment | None:
        model = str(config["model"])
        if config["batching"] == "min_queue=1":
            try:
                caps = default_batch_caps(w.profile, None, overhead_ms=w.batch_overhead_ms, models=(model,))
                plan = fixed_plan(w.profile, Cascade((model,), ()), w.devices(devices), min_queue=1, batch_caps=caps)
            except PlanError:
                return None
            plan = w.carry(plan)
            return Deployment(self.name, dict(config), w.profile, plan)
        return planned_single_model(self.name, w, devices, config, model)
