"""Batching across calls (Cloudflow paper, Fig. 8): throughput of a batch-aware model operator, with and without.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_flow_batching.py [--model cnn-wide] [--clients 10]
        [--seconds 5] [--runs 3] [--max-batch 10]

One flow, one operator: ``map(model(<digits model>))`` (the trained digits family from the cache, a TorchAdapter
on one intra-op thread, one CPU worker: one device). ``--clients`` closed-loop client threads each send one-row
calls back to back (a real digits image each) for ``--seconds``; with batching the executor runs up to
``--max-batch`` queued calls in one invocation of the model, without it one call per invocation. Batching off and
on alternate within each run; the table shows the median over runs of throughput (calls/s) and of the p50 and
p99 call latency.
"""

from __future__ import annotations

import argparse
import json
import threading
import time

import numpy as np
from bench_flow_common import machine, med, pct

from cascadeserve.flow import Dataflow, Optimizations, Table, model


def run(
    adapter: object, images: np.ndarray, batching: bool, clients: int, seconds: float, max_batch: int
) -> dict[str, float]:
    fl = Dataflow([("pixels", np.ndarray)])
    fl.output = fl.map(model(adapter))
    ex = fl.deploy(optimize=Optimizations(batching=batching, max_batch=max_batch), workers=1)
    tables = [Table([("pixels", np.ndarray)], [img]) for img in images[:64]]
    for t in tables[:5]:
        ex.execute(t).result(60)
    lat: list[float] = []
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def client(c: int) -> None:
        k = c
        mine = []
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            ex.execute(tables[k % len(tables)]).result(60)
            mine.append((time.perf_counter() - t0) * 1e3)
            k += clients
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    sizes = list(getattr(ex, "batchers", {}).values())
    mean_batch = float(np.mean(sizes[0].sizes)) if sizes and sizes[0].sizes else 1.0
    ex.close()
    return {"throughput": len(lat) / wall, "p50": pct(lat, 50), "p99": pct(lat, 99), "mean_batch": mean_batch}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="cnn-wide")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-batch", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from cascadeserve.models import TorchAdapter
    from cascadeserve.models.families import digits

    print(f"# machine: {machine()}")
    adapter = TorchAdapter(args.model, digits.load(args.model), threads=1)
    _, _, xv, _, _ = digits.split(0)
    res: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for _ in range(args.runs):
        for batching in (False, True):
            res[batching].append(run(adapter, xv, batching, args.clients, args.seconds, args.max_batch))
    rows = {}
    for batching, runs in res.items():
        rows["on" if batching else "off"] = {k: med([r[k] for r in runs]) for k in runs[0]}
    rows["throughput_ratio"] = rows["on"]["throughput"] / rows["off"]["throughput"]  # type: ignore[assignment]
    for k in ("off", "on"):
        r = rows[k]
        print(
            f"batching {k:3s}: {r['throughput']:7.1f} calls/s, p50 {r['p50']:6.1f} ms, p99 {r['p99']:6.1f} ms, "
            f"mean batch {r['mean_batch']:.1f} calls"
        )
    print(f"throughput on/off: x{rows['throughput_ratio']:.2f}")
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
