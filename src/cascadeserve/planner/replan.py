"""Re-plan a served plan for a measured QPS distribution (``serve --replan``), in process or as a child process.

:func:`replan` runs the gear planner again with everything the served plan was made with (its devices, SLO, top QPS,
number of ranges, hysteresis factor, batch overhead, audited share, device headroom) except the QPS distribution, which
becomes the measured range weights (``QpsDistribution("weights", ...)``). The simulator's counterpart calls it directly;
a server runs it as ``python -m cascadeserve.planner.replan PROFILE_DIR PLAN_IN WEIGHTS PLAN_OUT`` (a separate process,
so the planner's seconds of CPU never block the event loop; :mod:`cascadeserve.runtime.replanner`). Exit codes: 0 with
the new plan written, 2 with one line on stderr when the planner finds the SLO infeasible or an input is bad.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np

from cascadeserve.errors import CascadeServeError
from cascadeserve.plan import GearPlan, load_plan, plan_profile
from cascadeserve.planner.planner import Planner
from cascadeserve.planner.workload import QpsDistribution
from cascadeserve.profile import Profile, load_profile

__all__ = ["main", "replan"]


def replan(profile: Profile, plan: GearPlan, weights: Sequence[float] | np.ndarray, *, seed: int = 0) -> GearPlan:
    """``plan`` made again for the QPS distribution ``weights`` (one per gear range, lowest first)."""
    if plan.slo is None:
        raise CascadeServeError("the served plan records no SLO: it cannot be re-planned")
    w = tuple(float(x) for x in np.asarray(weights, dtype=np.float64))
    if len(w) != len(plan.gears):
        raise CascadeServeError(f"{len(w)} weights for a plan of {len(plan.gears)} gears")
    planner = Planner(
        n_ranges=len(plan.gears),
        qps_dist=QpsDistribution("weights", given=w),
        alpha=plan.alpha,
        seed=seed,
        batch_overhead_ms=plan.batch_overhead_ms,
        audit_fraction=plan.audit_fraction,
        max_busy=plan.max_busy,
        backend=plan.backend,  # a re-plan of a Ray plan pays the same process hops
        qps_min_arrivals=plan.qps_min_arrivals,  # the deployment's QPS meter, which the plan's checks assume
    )
    planner.fit(profile, plan.devices, plan.slo, plan.max_qps)
    assert planner.plan_ is not None
    new = planner.plan_
    # the deployment's online knobs are not the planner's to change
    return new.model_copy(
        update={
            "tick_ms": plan.tick_ms,
            "max_wait_ms": plan.max_wait_ms,
            "batching": plan.batching,
            "batch_target_ms": plan.batch_target_ms,
            "hop_ms": plan.hop_ms,
            "hop_p95_ms": plan.hop_p95_ms,
            "notes": {**new.notes, "replanned_from": plan.notes.get("qps_dist", "")},
        }
    )


def main(argv: Sequence[str] | None = None) -> int:
    """The child process: ``PROFILE_DIR PLAN_IN WEIGHTS PLAN_OUT`` (weights comma-separated)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 4:
        print("usage: python -m cascadeserve.planner.replan PROFILE_DIR PLAN_IN WEIGHTS PLAN_OUT", file=sys.stderr)
        return 2
    try:
        prof = load_profile(args[0])
        plan = load_plan(args[1], prof)
        weights = [float(x) for x in args[2].split(",")]
        replan(plan_profile(prof, plan), plan, weights).save(args[3])
    except (CascadeServeError, ValueError) as e:
        print(f"re-plan failed: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
