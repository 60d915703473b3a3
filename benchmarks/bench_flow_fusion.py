"""Operator fusion (Cloudflow paper, Fig. 4): a chain of 2-10 light operators, fused vs unfused, local and Ray.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_flow_fusion.py [--lengths 2,4,6,8,10] [--size-kb 100]
        [--calls 20] [--runs 3] [--backends local,ray]

Each operator passes its input (a numpy array of ``--size-kb``) on unchanged, as in the paper. For every chain
length and backend, the same flow is deployed twice, with fusion (one task) and without (one task per operator),
and each deployment answers ``--calls`` sequential one-row calls (after 3 warm-up calls). A run's figure is the
median and p99 latency of its calls; the table shows the median over ``--runs`` runs, fused and unfused side by
side in one run. On the embedded executor an unfused chain costs a thread hop per operator; on Ray an actor call
per operator with the table passed through the object store.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from bench_flow_common import machine, med, pct, start_ray

from cascadeserve.flow import NONE, Dataflow, Optimizations, Table


def step(x: np.ndarray) -> np.ndarray:
    return x


def chain(n: int) -> Dataflow:
    fl = Dataflow([("x", np.ndarray)])
    node = fl
    for _ in range(n):
        node = node.map(step, names=["x"])
    fl.output = node
    return fl


def measure(fl: Dataflow, backend: str, fused: bool, payload: np.ndarray, calls: int) -> list[float]:
    opts = Optimizations() if fused else NONE
    ex = fl.deploy(backend, optimize=opts, **({"workers": 2} if backend == "ray" else {}))
    table = Table([("x", np.ndarray)], [payload])
    try:
        for _ in range(3):
            ex.execute(table).result(60)
        out = []
        for _ in range(calls):
            t0 = time.perf_counter()
            ex.execute(table).result(60)
            out.append((time.perf_counter() - t0) * 1e3)
        return out
    finally:
        ex.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="2,4,6,8,10")
    ap.add_argument("--size-kb", type=int, default=100)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--backends", default="local,ray")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    print(f"# machine: {machine()}")
    payload = np.random.default_rng(0).random(args.size_kb * 1024 // 8)
    lengths = [int(x) for x in args.lengths.split(",")]
    backends = args.backends.split(",")
    if "ray" in backends:
        start_ray()
        measure(chain(2), "ray", True, payload, 20)  # warm Ray's worker pool before the first measured deployment
    rows = []
    for backend in backends:
        for n in lengths:
            fl = chain(n)
            per: dict[str, list[tuple[float, float]]] = {"fused": [], "unfused": []}
            for _ in range(args.runs):
                for mode in ("unfused", "fused"):
                    lat = measure(fl, backend, mode == "fused", payload, args.calls)
                    per[mode].append((med(lat), pct(lat, 99)))
            row = {"backend": backend, "length": n}
            for mode, vals in per.items():
                row[f"{mode}_p50_ms"] = med([v[0] for v in vals])
                row[f"{mode}_p99_ms"] = med([v[1] for v in vals])
            row["speedup_p50"] = row["unfused_p50_ms"] / row["fused_p50_ms"]
            rows.append(row)
            print(
                f"{backend:5s} length {n:2d}: unfused p50 {row['unfused_p50_ms']:7.2f} ms"
                f" p99 {row['unfused_p99_ms']:7.2f} | fused p50 {row['fused_p50_ms']:7.2f} ms"
                f" p99 {row['fused_p99_ms']:7.2f} | x{row['speedup_p50']:.2f}",
                flush=True,
            )
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
