"""Benchmark: the full cost-grid compare (3 latency SLOs × 4 accuracy targets, all systems) on one profile.

Reports the wall time of the compare (target ≤ 10 minutes on 2 cores) and the savings per cell, the median over
the cells a baseline reaches (target ≥ 3×) and the minimum over the high-accuracy cells (target ≥ 2×).

    .venv/bin/python benchmarks/bench_compare.py [--profile DIR] [--window 0:60] [--jobs 2] [--json]

The trace is the Twitter trace (first ``--window`` seconds, empty seconds dropped), scaled so its peak is what
``--capacity-devices`` devices serve with the family's most accurate model within half the middle latency SLO.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from cascadeserve.baselines import Workload, all_systems
from cascadeserve.eval import compare, family_max_qps
from cascadeserve.planner import QpsDistribution
from cascadeserve.profile import load_profile
from cascadeserve.traces import build_trace

ROOT = Path(__file__).resolve().parents[1]
TWITTER = ROOT.parent / "shared" / "data" / "traces" / "twitter_2021" / "tweets_per_second.txt"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default=str(ROOT / "tests" / "data" / "profiles" / "tweets-sklearn"))
    ap.add_argument("--window", default="0:60")
    ap.add_argument("--capacity-devices", type=int, default=4)
    ap.add_argument("--accuracy-targets", default="")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    prof = load_profile(args.profile)
    lats = (20.0, 50.0, 100.0)
    lo, hi = float(prof.accuracies.min()), float(prof.accuracies.max())
    accs = (
        tuple(float(x) for x in args.accuracy_targets.split(","))
        if args.accuracy_targets
        else tuple(round(lo + k * (hi - lo) / 4, 4) for k in (1, 2, 3, 4))
    )
    peak = round(family_max_qps(prof, args.capacity_devices, 50.0))
    trace = build_trace(str(TWITTER), window=args.window, drop_zero=True, max_qps=peak, seed=0)
    w = Workload(prof, trace, lats, accs, 16000.0, QpsDistribution("empirical", trace=str(TWITTER), window=args.window))
    t0 = time.perf_counter()
    res = compare(w, all_systems(), 16, jobs=args.jobs).to_dict()
    res["bench_wall_s"] = time.perf_counter() - t0
    if args.json:
        print(json.dumps(res, indent=1, default=float))
        return
    for c in res["cells"]:
        print(c["p95_ms"], c["accuracy"], c["devices"], c["savings"])
    print("median", res["median_savings"], "min high", res["min_high_accuracy_savings"], "wall", res["bench_wall_s"])


if __name__ == "__main__":
    main()
