"""Simulator fidelity (paper Fig. 13): 12 one-gear plans per profile, simulator vs ``serve --emulate`` over HTTP.

    .venv/bin/python benchmarks/bench_fidelity.py [--profile tests/data/profiles/tweets-sklearn] [--qps 100]
        [--duration 8] [--json]

The plans are what ``cascadeserve plan fixed`` makes on 2 devices with a 20 ms maximum wait: each model alone, the
cheapest model before each of the two others (threshold ``--pair-threshold``), and all three in order, each with a
minimum queue of 1 and of 4. The trace is Poisson at ``--qps`` for ``--duration`` s. It runs
:func:`cascadeserve.eval.fidelity.fidelity` with the calibration run first and prints one row per plan plus how
many plans are within ±10% p95 (client and server side, raw and calibrated).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from cascadeserve.cascade import Cascade
from cascadeserve.eval.fidelity import FidelityRow, calibrate, fidelity, mean_qps
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import Profile, load_profile
from cascadeserve.traces import poisson


def plans(prof: Profile, out: Path, pair_threshold: float, triple_thresholds: tuple[float, float]) -> list[Path]:
    """The 12 plans of the module docstring, written under ``out``."""
    a, b, c = prof.by_cost(1)[:3]
    cascades = [
        Cascade((a,), ()),
        Cascade((b,), ()),
        Cascade((c,), ()),
        Cascade((a, b), (pair_threshold,)),
        Cascade((a, c), (pair_threshold,)),
        Cascade((a, b, c), triple_thresholds),
    ]
    mem = sum(prof.model(m).memory_mb for m in (a, b, c)) + 1.0
    devices = [Device(name=f"dev{i}", memory_mb=mem) for i in range(2)]
    paths = []
    for casc in cascades:
        for q in (1, 4):
            n = len(paths) + 1
            plan = fixed_plan(prof, casc, devices, min_queue=q, max_wait_ms=20.0)
            paths.append(plan.save(out / f"p{n:02d}-{'+'.join(casc.models)}-q{q}.json"))
    return paths


def within(rows: list[FidelityRow], attr: str, bound: float = 0.10) -> int:
    return sum(1 for r in rows if getattr(r, attr) is not None and abs(getattr(r, attr)) <= bound)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", type=Path, default=Path("tests/data/profiles/tweets-sklearn"))
    ap.add_argument("--qps", type=float, default=100.0)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pair-threshold", type=float, default=0.4)
    ap.add_argument("--triple-thresholds", type=float, nargs=2, default=(0.4, 0.3))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    prof = load_profile(args.profile)
    arrivals = poisson(args.qps, args.duration, seed=args.seed).arrivals
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        paths = plans(prof, work, args.pair_threshold, tuple(args.triple_thresholds))
        overheads = calibrate(args.profile, prof, work, qps=mean_qps(arrivals))
        rows = fidelity(args.profile, paths, arrivals, overheads=overheads)
    summary = {
        "plans": len(rows),
        "within_10pct": {
            a: within(rows, a)
            for a in ("p95_error", "server_p95_error", "calibrated_p95_error", "calibrated_server_p95_error")
        },
        "max_accuracy_error_points": max(abs(r.accuracy_error_points) for r in rows),
    }
    if args.json:
        print(json.dumps({"overheads_ms": overheads.to_dict(), "rows": [r.to_dict() for r in rows], **summary}))
        return
    print(f"{args.profile} poisson {args.qps} qps x {args.duration} s ({len(arrivals)} requests)")
    print("overheads (ms):", {k: round(v, 3) for k, v in overheads.to_dict().items()})
    print(
        "| plan | sim p95 ms | calibrated sim p95 ms | run p95 ms (HTTP) | run p95 ms (server) | p95 err"
        " | server p95 err | calibrated err | calibrated server err | acc sim = run |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        cal = r.calibrated_sim_p95_ms or 0.0
        print(
            f"| {r.plan.removesuffix('.json')} | {r.sim_p95_ms:.2f} | {cal:.2f} | {r.run_p95_ms:.2f}"
            f" | {r.run_server_p95_ms:.2f} | {r.p95_error:+.1%} | {r.server_p95_error:+.1%}"
            f" | {r.calibrated_p95_error or 0.0:+.1%} | {r.calibrated_server_p95_error or 0.0:+.1%}"
            f" | {r.sim_accuracy:.4f} {'=' if r.accuracy_error_points == 0 else '≠'} {r.run_accuracy:.4f} |"
        )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
