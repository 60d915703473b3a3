"""Where the runtime spends its time per request, against the simulator (issue 17's load drift on the runtime).

Serves one plan, with emulated devices, from ``serve --emulate``'s app in a **child process** (uvicorn on 127.0.0.1,
no re-planning), and drives it from this process with the open-loop load generator; the same arrivals go through
the simulator. Plans: ``zipf`` (the gear planner's default weights, what ``bench_replan.py``'s arms start with) or
``busy`` (re-planned for the range weights measured in the drift trace's busy window: what ``--replan auto`` swaps
in). Loads: ``busy`` (the drift trace's busy window, ``--seconds`` long around its peak, scaled as in
``bench_replan.py``) or ``poisson:Q`` (a Poisson process of Q QPS), to find the sustained throughput.

Per load it prints the client's and the server's p95, the simulator's p95, the device's busy fraction on both, and
per model the **device overshoot**: how much longer each emulated batch held the device than the profiled runtime
it sleeps (the runtime's per-batch cost that the simulator charges as the plan's ``batch_overhead_ms``).
``--py-spy FILE`` samples the server process with py-spy (``--nonblocking``, 250 Hz) and writes the folded stacks.

    .venv/bin/python benchmarks/bench_runtime_cost.py --profile profiles/tweets-text5 --slo latency:100 \\
        --device-memory-mb 120 --max-qps 450 --plan busy --load busy poisson:300 poisson:450 [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_replan import PHASE_S, BatchTimes, Setup, drift_counts, parse_slo, zipf_plan

from cascadeserve.eval.loadgen import run_load
from cascadeserve.http import Server, ServerOptions, build_app
from cascadeserve.plan import GearPlan
from cascadeserve.planner.replan import replan
from cascadeserve.policy.drift import range_weights
from cascadeserve.profile import Profile, load_profile
from cascadeserve.runtime import LocalBackend, RuntimeOptions
from cascadeserve.simulate import simulate
from cascadeserve.traces import arrivals_from_counts, poisson


def busy_plan(profile: Profile, zipf: GearPlan, max_qps: float, phase_s: int) -> GearPlan:
    """The plan ``--replan auto`` swaps in: ``zipf`` re-planned for the busy window's measured range weights."""
    busy = drift_counts(max_qps, phase_s)[phase_s:].astype(np.float64)
    return replan(profile, zipf, range_weights(busy, zipf.max_qps, len(zipf.gears)))


def arrivals(load: str, max_qps: float, phase_s: int, seconds: float, seed: int) -> np.ndarray:
    if load == "busy":
        counts = drift_counts(max_qps, phase_s)[phase_s:]
        mid = len(counts) // 2
        half = int(seconds) // 2
        return arrivals_from_counts(counts[max(0, mid - half) : mid - half + int(seconds)], seed=seed)
    kind, _, q = load.partition(":")
    if kind != "poisson" or not q:
        raise SystemExit(f"--load {load!r}: use busy or poisson:Q")
    return np.asarray(poisson(float(q), seconds, seed=seed).arrivals)


def _child(conn: Connection, profile_dir: Path, plan_json: str, uvloop: bool, switch_s: float | None) -> None:
    """Serve ``plan`` (emulated) until told to stop; send back the batch times."""
    if switch_s is not None:
        sys.setswitchinterval(switch_s)
    profile = load_profile(profile_dir)
    times = BatchTimes()
    app = build_app(
        profile,
        GearPlan.from_json(plan_json),
        emulate=True,
        name="tweets",
        runtime_options=RuntimeOptions(max_in_flight=4096),
        server_options=ServerOptions(stop_grace_s=5.0),
        backend=LocalBackend(),
        observer=times,
    )
    server = Server(app, "127.0.0.1", 0, grace_s=5.0)
    if uvloop:  # as `cascadeserve serve` runs it (uvicorn's default loop: uvloop when installed)
        import uvloop as uv

        uv.install()
    server.start()
    conn.send((server.url, os.getpid()))
    conn.recv()
    conn.send(times.rows)
    server.stop()


def run_one(
    profile: Profile,
    plan: GearPlan,
    setup: Setup,
    arr: np.ndarray,
    split_s: float,
    spy: Path | None,
    *,
    uvloop: bool = False,
    switch_s: float | None = None,
) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child, args=(child, setup.profile_dir, plan.to_json(), uvloop, switch_s))
    proc.start()
    url, pid = parent.recv()
    spy_proc = None
    if spy is not None:
        exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        spy_proc = subprocess.Popen(
            [exe, "record", "--pid", str(pid), "--nonblocking", "--rate", "250", "--format", "raw", "-o", str(spy)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    try:
        rep = asyncio.run(run_load(url, "tweets", arr, sample_ids=profile.sample_ids, labels=profile.labels))
    finally:
        if spy_proc is not None:
            spy_proc.send_signal(2)
            spy_proc.wait(30)
        parent.send("stop")
        rows = parent.recv()
        proc.join(30)
    times = BatchTimes()
    times.rows = rows
    sim = simulate(profile, plan, arr)
    busy_sim = float(np.median(sim.tick_busy[:, 0])) if sim.tick_busy.size else 0.0
    return {
        "sent": rep.sent,
        "ok": rep.ok,
        "accuracy": rep.accuracy,
        "p95_ms": rep.p95_ms,
        "server_p95_ms": rep.server_p95_ms,
        "server_p50_ms": rep.server_p50_ms,
        "send_lag_p99_ms": rep.send_lag_p99_ms,
        "sim_p95_ms": sim.percentile_ms(95),
        "sim_accuracy": sim.accuracy,
        "sim_busy_median": round(busy_sim, 3),
        "batches": times.summary(profile, split_s),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", type=Path, required=True)
    ap.add_argument("--slo", type=parse_slo, required=True)
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--device-memory-mb", type=float, default=16000.0)
    ap.add_argument("--max-qps", type=float, default=450.0)
    ap.add_argument("--phase-s", type=int, default=PHASE_S, help="the drift trace's window (its scale)")
    ap.add_argument("--plan", choices=("zipf", "busy"), default="busy")
    ap.add_argument("--load", nargs="+", default=["busy"])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--py-spy", type=Path, default=None, help="folded stacks of the server process (first run)")
    ap.add_argument("--uvloop", action="store_true", help="serve on uvloop, as `cascadeserve serve` does")
    ap.add_argument("--switch-interval", type=float, default=None, help="sys.setswitchinterval in the server (s)")
    ap.add_argument("--batch-overhead-ms", type=float, default=None, help="the plan's per-batch cost (simulator)")
    ap.add_argument("--max-busy", type=float, default=1.0, help="the planner's device headroom (plan --max-busy)")
    ap.add_argument(
        "--sim-overheads",
        type=float,
        nargs="*",
        default=[],
        help="also simulate the plan with these per-batch costs (ms) on each load's arrivals (seed 0), no runtime",
    )
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    profile = load_profile(a.profile)
    setup = Setup(a.profile, a.slo, a.devices, a.device_memory_mb, a.batch_overhead_ms, a.max_busy)
    plan = zipf_plan(profile, a.max_qps, setup)
    if a.plan == "busy":
        plan = busy_plan(profile, plan, a.max_qps, a.phase_s)
    print(f"load average at start: {os.getloadavg()}", flush=True)
    for g, gear in enumerate(plan.gears):
        print(f"gear {g}: {gear.models} {gear.thresholds} predicted p95 {gear.predicted_p95_ms} ms", flush=True)
    for load in a.load:
        arr = arrivals(load, a.max_qps, a.phase_s, a.seconds, 0)
        for ov in a.sim_overheads:
            res = simulate(profile, plan.model_copy(update={"batch_overhead_ms": ov}), arr)
            busy = float(np.median(res.tick_busy[:, 0])) if res.tick_busy.size else 0.0
            print(json.dumps({"load": load, "sim_overhead_ms": ov, "sim_p95_ms": res.percentile_ms(95), "busy": busy}))
    if a.sim_overheads:
        return
    out = []
    for load in a.load:
        per = []
        for seed in range(a.runs):
            arr = arrivals(load, a.max_qps, a.phase_s, a.seconds, seed)
            t0 = time.perf_counter()
            spy = a.py_spy if seed == 0 and a.py_spy is not None else None
            if spy is not None and len(a.load) > 1:
                spy = spy.with_name(f"{spy.stem}-{load.replace(':', '')}{spy.suffix}")
            r = run_one(profile, plan, setup, arr, a.seconds / 2, spy, uvloop=a.uvloop, switch_s=a.switch_interval)
            r.update({"load": load, "seed": seed, "wall_s": round(time.perf_counter() - t0, 1)})
            print(json.dumps(r), flush=True)
            per.append(r)
        keys = ("p95_ms", "server_p95_ms", "sim_p95_ms", "send_lag_p99_ms", "accuracy", "sim_accuracy")
        med = {k: statistics.median(float(p[k]) for p in per) for k in keys}
        print(json.dumps({"load": load, "median_of": len(per), **med}), flush=True)
        out.append({"load": load, "runs": per, "median": med})
    print(f"load average at end: {os.getloadavg()}", flush=True)
    if a.out is not None:
        a.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
