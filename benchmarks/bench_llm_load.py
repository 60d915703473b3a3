"""Gears under an LLM load spike: does a gear plan hold the p95 SLO through a 3x spike where a fixed threshold breaks?

Run: ``.venv/bin/python benchmarks/bench_llm_load.py --profile DIR --slo-ms S --base Q [--peak 3Q]
[--duration-s 240 --spike-at-s 90 --spike-width-s 60] [--devices 2] [--runs 1]
[--models MODELS.yaml --validation FILE.jsonl] [--calibrate-from gears]``

Three plans of one LLM family's profile on the same devices and SLO (p95 <= ``--slo-ms``):

* ``gears``: the planner's gear plan up to the peak QPS (one gear per QPS range: under load, fewer prompts escalate);
* ``fixed@base``: one gear, planned for the base load (what a router with one tuned threshold runs);
* ``fixed@peak``: one gear, planned for the peak (a threshold safe at the peak, held at every load).

Each replays one trace (``synthetic:spike``: ``--base`` QPS, ``--peak`` for ``--spike-width-s`` from
``--spike-at-s``, Poisson arrivals) twice: simulated (``cascadeserve.simulate``), and served by ``cascadeserve
serve`` in its own process, emulated devices from the profile (default) or the real models (``--models``, sending
the validation file's rows), driven open loop by ``cascadeserve.eval.loadgen``. Per plan: the p95 and accuracy of
each 30 s window of arrival time (simulated and served), and over the spike and outside it.

``--calibrate-from PLAN`` first serves that plan over the same trace once and calibrates the profile from the live
server (``cascadeserve profile calibrate --url``: the batch sizes and the contention the trace itself forms), then
plans and compares as above with the calibrated profile: the path for a user whose probe (``calibrate --models``)
did not form the batches that the peak forms.

Each served run is also calibrated from itself and simulated again (``replayed_with_run_costs``): where the simulated
p95 misses the served one but the replay meets it, the queues and gears were simulated right and the host ran at
another speed than the profile's (near saturation a few per cent of service time move the p95 several times that).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from cascadeserve.eval.fidelity import wait_ready
from cascadeserve.eval.loadgen import run_load
from cascadeserve.models import load_validation
from cascadeserve.plan import SLO, Device, GearPlan
from cascadeserve.planner import Planner
from cascadeserve.policy import AdmissionPolicy, WaitBudget
from cascadeserve.profile import Profile, load_profile
from cascadeserve.simulate import simulate
from cascadeserve.traces import synthetic_trace

CS = [str(Path(sys.executable).with_name("cascadeserve"))]


def plans(prof: Profile, args: argparse.Namespace, spec: str) -> dict[str, GearPlan]:
    devices = tuple(Device(name=f"dev{i}", memory_mb=args.device_memory_mb) for i in range(args.devices))
    slo = SLO(kind="p95_ms", value=args.slo_ms)
    out: dict[str, GearPlan] = {}
    variants = (("gears", args.ranges, args.peak), ("fixed@base", 1, args.base), ("fixed@peak", 1, args.peak))
    for name, ranges, qps in variants:
        # the ranges weighted by the time the trace spends in each (what a user plans with: plan --qps-dist trace:…)
        planner = Planner(n_ranges=ranges, max_busy=args.max_busy, qps_dist=f"trace:{spec}")
        p = planner.fit(prof, devices, slo, qps * 1.1)
        assert p.plan_ is not None
        out[name] = p.plan_
    return out


def windows(arrivals: np.ndarray, lat_ms: np.ndarray, correct: np.ndarray, width: float) -> list[tuple[float, float]]:
    """(p95 ms, accuracy) of each ``width``-second window of arrival time (NaN latency: not answered)."""
    out = []
    for s in np.arange(0.0, float(arrivals.max()) + 1e-9, width):
        m = (arrivals >= s) & (arrivals < s + width) & np.isfinite(lat_ms)
        out.append((float(np.percentile(lat_ms[m], 95)), float(correct[m].mean())) if m.any() else (np.nan, np.nan))
    return out


def _rounded(ws: list[tuple[float, float]]) -> list[tuple[float, float]]:
    return [(round(p, 1), round(a, 3)) for p, a in ws]


def phases(arrivals: np.ndarray, lat_ms: np.ndarray, correct: np.ndarray, args: argparse.Namespace) -> dict[str, Any]:
    spike = (arrivals >= args.spike_at_s) & (arrivals < args.spike_at_s + args.spike_width_s)
    out: dict[str, Any] = {}
    for name, m in (("all", np.ones_like(spike)), ("spike", spike), ("outside", ~spike)):
        ok = m & np.isfinite(lat_ms)
        out[name] = {
            "p95_ms": round(float(np.percentile(lat_ms[ok], 95)), 1) if ok.any() else None,
            "accuracy": round(float(correct[ok].mean()), 4) if ok.any() else None,
            "unanswered": int(np.count_nonzero(m & ~np.isfinite(lat_ms))),
        }
    return out


def gear_shares(plan: GearPlan, arrivals: np.ndarray, gear: np.ndarray, args: argparse.Namespace) -> dict[str, Any]:
    """Per phase, the share of answered requests each distinct gear (``plan.gear_runs``) admitted: where the served
    gears and the simulated ones part, the QPS meters saw the load differently (-1: not answered)."""
    run_of = np.full(len(plan.gears) + 1, -1)
    for k, (lo, hi) in enumerate(plan.gear_runs):
        run_of[lo : hi + 1] = k
    runs = np.where(gear >= 0, run_of[np.clip(gear, 0, len(plan.gears))], -1)
    spike = (arrivals >= args.spike_at_s) & (arrivals < args.spike_at_s + args.spike_width_s)
    out: dict[str, Any] = {}
    for name, m in (("spike", spike), ("outside", ~spike)):
        ok = m & (runs >= 0)
        out[name] = [round(float(np.mean(runs[ok] == k)), 3) if ok.any() else None for k in range(len(plan.gear_runs))]
    return out


def speed_probe() -> float:
    """The host's speed just before a served run: ms for a fixed single-thread matrix workload (lower is faster; the
    same probe as ``host_fidelity.sh``, in its own process with one BLAS thread). On a shared host it moves between
    minutes, and a plan near saturation follows it."""
    code = (
        "import time, numpy as np\na = np.random.default_rng(0).random((256, 256)); t = time.perf_counter()\n"
        "for _ in range(300): a @ a\nprint(round((time.perf_counter() - t) * 1000, 1))"
    )
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return float(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout)


def _server_stats(url: str) -> dict[str, Any]:
    """From the server's Prometheus metrics: its gear switches, and per model its batches, their mean size and their
    mean run time against the profile's at that size (``cascadeserve_batch_vs_profile``): where a served p95 departs
    from the simulated one, this says whether the batches ran slower or were other sizes."""
    import httpx

    sums: dict[tuple[str, str], float] = {}
    switches = -1
    for line in httpx.get(f"{url}/metrics", timeout=30.0).text.splitlines():
        if line.startswith("cascadeserve_gear_switches_total "):
            switches = int(float(line.split()[1]))
        for fam in ("cascadeserve_batch_size", "cascadeserve_batch_vs_profile"):
            for part in ("_sum", "_count"):
                if line.startswith(f"{fam}{part}{{"):
                    model = line.split('model="', 1)[1].split('"', 1)[0]
                    sums[(model, fam + part)] = float(line.rsplit(" ", 1)[1])
    models = sorted({m for m, _ in sums})
    per_model = {}
    for m in models:
        n = sums.get((m, "cascadeserve_batch_size_count"), 0.0)
        r = sums.get((m, "cascadeserve_batch_vs_profile_count"), 0.0)
        per_model[m] = {
            "batches": int(n),
            "mean_size": round(sums.get((m, "cascadeserve_batch_size_sum"), 0.0) / n, 2) if n else None,
            "mean_vs_profile": round(sums.get((m, "cascadeserve_batch_vs_profile_sum"), 0.0) / r, 3) if r else None,
        }
    # the spread of the batches' times around the profile's (p95 over mean): at high load a queue's tail grows with
    # it, and the simulation charges each batch its profiled time exactly
    for m in httpx.get(f"{url}/v2/cascade/costs", timeout=30.0).json().get("models", []):
        mean, p95 = m.get("mean_factor_vs_profile"), m.get("p95_factor_vs_profile")
        if m.get("model") in per_model and mean and p95:
            per_model[m["model"]]["p95_over_mean"] = round(p95 / mean, 3)
    return {"switches": switches, "models": per_model}


def _sim_batches(prof: Any, res: Any) -> dict[str, dict[str, Any]]:
    """Per model the simulated batches and their mean size (the served side of :func:`_server_stats`)."""
    out = {}
    for row, m in enumerate(prof.models):
        sizes = [b.size for b in res.batches if b.row == row]
        if sizes:
            out[m.name] = {"batches": len(sizes), "mean_size": round(float(np.mean(sizes)), 2)}
    return out


def served(
    plan_path: Path, prof_dir: Path, arrivals: np.ndarray, args: argparse.Namespace, calibrate_to: Path | None = None
) -> tuple[Any, float, dict[str, Any]]:
    cmd = [*CS, "serve", "--plan", str(plan_path), "--profile", str(prof_dir), "--name", "llm", "--port",
           str(args.port)]  # fmt: skip
    cmd += ["--models", str(args.models)] if args.models else ["--emulate"]
    url = f"http://127.0.0.1:{args.port}"
    err = (args.log_dir / f"serve-{plan_path.stem}.err").open("w")
    proc = subprocess.Popen(cmd, stderr=err, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        wait_ready(url, proc, timeout_s=900.0)  # real LLMs load (and convert, the first time) for minutes
        load = os.getloadavg()[0]
        args.speed_ms = speed_probe()
        prof = load_profile(prof_dir)
        if args.models:
            # the rows the profile was measured on (profile measure --limit N takes the first N), so that the
            # served requests carry the prompts the simulation replays: SST-2's later rows are other lengths
            data = load_validation(str(args.validation), limit=len(prof.sample_ids))
            if [str(i) for i in data.sample_ids] != [str(i) for i in prof.sample_ids]:
                raise SystemExit(f"{args.validation}: its first {len(prof.sample_ids)} rows are not the profile's")
            rows = np.asarray(data.inputs, dtype=object)
            rep = asyncio.run(run_load(url, "llm", arrivals, labels=data.labels, rows=rows, connections=1024))
        else:
            ids, labels = prof.sample_ids, prof.labels
            rep = asyncio.run(run_load(url, "llm", arrivals, sample_ids=ids, labels=labels, connections=1024))
        stats = _server_stats(url)
        stats["speed_probe_after_ms"] = speed_probe()
        if calibrate_to is not None:  # what the batches of this run cost, as a user reads a live server's
            cal = [*CS, "profile", "calibrate", "--profile", str(prof_dir), "--url", url, "--out", str(calibrate_to)]
            print(subprocess.run(cal, check=True, capture_output=True, text=True).stdout.strip(), flush=True)
        return rep, load, stats
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        err.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", type=Path, required=True)
    ap.add_argument("--slo-ms", type=float, required=True)
    ap.add_argument("--base", type=float, required=True, help="QPS outside the spike.")
    ap.add_argument("--peak", type=float, help="QPS during the spike (default 3x base).")
    ap.add_argument("--duration-s", type=float, default=240.0)
    ap.add_argument("--spike-at-s", type=float, default=90.0)
    ap.add_argument("--spike-width-s", type=float, default=60.0)
    ap.add_argument("--window-s", type=float, default=30.0)
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--device-memory-mb", type=float, default=16000.0)
    ap.add_argument("--ranges", type=int, default=8, help="QPS ranges of the gear plan.")
    ap.add_argument("--max-busy", type=float, default=1.0, help="Device headroom of every plan (plan --max-busy).")
    ap.add_argument("--models", type=Path, help="Serve the real models (else emulated devices).")
    ap.add_argument("--validation", type=Path, help="With --models: the labelled JSONL the profile was measured on.")
    ap.add_argument("--plans", default="gears,fixed@base,fixed@peak")
    ap.add_argument("--port", type=int, default=8795)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log-dir", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--calibrate-from", help="Serve this plan once first and calibrate the profile from that run.")
    args = ap.parse_args()
    args.peak = args.peak or 3 * args.base
    if args.models and not args.validation:
        ap.error("--models needs --validation")
    spec = (f"synthetic:spike:base={args.base},peak={args.peak},at={args.spike_at_s},width={args.spike_width_s},"
            f"duration={args.duration_s}")  # fmt: skip
    arrivals = synthetic_trace(spec, seed=args.seed).arrivals
    with tempfile.TemporaryDirectory() as d:
        prof_dir = Path(d) / "profile"
        shutil.copytree(args.profile, prof_dir)  # serve reads it; nothing is written into the user's copy
        prof = load_profile(prof_dir)
        if args.calibrate_from:
            first = Path(d) / "calibration-run.json"
            plans(prof, args, spec)[args.calibrate_from].save(first)
            served(first, prof_dir, arrivals, args, calibrate_to=Path(d) / "calibrated")
            prof_dir = Path(d) / "calibrated"
            prof = load_profile(prof_dir)
        for name, plan in plans(prof, args, spec).items():
            if name not in args.plans.split(","):
                continue
            path = Path(d) / f"{name.replace('@', '-')}.json"
            plan.save(path)
            # the admission `cascadeserve serve` applies by default (count bound 4096, shed past 2 SLOs of wait)
            budget = WaitBudget.from_plan(plan.max_qps, args.slo_ms, max_wait_slos=2.0)
            sim = simulate(prof, plan, arrivals, admission=AdmissionPolicy(4096, 1.0, budget), record_batches=True)
            sim_lat = sim.latency_s * 1000.0
            # the same simulation priced by batch size alone (what every engine charged before token costs)
            by_size = dataclasses.replace(prof, models=tuple(dataclasses.replace(m, tokens=None) for m in prof.models))
            sim0 = simulate(by_size, plan, arrivals, admission=AdmissionPolicy(4096, 1.0, budget))
            # and calibrated from the served run itself: the simulation replayed with the costs its batches met
            # (the simulator's own error, apart from how far the host's speed moved since the profile's costs)
            replay_dir = Path(d) / f"replay-{path.stem}"
            rep, load, stats = served(path, prof_dir, arrivals, args, calibrate_to=replay_dir)
            replay = simulate(load_profile(replay_dir), plan, arrivals, admission=AdmissionPolicy(4096, 1.0, budget))
            lat = np.full(len(arrivals), np.nan)
            lat[rep.ok_index] = rep.latency_ms
            corr = np.zeros(len(arrivals), dtype=bool)
            corr[rep.ok_index] = rep.correct
            # the server's own queue + compute time per answered request: where the client's p95 departs from it,
            # the time went to the front door (HTTP, the event loop, the client's own CPU), not to queues and batches
            srv = np.full(len(arrivals), np.nan)
            srv[rep.ok_index] = rep.server_ms
            served_gear = np.full(len(arrivals), -1)
            served_gear[rep.ok_index] = rep.gear
            sim_gear = np.where(np.isfinite(sim.finish), sim.gear, -1)
            gears = [(round(g.qps_high, 2), "+".join(g.models), [round(t, 3) for t in g.thresholds])
                     for g in plan.gears]  # fmt: skip
            print(json.dumps({
                "plan": name,
                "gears": [gears[i] for i, _ in plan.gear_runs],
                "load_avg": round(load, 2),
                "speed_probe_ms": [args.speed_ms, stats["speed_probe_after_ms"]],  # before and after
                "sent": rep.sent, "answered": rep.ok, "shed": rep.shed, "errors": rep.errors,
                "simulated_shed": sim.n_shed,
                "gear_switches": {"simulated": sim.gear_switches, "served": stats["switches"]},
                "batches": {"simulated": _sim_batches(prof, sim), "served": stats["models"]},
                "gear_shares": {"simulated": gear_shares(plan, arrivals, sim_gear, args),
                                "served": gear_shares(plan, arrivals, served_gear, args)},
                "simulated": phases(arrivals, sim_lat, sim.correct, args),
                "simulated_by_size_only": phases(arrivals, sim0.latency_s * 1000.0, sim0.correct, args),
                "served": phases(arrivals, lat, corr, args),
                "replayed_with_run_costs": phases(arrivals, replay.latency_s * 1000.0, replay.correct, args),
                "served_server_time": phases(arrivals, srv, corr, args),
                "send_lag_ms": {"p50": round(rep.send_lag_p50_ms, 1), "p99": round(rep.send_lag_p99_ms, 1)},
                "sim_windows": _rounded(windows(arrivals, sim_lat, sim.correct, args.window_s)),
                "served_windows": _rounded(windows(arrivals, lat, corr, args.window_s)),
            }), flush=True)  # fmt: skip


if __name__ == "__main__":
    # SIGTERM (a killed run) exits through the finally blocks, so the server each run started is stopped too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    main()
