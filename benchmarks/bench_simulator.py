"""Simulator speed: simulated requests per wall second, one core.

Scenario (issue 2): a 4-model cascade on 4 devices, the Twitter trace's first 20 minutes scaled to a max of
7,600 QPS, batching on (minimum queue length 8). The profile is synthetic with BERT-like runtimes (a fixed
per-batch cost plus a per-sample cost that grows ~3x per model) and 10,000 validation samples, so that the four
devices can carry the peak. Prints one JSON line per run and a summary with the median.

Compile time is kept out of the runs: before them, one tiny simulation compiles the compiled loop (or loads it from
numba's on-disk cache), and its wall time is reported as ``compile_s``. Set ``NUMBA_CACHE_DIR`` to an empty folder
to measure a cold compile. Each run also prints what it simulated (completions, p95 to the microsecond, and a
SHA-256 of every finish time and answering model) so that two versions can be checked for identical outputs, and
its CPU time beside its wall time (on a shared machine the wall time includes waiting for the core); the
script runs unchanged against an older ``src`` (without ``--engine``), for side-by-side comparisons.

Usage: python benchmarks/bench_simulator.py [--runs 5] [--trace PATH-TO-tweets_per_second.txt] [--max-wait-ms MS]
       [--engine auto|compiled|python] [--window 0:1200] [--aimd-target-ms MS]
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
from cascadeserve.policy import AimdBatchLimit
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve
from cascadeserve.simulate import simulate
from cascadeserve.traces import build_trace

TWITTER = Path(__file__).resolve().parents[2] / "shared/data/traces/twitter_2021/tweets_per_second.txt"


def bert_like_profile(n: int = 10_000, seed: int = 0) -> Profile:
    rng = np.random.default_rng(seed)
    fixed = [0.8, 1.2, 2.0, 3.5]  # ms per batch
    per_sample = [0.01, 0.03, 0.09, 0.27]  # ms per sample
    sizes = (1, 8, 32, 128, 512)
    models = [
        ModelProfile(f"bert-{i}", 500.0 * (i + 1), RuntimeCurve(sizes, tuple(f + p * b for b in sizes)))
        for i, (f, p) in enumerate(zip(fixed, per_sample, strict=True))
    ]
    labels = rng.integers(0, 2, n)
    scores = {m.name: rng.random((n, 2)) + np.eye(2)[labels] * (0.4 + 0.3 * i) for i, m in enumerate(models)}
    return Profile.from_scores("bert-like", models, labels, scores, device="synthetic")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--trace", type=Path, default=TWITTER)
    ap.add_argument("--min-queue", type=int, default=8)
    ap.add_argument(
        "--max-wait-ms",
        type=float,
        default=None,
        help="the plan's max wait (default: none, so DEFAULT_MAX_WAIT_MS applies); 1e9 never fires, as plans "
        "without a max wait behaved before the default existed",
    )
    ap.add_argument("--engine", choices=("auto", "compiled", "python"), default=None, help="default: auto")
    ap.add_argument("--window", default="0:1200", help="the trace window in seconds (default: the first 20 minutes)")
    ap.add_argument(
        "--aimd-target-ms",
        type=float,
        default=None,
        help="add an AIMD batch limit with this per-batch target (MS+'s batching; a fresh one per run)",
    )
    args = ap.parse_args()
    kw: dict[str, object] = {} if args.engine is None else {"engine": args.engine}
    compile_s = None
    if args.engine != "python":
        try:
            from cascadeserve.simulate.warm import warm_up
        except ImportError:  # an older src without the compiled loop
            pass
        else:
            compile_s = round(warm_up(), 3)
    print(json.dumps({"compile_s": compile_s}))
    prof = bert_like_profile()
    plan = fixed_plan(
        prof,
        Cascade(tuple(prof.model_names), (0.3, 0.3, 0.3)),
        [Device(name=f"gpu{i}", memory_mb=16_000) for i in range(4)],
        min_queue=args.min_queue,
        max_wait_ms=args.max_wait_ms,
    )
    trace = build_trace(str(args.trace), fmt="per-second", window=args.window, max_qps=7600, seed=0)
    rates = []
    cpu_rates = []  # per second of this process's CPU time: what a core would do if no other job shared it
    for run in range(args.runs):
        t0, c0 = time.perf_counter(), time.process_time()
        if args.aimd_target_ms is not None:
            kw["batch_limit"] = AimdBatchLimit(args.aimd_target_ms / 1000.0)
        res = simulate(prof, plan, trace.arrivals, **kw)  # type: ignore[arg-type]
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        cpu_rates.append(len(trace) / cpu)
        s = res.summary()
        digest = hashlib.sha256(res.finish.tobytes() + res.answer_row.astype("<i8").tobytes()).hexdigest()[:16]
        rates.append(len(trace) / wall)
        print(
            json.dumps(
                {
                    "run": run,
                    "requests": len(trace),
                    "wall_s": round(wall, 3),
                    "requests_per_s": round(len(trace) / wall),
                    "cpu_s": round(cpu, 3),
                    "requests_per_cpu_s": round(len(trace) / cpu),
                    "p95_ms": round(s["p95_ms"], 3),
                    "completed": s["completed"],
                    "outputs_sha256": digest,
                    "engine": getattr(res, "engine", "python"),
                }
            )
        )
    print(
        json.dumps(
            {
                "median_requests_per_s": round(statistics.median(rates)),
                "median_requests_per_cpu_s": round(statistics.median(cpu_rates)),
                "compile_s": compile_s,
                "runs": args.runs,
                "requests": len(trace),
                "mean_qps": round(trace.mean_qps, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
