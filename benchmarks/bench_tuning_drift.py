"""Data drift, real data, in the simulator: fixed thresholds vs online tuning vs the most accurate model alone.

The digits family, planned on clean validation images (``profiles/digits-drift/clean``), serves a stream in which
images shifted by one pixel replace clean ones from 20 % to 60 % of the run (``profiles/digits-drift/stream``,
:func:`cascadeserve.eval.drift_stream.drift_order`): the cheap models stay confident on shifted images but get half
of them wrong. Side by side, in one run, on the same arrivals and the same sample order:

* **fixed**: the plan's thresholds;
* **tuned**: the same plan with :class:`~cascadeserve.policy.tuning.OnlineTuning` (2 % audit sampling, the last
  stage's prediction as the reference, each gear's target = its clean agreement with the last stage less 1 point);
* **best alone**: ``cnn-wide`` alone (a one-model plan on the same devices).

Reported per window of the run: accuracy against the labels and device work per request, and the tuner's target.

    .venv/bin/python benchmarks/bench_tuning_drift.py [--qps 150] [--seconds 120] [--runs 3]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from pathlib import Path

import numpy as np

from cascadeserve.cascade import Cascade
from cascadeserve.eval.drift_stream import SHIFT_ID_OFFSET, drift_order
from cascadeserve.plan import SLO, Device, GearPlan, fixed_plan
from cascadeserve.planner import Planner
from cascadeserve.policy import PlanTables
from cascadeserve.policy.tuning import OnlineTuning
from cascadeserve.profile import Profile, load_profile
from cascadeserve.simulate import SimResult, simulate
from cascadeserve.traces import poisson

ROOT = Path(__file__).resolve().parents[1]


def work_per_request(profile: Profile, res: SimResult) -> float:
    """Device milliseconds spent per request (audits included)."""
    busy = float(res.tick_busy.sum()) * (res.tick_times[1] - res.tick_times[0] if len(res.tick_times) > 1 else 0.1)
    return 1000.0 * busy / max(1, len(res.arrivals))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qps", type=float, default=150.0)
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--windows", type=int, default=6)
    ap.add_argument("--audit", type=float, default=0.02, help="audit fraction of early exits")
    ap.add_argument("--window", type=int, default=512, help="records per gear in the tuner's window")
    ap.add_argument("--period", type=float, default=5.0, help="seconds between periodic re-tunes")
    a = ap.parse_args()
    clean = load_profile(ROOT / "profiles" / "digits-drift" / "clean")
    stream = load_profile(ROOT / "profiles" / "digits-drift" / "stream")
    devices = [Device(name=f"dev{i}", memory_mb=1000.0) for i in range(2)]
    t0 = time.perf_counter()
    planner = Planner(n_ranges=4, seed=0)
    fitted = planner.fit(clean, devices, SLO(kind="p95_ms", value=50.0), a.qps * 1.5).plan_
    assert fitted is not None
    plan: GearPlan = fitted
    plan_s = time.perf_counter() - t0
    best = fixed_plan(stream, Cascade(("cnn-wide",)), devices, max_qps=a.qps * 1.5)
    rows = {m: stream.index(m) for m in stream.model_names}
    # each gear's target: what it agrees with its last stage on clean data, less one point
    clean_tuning = OnlineTuning.for_plan(PlanTables(plan, {m: clean.index(m) for m in clean.model_names}), clean)
    targets = dict(clean_tuning.tuner.target)
    pos = {int(s): i for i, s in enumerate(stream.sample_ids)}
    cl = stream.sample_ids[stream.sample_ids < SHIFT_ID_OFFSET]
    sh = stream.sample_ids[stream.sample_ids >= SHIFT_ID_OFFSET]
    print(f"plan ({plan_s:.1f} s): " + "; ".join(f"{'>'.join(g.models)} @ {g.thresholds}" for g in plan.gears))
    print("tuner targets (agreement with the last stage):", {g: round(t, 4) for g, t in targets.items()})
    table: dict[str, list[list[float]]] = {}
    for run in range(a.runs):
        arr = poisson(a.qps, a.seconds, seed=run).arrivals
        order = drift_order(len(arr), cl, sh, 0.2, 0.6, seed=run)
        samples = np.array([pos[int(s)] for s in order], dtype=np.int64)
        tuning = OnlineTuning.for_plan(
            PlanTables(plan, rows), stream, audit_fraction=a.audit, window=a.window, period_s=a.period
        )
        tuning.tuner.target = dict(targets)
        for name, p, tu in (("fixed", plan, None), ("tuned", plan, tuning), ("best alone", best, None)):
            w0 = time.perf_counter()
            res = simulate(stream, p, arr, samples=samples, tuning=tu)
            wall = time.perf_counter() - w0
            edges = np.linspace(0, len(arr), a.windows + 1).astype(int)
            accs = [float(res.correct[x:y].mean()) for x, y in itertools.pairwise(edges)]
            # agreement with the last stage (the tuner's reference) over the fully drifted last third of the run
            tail = slice(2 * len(arr) // 3, len(arr))
            agree = float(np.mean(stream.predictions[res.answer_row[tail], samples[tail]]
                                  == stream.predictions[stream.index("cnn-wide"), samples[tail]]))  # fmt: skip
            row = [*accs, work_per_request(stream, res), res.percentile_ms(95), wall, len(res.threshold_changes),
                   agree]  # fmt: skip
            table.setdefault(name, []).append(row)
    print(f"{'system':11} " + " ".join(f"acc w{i}" for i in range(a.windows)) + "  work ms/req  p95 ms  swaps"
          "  agree (last third)")  # fmt: skip
    for name, runs in table.items():
        med = [statistics.median(r[i] for r in runs) for i in range(len(runs[0]))]
        accs = " ".join(f"{x:6.3f}" for x in med[: a.windows])
        print(f"{name:11} {accs}  {med[a.windows]:11.3f}  {med[a.windows + 1]:6.1f}  {med[a.windows + 3]:5.0f}"
              f"  {med[a.windows + 4]:.4f}")  # fmt: skip


if __name__ == "__main__":
    main()
