"""Vectorised cascade evaluation speed: threshold vectors per second for a 3-stage cascade over 10,000 samples.

Compares the two evaluation paths of :func:`cascadeserve.cascade.evaluate` in the same run: prefix bitsets (the
default up to 16,384 samples) and dense boolean broadcasting (the fallback). Target (issue 2): ≥ 10,000 vectors/s.

Usage: python benchmarks/bench_cascade_eval.py [--runs 5] [--vectors 10000] [--samples 10000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from cascadeserve.cascade import evaluate
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve


def profile(n: int, seed: int = 0) -> Profile:
    rng = np.random.default_rng(seed)
    models = [ModelProfile(f"m{i}", 100.0, RuntimeCurve((1, 64), (1.0 + i, 10.0 * (1 + i)))) for i in range(3)]
    labels = rng.integers(0, 3, n)
    scores = {m.name: rng.random((n, 3)) + np.eye(3)[labels] * (i + 1) * 0.3 for i, m in enumerate(models)}
    return Profile.from_scores("bench", models, labels, scores)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--vectors", type=int, default=10_000)
    ap.add_argument("--samples", type=int, default=10_000)
    args = ap.parse_args()
    prof = profile(args.samples)
    th = np.random.default_rng(1).random((args.vectors, 2))
    models = ("m0", "m1", "m2")
    t0 = time.perf_counter()
    evaluate(prof, models, th[:1])  # builds the per-profile bitset index once
    index_s = time.perf_counter() - t0
    out: dict[str, float] = {"index_build_s": round(index_s, 4)}
    for method in ("bitsets", "dense"):
        rates = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            evaluate(prof, models, th, method=method)
            rates.append(args.vectors / (time.perf_counter() - t0))
        out[f"{method}_vectors_per_s"] = round(statistics.median(rates))
    out["ratio_bitsets_over_dense"] = round(out["bitsets_vectors_per_s"] / out["dense_vectors_per_s"], 2)
    print(json.dumps({"samples": args.samples, "vectors": args.vectors, "runs": args.runs, **out}))


if __name__ == "__main__":
    main()
