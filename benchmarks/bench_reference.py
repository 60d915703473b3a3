"""The reference simulator's speed on a run with every Python-only hook on: a prediction cache and online tuning.

The run that cannot take the compiled engine: the digits-drift stream profile (three models, clean images and then
shifted ones), the cascade ``logreg > mlp > cnn-wide`` on two devices (min queue 4, max wait 10 ms), Poisson
arrivals at ``--qps`` for ``--seconds``, each request's sample drawn Zipf-popular (so a 128-entry cache hits some),
and Apparate-style tuning with 5 % audits every second. ``simulate(...)`` is called the same way against any
version of ``src`` (its signature has not changed), so the same script times today's reference engine (the runtime
on a virtual clock) and an older checkout's Python loop side by side: run it with ``PYTHONPATH=<checkout>/src``.
Prints one JSON line per run (wall and CPU seconds, simulated requests per second, and a digest of every finish
time, answer and cache hit so that two versions can be compared) and the median.

Usage: python benchmarks/bench_reference.py [--runs 5] [--qps 200] [--seconds 60]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from pathlib import Path

import numpy as np

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.policy import PlanTables
from cascadeserve.policy.cache import PredictionCache
from cascadeserve.policy.tuning import OnlineTuning
from cascadeserve.profile import load_profile
from cascadeserve.simulate import simulate

STREAM = Path(__file__).resolve().parents[1] / "profiles" / "digits-drift" / "stream"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--qps", type=float, default=200.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    args = ap.parse_args()
    prof = load_profile(STREAM)
    devices = [Device(name="d0", memory_mb=1000), Device(name="d1", memory_mb=1000)]
    plan = fixed_plan(prof, Cascade(("logreg", "mlp", "cnn-wide"), (0.6, 0.6)), devices, min_queue=4, max_wait_ms=10.0)
    rng = np.random.default_rng(0)
    n = int(args.qps * args.seconds)
    arrivals = np.round(np.cumsum(rng.exponential(1.0 / args.qps, n)), 6)
    popularity = 1.0 / np.arange(1, prof.n_samples + 1) ** 0.8
    samples = rng.choice(prof.n_samples, size=n, p=popularity / popularity.sum())
    rows = {m: prof.index(m) for m in prof.model_names}
    walls = []
    for k in range(args.runs):
        tuning = OnlineTuning.for_plan(
            PlanTables(plan, rows), prof, target=0.97, audit_fraction=0.05, period_s=1.0, window=1000, min_records=100
        )
        cpu0, t0 = time.process_time(), time.perf_counter()
        res = simulate(prof, plan, arrivals, samples=samples, cache=PredictionCache(128), tuning=tuning)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        walls.append(wall)
        digest = hashlib.sha256(
            res.finish.tobytes() + res.answer_row.tobytes() + (b"" if res.cached is None else res.cached.tobytes())
        ).hexdigest()[:16]
        line = {
            "run": k,
            "engine": res.engine,
            "requests": n,
            "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3),
            "requests_per_s": round(n / wall),
            "cache_hits": 0 if res.cached is None else int(res.cached.sum()),
            "threshold_changes": len(res.threshold_changes),
            "p95_ms": round(res.percentile_ms(95), 3),
            "digest": digest,
        }
        print(json.dumps(line), flush=True)
    med = statistics.median(walls)
    print(json.dumps({"median_wall_s": round(med, 3), "median_requests_per_s": round(n / med)}))


if __name__ == "__main__":
    main()
