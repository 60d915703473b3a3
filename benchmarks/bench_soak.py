"""Soak: real digits models under steady load at 80% of capacity for ten minutes; does memory or latency drift?

    .venv/bin/python benchmarks/bench_soak.py [--duration 600] [--load 0.8] [--capacity-qps Q] [--json]

The same deployment as ``bench_overload.py`` (digits family, planner's plan for p95 ≤ 150 ms on two devices,
``cascadeserve serve`` in a subprocess, the client in its own process). Capacity is what this machine sustains,
not the plan's promise: unless ``--capacity-qps`` is given, a 10 s closed-loop calibration (16 clients) against the
same server measures it (``bench_overload.measured_capacity``), and the soak offers ``load`` times that. The
server's RSS is sampled every 10 s; growth is measured from the end of the first minute (warm-up: model buffers,
allocator pools) to the end. Latency is summarised per minute (p50, p99 of the accepted requests, by send time), and
each failed connection by its type and minute.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
from bench_overload import SLO_MS, measured_capacity, rss_kb, run_client, setup, start_server, stop_server


def _bursts(times: list[float], gap_s: float = 1.0) -> list[tuple[float, int, float]]:
    """Sheds grouped where they come within ``gap_s`` of each other: (start s, count, span s) of the 20 largest."""
    out: list[tuple[float, int, float]] = []
    for t in sorted(times):
        if out and t - (out[-1][0] + out[-1][2]) <= gap_s:
            start, n, _ = out[-1]
            out[-1] = (start, n + 1, t - start)
        else:
            out.append((t, 1, 0.0))
    return [(round(s, 2), n, round(w, 3)) for s, n, w in sorted(out, key=lambda b: -b[1])[:20]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=600.0)
    ap.add_argument("--load", type=float, default=0.8)
    ap.add_argument("--capacity-qps", type=float, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        models, prof, plan, plan_capacity = setup(Path(d))
        proc, url = start_server(models, prof, plan)
        capacity = args.capacity_qps if args.capacity_qps is not None else measured_capacity(url)
        qps = args.load * capacity
        rss: list[tuple[float, int]] = []
        stop = threading.Event()
        t_start = time.monotonic()

        def sample() -> None:
            while not stop.is_set():
                rss.append((time.monotonic() - t_start, rss_kb(proc.pid)))
                stop.wait(10.0)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            c = run_client(url, qps, args.duration, seed=7)
        finally:
            stop.set()
            sampler.join()
            stop_server(proc)
    lat = np.asarray(c["latency_ms"])
    t_ok = np.asarray(c["t_ok"])
    minutes = []
    for m in range(int(np.ceil(args.duration / 60.0))):
        sel = lat[(t_ok >= 60 * m) & (t_ok < 60 * (m + 1))]
        if len(sel):
            minutes.append(
                {
                    "minute": m,
                    "n": len(sel),
                    "p50_ms": round(float(np.percentile(sel, 50)), 1),
                    "p99_ms": round(float(np.percentile(sel, 99)), 1),
                }
            )
    warm = next((kb for t, kb in rss if t >= 60.0), rss[0][1] if rss else 0)
    end = rss[-1][1] if rss else 0
    p99s = [m["p99_ms"] for m in minutes[1:]] or [0.0]
    summary = {
        "plan_capacity_qps": round(plan_capacity, 1),
        "measured_capacity_qps": round(capacity, 1),
        "offered_qps": round(qps, 1),
        "duration_s": args.duration,
        "sent": c["sent"],
        "ok": c["ok"],
        "shed": c["shed"],
        "status_counts": c["status_counts"],
        # each failed connection's time (s since the first send) and the client's error: a long run's errors,
        # explained by when they came (beside the p99 by minute) and what they were
        "connection_errors_by_type": dict(Counter(e.split(":", 1)[0] for _, e in c["connection_errors"])),
        "connection_errors_by_minute": dict(Counter(int(t // 60) for t, _ in c["connection_errors"])),
        "connection_errors_first": c["connection_errors"][:20],
        # each 503's send time, by minute and by the server's reason: sheds at 80 % load come in bursts (stalls)
        "shed_by_minute": dict(Counter(int(t // 60) for t in c["t_shed"])),
        "shed_reasons": c["shed_reasons"],
        "shed_bursts": _bursts(c["t_shed"]),
        "accepted_p50_ms": c["p50_ms"],
        "accepted_p99_ms": c["p99_ms"],
        "slo_p95_ms": SLO_MS,
        "rss_mb_after_1min": round(warm / 1024, 1),
        "rss_mb_end": round(end / 1024, 1),
        "rss_growth_pct": round(100.0 * (end - warm) / warm, 2) if warm else None,
        "rss_samples_mb": [round(kb / 1024, 1) for _, kb in rss],
        "p99_by_minute_ms": [m["p99_ms"] for m in minutes],
        "p99_max_over_min_after_warmup": round(max(p99s) / max(min(p99s), 1e-9), 2),
        "minutes": minutes,
    }
    print(json.dumps(summary, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
