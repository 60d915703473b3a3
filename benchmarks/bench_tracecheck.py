"""Benchmark: the planner's trace check (re-plan while the replay of the trace misses the SLO) on the Twitter trace.

For one profile, device count and trace, plans every SLO of the compare grid (each latency SLO and each accuracy
target) twice, without the check (``trace_rounds=0``, which only replays and reports) and with it (the default 3
rounds), and prints each plan's replayed p95 and accuracy, whether it meets its SLO, and the planning time.

    .venv/bin/python benchmarks/bench_tracecheck.py [--profile DIR] [--devices 3] [--window 0:1200] [--json]

The trace is scaled like ``cascadeserve report`` does: its peak is what ``--capacity-devices`` devices serve with
the family's most accurate model in batches that run within 25 ms.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from cascadeserve.eval import family_max_qps
from cascadeserve.plan import SLO, Device
from cascadeserve.planner import Planner, QpsDistribution
from cascadeserve.profile import load_profile
from cascadeserve.traces import build_trace

ROOT = Path(__file__).resolve().parents[1]
TWITTER = ROOT.parent / "shared" / "data" / "traces" / "twitter_2021" / "tweets_per_second.txt"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default=str(ROOT / "profiles" / "tweets-minilm"))
    ap.add_argument("--devices", type=int, default=3)
    ap.add_argument("--window", default="0:1200")
    ap.add_argument("--capacity-devices", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    prof = load_profile(args.profile)
    peak = round(family_max_qps(prof, args.capacity_devices, 50.0))
    trace = build_trace(str(TWITTER), max_qps=peak, window=args.window, drop_zero=True)
    dist = QpsDistribution("empirical", trace=str(TWITTER), window=args.window)
    hw = [Device(name=f"dev{i}", memory_mb=16000.0) for i in range(args.devices)]
    lo, hi = float(prof.accuracies.min()), float(prof.accuracies.max())
    slos = [SLO(kind="p95_ms", value=v) for v in (20.0, 50.0, 100.0)]
    slos += [SLO(kind="accuracy", value=round(lo + k * (hi - lo) / 4, 4)) for k in (1, 2, 3, 4)]
    rows = []
    for slo in slos:
        row: dict[str, object] = {"slo": str(slo)}
        for label, rounds in (("unchecked", 0), ("checked", 3)):
            t0 = time.perf_counter()
            pl = Planner(qps_dist=dist, trace_rounds=rounds)
            try:
                pl.fit(prof, hw, slo, peak, check_arrivals=trace.arrivals)
            except Exception as e:  # an infeasible SLO: say so and go on
                row[label] = {"error": str(e).splitlines()[0]}
                continue
            assert pl.report_ is not None and pl.report_.trace_check is not None
            c = pl.report_.trace_check
            row[label] = {
                "p95_ms": round(c.p95_ms, 2),
                "accuracy": round(c.accuracy, 4),
                "met": c.met,
                "rounds": c.rounds,
                "planned_for": round(c.planned_for, 4),
                "planner_s": round(time.perf_counter() - t0, 2),
            }
        rows.append(row)
        if not args.json:
            print(json.dumps(row))
    out = {"profile": prof.name, "devices": args.devices, "peak_qps": peak, "requests": len(trace), "rows": rows}
    out["met_unchecked"] = sum(1 for r in rows if isinstance(r.get("unchecked"), dict) and r["unchecked"].get("met"))
    out["met_checked"] = sum(1 for r in rows if isinstance(r.get("checked"), dict) and r["checked"].get("met"))
    print(json.dumps(out, indent=None if not args.json else 2))


if __name__ == "__main__":
    main()
