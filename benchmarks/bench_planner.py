"""Planner benchmarks (issue 3): constrained-space planning time, full-space planning time, planner quality.

Run: ``OMP_NUM_THREADS=1 taskset -c 0 .venv/bin/python benchmarks/bench_planner.py [--repeats 5] [--json]``

* **constrained**: one planner run on the paper's constrained space (every model on one device, batch size 1,
  one range) with the committed real profile ``tests/data/profiles/tweets-sklearn``, p95 ≤ 3 ms at 500 QPS.
  Target ≤ 0.05 s.
* **full**: 5 models (a synthetic BERT tiny→base-like family: runtimes and memory shaped like the paper's, 2,000
  validation samples), 16 devices of 500 MB (so placement must prune), 20 ranges, max QPS 7,600 (the paper's
  scaling of the first 20 minutes of the Twitter trace) with the empirical QPS distribution of that trace window,
  p95 ≤ 100 ms. Target ≤ 10 s on one core.
* **quality**: ``compare_planner`` on the real profile (hypervolume fraction of exhaustive). Target ≥ 0.99.

Medians over ``--repeats`` runs; ``full`` also reports the planner's CPU seconds (``median_cpu_s``), less inflated
than wall time on a shared machine. ``--sim-engine python`` runs SP4's checks on the Python event loop (the
planner without the compiled simulator), for the comparison in ``RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from cascadeserve.eval.quality import compare_planner
from cascadeserve.plan import SLO, Device
from cascadeserve.planner import Planner, QpsDistribution
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve, load_profile

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "data" / "profiles" / "tweets-sklearn"
TWITTER = ROOT.parent / "shared" / "data" / "traces" / "twitter_2021" / "tweets_per_second.txt"


def bert_like(n: int = 2000, seed: int = 0) -> Profile:
    """Five models of rising cost and accuracy (BERT tiny, mini, small, medium, base in shape)."""
    rng = np.random.default_rng(seed)
    spec = [  # name, MB, ms at batch 1 / 8 / 64, signal strength
        ("tiny", 20, (1.0, 1.3, 4.0), 0.35),
        ("mini", 45, (1.5, 2.2, 8.0), 0.45),
        ("small", 115, (2.5, 4.0, 16.0), 0.55),
        ("medium", 165, (4.0, 7.0, 30.0), 0.65),
        ("base", 420, (7.0, 14.0, 70.0), 0.8),
    ]
    labels = rng.integers(0, 2, n)
    hard = rng.random(n)  # shared per-sample difficulty, so models agree on which samples are hard
    models, scores = [], {}
    for name, mb, ms, strength in spec:
        models.append(ModelProfile(name, float(mb), RuntimeCurve((1, 8, 64), ms)))
        logits = rng.normal(0, 1, (n, 2)) * 0.5
        logits[np.arange(n), labels] += strength * 2.0 * (1.2 - hard)
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        scores[name] = e / e.sum(axis=1, keepdims=True)
    return Profile.from_scores("bert-like", models, labels, scores, device="synthetic", source="bench_planner.py")


def bench_constrained(repeats: int) -> dict[str, float]:
    prof = load_profile(REAL)
    dev = [Device(name="dev0", memory_mb=sum(m.memory_mb for m in prof.models) + 1)]
    times = []
    for _ in range(repeats):
        pl = Planner(n_ranges=1, levels=10, max_batch=1)
        t0 = time.perf_counter()
        pl.fit(prof, dev, SLO(kind="p95_ms", value=3.0), 500)
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times)}


def bench_full(repeats: int, audit_fraction: float = 0.0) -> dict[str, object]:
    prof = bert_like()
    devs = [Device(name=f"dev{i}", memory_mb=500) for i in range(16)]
    dist = QpsDistribution.parse(f"trace:{TWITTER}@0:1200" if TWITTER.is_file() else "zipf")
    # Loading and windowing the 22-day trace file is the traces module's cost, paid once per distribution; it is
    # timed apart from the planner (the distribution caches its range weights).
    t0 = time.perf_counter()
    dist.weights(7600, 20)
    load_s = time.perf_counter() - t0
    times, cpu = [], []
    report: dict[str, object] = {}
    for _ in range(repeats):
        pl = Planner(n_ranges=20, qps_dist=dist, seed=0, audit_fraction=audit_fraction)
        t0, c0 = time.perf_counter(), time.process_time()
        pl.fit(prof, devs, SLO(kind="p95_ms", value=100.0), 7600)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        assert pl.report_ is not None
        report = pl.report_.to_dict()
    return {
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        # CPU seconds of this process (one thread): on a shared machine, less inflated by other jobs than wall time
        "median_cpu_s": statistics.median(cpu),
        "trace_load_s": load_s,
        "report": report,
    }


def bench_quality() -> dict[str, object]:
    prof = load_profile(REAL)
    dev = [Device(name="dev0", memory_mb=sum(m.memory_mb for m in prof.models) + 1)]
    r = compare_planner(prof, dev, 500)
    return {k: v for k, v in r.items() if k != "frontiers"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", choices=["constrained", "full", "quality"], default=None)
    ap.add_argument(
        "--audit-fraction",
        type=float,
        default=0.0,
        help="full: plan for online tuning with this audit share (SP4's checks then run the reference simulator)",
    )
    ap.add_argument(
        "--sim-engine",
        choices=["auto", "python"],
        default="auto",
        help="python: SP4's checks on the Python event loop (the planner without the compiled simulator)",
    )
    a = ap.parse_args()
    if a.sim_engine != "auto":
        import functools

        import cascadeserve.planner.batching as checks

        checks.simulate = functools.partial(checks.simulate, engine=a.sim_engine)  # type: ignore[assignment]
    out: dict[str, object] = {}
    if a.only in (None, "constrained"):
        out["constrained"] = bench_constrained(a.repeats)
    if a.only in (None, "full"):
        out["full"] = bench_full(a.repeats, a.audit_fraction)
    if a.only in (None, "quality"):
        out["quality"] = bench_quality()
    print(json.dumps(out, indent=2, default=float))


if __name__ == "__main__":
    main()
