"""In-process runtime benchmarks: throughput through a 2-stage cascade of no-op models, and the producer tick.

    .venv/bin/python benchmarks/bench_runtime.py [--requests 200000] [--runs 5] [--json]

Throughput: requests are submitted in bursts of 512 rows straight to :meth:`Runtime.submit` (no HTTP), on one
local device thread running two no-op numpy models; half the samples are unsure at stage 1 and go on to stage 2.
Batches fire at 256 queued samples or after 2 ms. The figure is answered requests per second of wall time.
Producer tick: the cost of one :meth:`Producer.tick` (QPS meter + gear selector + Q0) on a 10-gear plan.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import numpy as np

from cascadeserve.plan import Device, Gear, GearPlan, GearReplica, Replica
from cascadeserve.runtime import RuntimeOptions, local_runtime


def _noop(batch: np.ndarray) -> np.ndarray:
    # even ids: sure (margin 1); odd ids: unsure (margin 0) -> forwarded to stage 2
    even = (batch % 2 == 0).astype(np.float64)
    return np.column_stack([0.5 + even / 2, 0.5 - even / 2])


def _plan(n_gears: int = 1, min_queue: int = 256) -> GearPlan:
    edges = np.linspace(0, 1e6, n_gears + 1)
    gears = tuple(
        Gear(
            qps_low=float(edges[g]),
            qps_high=float(edges[g + 1]),
            models=("a", "b"),
            thresholds=(0.5,),
            replicas=(
                GearReplica(model="a", device="d0", share=1.0, min_queue=min_queue),
                GearReplica(model="b", device="d0", share=1.0),
            ),
        )
        for g in range(n_gears)
    )
    return GearPlan(
        profile="noop",
        devices=(Device(name="d0", memory_mb=10),),
        replicas=(Replica(model="a", device="d0"), Replica(model="b", device="d0")),
        gears=gears,
        max_wait_ms=2.0,
    )


async def _throughput(n: int, burst: int = 512) -> float:
    rt = local_runtime(_plan(), {"a": _noop, "b": _noop}, options=RuntimeOptions(max_in_flight=None))
    await rt.start()
    payloads = list(range(burst))
    futures = []
    t0 = time.perf_counter()
    for _ in range(n // burst):
        futures += [r.future for r in rt.submit(payloads)]
        await asyncio.sleep(0)
    await asyncio.gather(*futures)
    dt = time.perf_counter() - t0
    await rt.stop(grace_s=0)
    return len(futures) / dt


async def _tick_cost(n: int = 100_000) -> float:
    rt = local_runtime(_plan(n_gears=10), {"a": _noop, "b": _noop}, options=RuntimeOptions(run_producer=False))
    await rt.start()
    prod = rt.producer
    t0 = time.perf_counter()
    for k in range(1, n + 1):
        prod.meter.record(37)
        prod.tick(k * 0.1)
    dt = time.perf_counter() - t0
    await rt.stop(grace_s=0)
    return dt / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rates = [asyncio.run(_throughput(args.requests)) for _ in range(args.runs)]
    ticks = [asyncio.run(_tick_cost()) for _ in range(args.runs)]
    out = {
        "inprocess_req_per_s_median": statistics.median(rates),
        "inprocess_req_per_s_runs": rates,
        "producer_tick_us_median": statistics.median(ticks),
        "producer_tick_us_runs": ticks,
    }
    print(json.dumps(out, indent=2) if args.json else out)


if __name__ == "__main__":
    main()
