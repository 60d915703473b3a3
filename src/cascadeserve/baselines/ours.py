"""cascadeserve itself as a system under comparison, and its two ablations (paper §6.6, Fig. 12).

* :class:`CascadeServe`: the gear planner, planned once per SLO of the grid (each latency SLO and each accuracy
  target, the two ways a user states an SLO); any of the resulting plans may meet a cell. Its own
  hyper-parameters are the defaults (``n_ranges=10``, ``alpha=8``), not grid-searched. The planner replays each
  plan on the workload's trace and plans again against a tighter internal SLO while the replay misses the SLO
  (its trace check, :mod:`cascadeserve.planner.tracecheck`); DynBa's planner batching gets the same check.
  Each SLO is planned twice where the family has vote stages worth offering: with up to ``votes`` of them (default
  1, as ``plan --votes 1``; :func:`~cascadeserve.profile.useful_votes`: the cheapest votes of the family's models
  that are more accurate than its best model, which no cascade of single models can reach, an ensemble system's
  one advantage) and without.
* :class:`NoSwitching`: one static cascade serves the whole trace. The candidates are SP1's frontier cascades
  that can reach an accuracy target (up to :data:`STATIC_CANDIDATES`, spread over the frontier), each placed on
  every device where it fits with work-conserving batching (a free device takes its whole queue up to each
  model's batch cap, the planner's rule without a latency bound): :func:`~cascadeserve.planner.static_cascades`
  and :func:`~cascadeserve.planner.static_plan`, the same functions with which the planner weighs every static
  cascade against its own plan (so cascadeserve never needs more devices for a cell than these settings); and
  every one-model cascade that can reach a
  target with the planner's batching (the planner on the one-model profile per latency SLO, as DynBa does), so
  the ablation's space contains DynBa's and it is never the weaker of the two; grid-searched.
  (The planner with ``n_ranges=1`` is not used: it would search the same space through SP3/SP4's placement and
  per-range checks instead of replaying the trace, which is what this ablation isolates. Since SP4 dropped its
  busy ≤ 97 % cap, the planner with one range is feasible wherever a work-conserving static cascade holds the
  SLO at the top QPS, see ``tests/baselines/test_planner_vs_static.py``.)
* :class:`NoCascade`: the same planner on a copy of the profile whose certainties are all zero, so every
  cascade longer than one model forwards everything and is dominated by its last model: the planner switches
  between *single* models with cascadeserve's placement, load balancing and batching.

All three charge the workload's per-batch overhead: the planner plans with it (``Planner(batch_overhead_ms=…)``)
and every plan carries it. The static candidates come from SP1's frontier, which ranks cascades by profiled work.
"""

from __future__ import annotations

import numpy as np

from cascadeserve.baselines.common import (
    ACCURACY_TOL,
    Config,
    Deployment,
    System,
    Workload,
    fit_plan,
    planned_single_model,
)
from cascadeserve.cascade import Cascade
from cascadeserve.plan import SLO
from cascadeserve.planner import STATIC_CANDIDATES, Planner, search_cascades, static_cascades, static_plan
from cascadeserve.planner.static import replay_accuracy
from cascadeserve.profile import Profile, useful_votes, with_votes

__all__ = ["STATIC_CANDIDATES", "CascadeServe", "NoCascade", "NoSwitching", "without_cascades"]


def without_cascades(profile: Profile) -> Profile:
    """A copy of ``profile`` whose models are never certain (every threshold forwards every sample)."""
    return Profile(
        name=profile.name,
        models=profile.models,
        sample_ids=np.array(profile.sample_ids),
        labels=np.array(profile.labels),
        predictions=np.array(profile.predictions),
        certainties=np.zeros_like(profile.certainties),
        task=profile.task,
        device=profile.device,
        source=profile.source,
        batch_overhead_ms=profile.batch_overhead_ms,
    )


class CascadeServe(System):
    name = "cascadeserve"

    def __init__(self, n_ranges: int = 10, alpha: float = 8.0, votes: int = 1) -> None:
        self.n_ranges = n_ranges
        self.alpha = alpha
        self.votes = votes
        self._voted: dict[int, Profile | None] = {}  # per profile: with its vote stages (None: none worth offering)

    def _with_votes(self, w: Workload) -> Profile | None:
        key = id(w.profile)
        if key not in self._voted:  # the votes are searched once per profile, not per device count and setting
            offered = useful_votes(w.profile, self.votes)
            self._voted[key] = with_votes(w.profile, offered) if offered else None
        return self._voted[key]

    def _profile(self, w: Workload, votes: bool = False) -> Profile:
        voted = self._with_votes(w) if votes else None
        return w.profile if voted is None else voted

    def configs(self, w: Workload, devices: int) -> list[Config]:
        slos: list[Config] = [{"slo": "p95_ms", "value": v} for v in w.latency_slos_ms] + [
            {"slo": "accuracy", "value": v} for v in w.accuracy_targets
        ]
        if self._with_votes(w) is None:
            return slos
        # planned with the vote stages first, then without: the planner's search is a heuristic, and a model more
        # to choose from can lead it to a worse plan in a cell (seen once: 2 devices with the vote, 1 without)
        return [{**c, "votes": self.votes} for c in slos] + slos

    def deploy(self, w: Workload, devices: int, config: Config) -> Deployment | None:
        prof = self._profile(w, bool(config.get("votes")))
        slo = SLO(kind=config["slo"], value=float(config["value"]))
        planner = Planner(
            n_ranges=self.n_ranges,
            qps_dist=w.qps_dist,
            alpha=self.alpha,
            seed=w.seed,
            batch_overhead_ms=w.batch_overhead_ms,
        )
        plan = fit_plan(planner, prof, w, devices, slo)
        return None if plan is None else Deployment(self.name, dict(config), prof, plan)


class NoSwitching(System):
    name = "no-switching"

    def __init__(self) -> None:
        self._front: dict[int, list[Cascade]] = {}

    def candidates(self, w: Workload) -> list[Cascade]:
        hit = self._front.get(id(w.profile))
        if hit is None:
            low = min(w.accuracy_targets) - ACCURACY_TOL if w.accuracy_targets else 0.0
            hit = self._front[id(w.profile)] = static_cascades(search_cascades(w.profile), low)
        return hit

    def configs(self, w: Workload, devices: int) -> list[Config]:
        out: list[Config] = [{"models": list(c.models), "thresholds": list(c.thresholds)} for c in self.candidates(w)]
        low = min(w.accuracy_targets) - ACCURACY_TOL if w.accuracy_targets else 0.0
        for i, m in enumerate(w.profile.models):
            if float(w.profile.accuracies[i]) >= low:
                out.extend(
                    {"models": [m.name], "thresholds": [], "batching": "planner", "slo_ms": v}
                    for v in w.latency_slos_ms
                )
        return out

    def accuracy_bound(self, w: Workload, config: Config) -> float:
        # one cascade with fixed thresholds answers every request (or fewer, when some go unanswered)
        return replay_accuracy(w.profile, Cascade(tuple(config["models"]), tuple(config["thresholds"])), len(w.trace))

    def deploy(self, w: Workload, devices: int, config: Config) -> Deployment | None:
        c = Cascade(tuple(config["models"]), tuple(config["thresholds"]))
        if config.get("batching") == "planner":
            return self._planned(w, devices, config, c.models[0])
        plan = static_plan(w.profile, c, w.devices(devices), overhead_ms=w.batch_overhead_ms)
        return None if plan is None else Deployment(self.name, dict(config), w.profile, plan)

    def _planned(self, w: Workload, devices: int, config: Config, model: str) -> Deployment | None:
        """One model, statically on every device, batched by the planner for one latency SLO (DynBa's setting)."""
        return planned_single_model(self.name, w, devices, config, model)


class NoCascade(CascadeServe):
    name = "no-cascade"

    def __init__(self) -> None:
        super().__init__(votes=0)  # the paper's ablation: single models only
        self._cache: dict[int, Profile] = {}

    def _profile(self, w: Workload, votes: bool = False) -> Profile:
        hit = self._cache.get(id(w.profile))
        if hit is None:
            hit = self._cache[id(w.profile)] = without_cascades(w.profile)
        return hit
