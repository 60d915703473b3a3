"""Competitive execution (Cloudflow paper, Fig. 5): tail latency of a high-variance operator, 1 vs 3 replicas.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_flow_competitive.py [--thetas 1,2,4] [--unit-ms 5]
        [--calls 100] [--runs 3] [--replicas 3]

A 3-stage pipeline as in the paper: a no-op map, a map that sleeps for a Gamma(k=3, θ) sample (θ in units of
``--unit-ms`` ms; every replica draws its own sample), and a no-op map; the middle one is marked
``high_variance``. Each deployment (embedded executor, 12 CPU workers) answers ``--calls`` sequential one-row calls;
1 replica (competitive execution off) and ``--replicas`` replicas alternate within each run. The table shows, per
θ, the median over runs of each run's p50 and p99, and the reduction (the paper: 71/94/86% at the tail, 39/63/62%
at the median, for θ = 1/2/4).
"""

from __future__ import annotations

import argparse
import json
import random
import time

from bench_flow_common import machine, med, pct

from cascadeserve.flow import Dataflow, Optimizations, Table

UNIT_S = 0.005
THETA = 1.0
WORKERS = 12


def first(x: int) -> int:
    return x


def gamma_sleep(x: int) -> int:
    time.sleep(random.gammavariate(3.0, THETA) * UNIT_S)
    return x


def last(gamma_sleep: int) -> int:
    return gamma_sleep


def run(replicas: int, calls: int) -> list[float]:
    fl = Dataflow([("x", int)])
    fl.output = fl.map(first, names=["x"]).map(gamma_sleep, high_variance=True).map(last)
    # losing replicas sleep on to the end of their sample (a thread cannot be cancelled): enough workers that they
    # do not delay the next call's replicas, as the paper's pool of executors does not
    ex = fl.deploy(optimize=Optimizations(replicas=replicas, competitive=replicas > 1), workers=WORKERS)
    t = Table([("x", int)], [1])
    try:
        ex.execute(t).result(60)
        out = []
        for _ in range(calls):
            t0 = time.perf_counter()
            ex.execute(t).result(60)
            out.append((time.perf_counter() - t0) * 1e3)
        return out
    finally:
        ex.close()


def main() -> None:
    global UNIT_S, THETA
    ap = argparse.ArgumentParser()
    ap.add_argument("--thetas", default="1,2,4")
    ap.add_argument("--unit-ms", type=float, default=5.0)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    UNIT_S = args.unit_ms / 1000.0
    random.seed(0)
    print(f"# machine: {machine()}")
    rows = []
    for theta in [float(x) for x in args.thetas.split(",")]:
        THETA = theta
        res: dict[int, list[tuple[float, float]]] = {1: [], args.replicas: []}
        for _ in range(args.runs):
            for k in res:
                lat = run(k, args.calls)
                res[k].append((pct(lat, 50), pct(lat, 99)))
        one, many = res[1], res[args.replicas]
        row = {
            "theta": theta,
            "p50_1": med([v[0] for v in one]),
            "p99_1": med([v[1] for v in one]),
            f"p50_{args.replicas}": med([v[0] for v in many]),
            f"p99_{args.replicas}": med([v[1] for v in many]),
        }
        row["tail_cut_pct"] = 100 * (1 - row[f"p99_{args.replicas}"] / row["p99_1"])
        row["median_cut_pct"] = 100 * (1 - row[f"p50_{args.replicas}"] / row["p50_1"])
        rows.append(row)
        print(
            f"theta {theta:g}: 1 replica p50 {row['p50_1']:.1f} p99 {row['p99_1']:.1f} ms | {args.replicas} replicas "
            f"p50 {row[f'p50_{args.replicas}']:.1f} p99 {row[f'p99_{args.replicas}']:.1f} ms"
            f" | tail -{row['tail_cut_pct']:.0f}%"
            f" median -{row['median_cut_pct']:.0f}%",
            flush=True,
        )
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
