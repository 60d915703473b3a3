"""Simulator fidelity on the Ray backend: ``serve --emulate --backend ray`` + ``bench`` against ``simulate``.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_ray_fidelity.py [--runs 3] [--duration 20] [--backend ray]
        [--plans A,B,C] [--json]

What a user does, with no calibration flag, run as the CLI itself (subprocesses, so the server, the load generator
and the simulator do not share a GIL or a Ray instance):

1. ``cascadeserve plan fixed --backend <backend>`` makes three plans on a copy of ``--profile`` (default
   ``profiles/tweets-minilm``, copied so that what ``serve`` records there leaves the committed profile alone). The
   copy starts without any recorded per-batch overhead or Ray hop, as a freshly measured profile would.
2. Per plan and run: ``cascadeserve serve --emulate --backend <backend>`` (a new local Ray instance per run; it
   measures and records its overheads at start-up when the profile has none), ``cascadeserve bench`` replays
   Poisson arrivals at the plan's rate for ``--duration`` s, then the server is stopped (SIGTERM).
3. ``cascadeserve simulate`` of the same plan and arrivals (after the first serve, as a user who served first;
   its result does not change between runs).

The figure is the client's p95 over HTTP (what ``bench`` prints) against the simulator's p95: the median of
``--runs`` served p95s, each with the load average at its end. ``--backend local`` runs the same table on the
embedded backend (the ±3 % reference).

``--calibrate`` first does what the docs tell a user whose plans miss on their host: serve plan B (every model),
``bench`` it at its rate for ``--duration`` s, and ``profile calibrate --url --bench`` that server (the batches'
costs, on Ray the process hop as serving saw it, and the front door the client saw); the three plans are then
made, served and simulated from the calibrated profile.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class PlanSpec:
    """One plan of the table: ``plan fixed`` arguments and the Poisson rate it is served at."""

    name: str
    cascade: str
    thresholds: str
    devices: int
    min_queue: int
    max_wait_ms: float
    qps: float


PLANS = (
    PlanSpec("A", "tfidf-lr,minilm-l6", "0.5", 2, 1, 100.0, 40.0),
    PlanSpec("B", "tfidf-lr,minilm-l3,minilm-l6", "0.5,0.3", 2, 1, 100.0, 60.0),
    PlanSpec("C", "tfidf-lr,minilm-l3,minilm-l6", "0.5,0.3", 2, 4, 30.0, 60.0),
)


def cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from cascadeserve.cli import main; main()", *args]


def run_json(*args: str) -> dict[str, Any]:
    out = subprocess.run(cli(*args, "--json"), check=True, capture_output=True, text=True).stdout
    doc: dict[str, Any] = json.loads(out)
    return doc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def recorded_costs(profile: Path) -> dict[str, float]:
    """What ``serve`` measured at start-up and recorded in the profile (the simulator charges these)."""
    doc = yaml.safe_load((profile / "profile.yaml").read_text())
    return {k: float(doc.get(k, 0.0)) for k in ("batch_overhead_ms", "ray_hop_ms", "ray_hop_p95_ms")}


def load_average() -> float:
    return os.getloadavg()[0]


def serve_and_bench(
    profile: Path,
    plan: Path,
    trace: str,
    backend: str,
    work: Path,
    tag: str,
    ready_s: float = 120.0,
    calibrate_to: Path | None = None,
) -> dict[str, Any]:
    """Serve ``plan`` in a subprocess, ``bench`` it with ``trace``; with ``calibrate_to``, then write the server's
    calibration of ``profile`` there (``profile calibrate --url``) before stopping it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    err = (work / f"serve-{tag}.err").open("wb")
    args = ["serve", "--plan", str(plan), "--profile", str(profile), "--emulate", "--name", "fid"]
    # --out names the work copy of the profile itself: the first serve records its start-up costs there (serve never
    # rewrites a profile it was not told to), and every later serve and simulate reads them
    args += ["--port", str(port), "--backend", backend, "--grace-s", "1", "--out", str(profile)]
    proc = subprocess.Popen(cli(*args), stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        t0 = time.monotonic()
        while "serving model" not in (work / f"serve-{tag}.err").read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() - t0 > ready_s:
                raise RuntimeError(f"the server did not start: see {work / f'serve-{tag}.err'}")
            time.sleep(0.2)
        got = run_json("bench", "--url", url, "--name", "fid", "--trace", trace, "--profile", str(profile))
        # the batches as the server timed them against the profile (mean and p95 ratio per model): tells a slower
        # device apart from a wider spread of batch times
        with urllib.request.urlopen(f"{url}/v2/cascade/costs", timeout=30) as r:
            snap = json.load(r)
        (work / f"costs-{tag}.json").write_text(json.dumps(snap, indent=1))
        got["factors"] = {
            c["model"]: (c["mean_factor_vs_profile"], c["p95_factor_vs_profile"])
            for c in snap["models"]
            if c["batches"]
        }
        if calibrate_to is not None:
            shutil.rmtree(calibrate_to, ignore_errors=True)
            result = work / f"bench-{tag}.json"
            result.write_text(json.dumps(got))
            got["calibration"] = run_json(
                "profile", "calibrate", "--profile", str(profile), "--url", url, "--bench", str(result),
                "--out", str(calibrate_to),
            )  # fmt: skip
        return got
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: the server and nothing else
            proc.wait(10)
        err.close()


def make_plan(profile: Path, spec: PlanSpec, backend: str, out: Path) -> Path:
    subprocess.run(
        cli("plan", "fixed", "--profile", str(profile), "--cascade", spec.cascade, "--thresholds", spec.thresholds,
            "--devices", str(spec.devices), "--min-queue", str(spec.min_queue),
            "--max-wait-ms", str(spec.max_wait_ms), "--backend", backend, "--out", str(out)),
        check=True, capture_output=True,
    )  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", type=Path, default=ROOT / "profiles/tweets-minilm")
    ap.add_argument("--backend", default="ray", choices=("ray", "local"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--plans", default="A,B,C", help="which of the plans A, B, C to run")
    ap.add_argument("--keep", type=Path, default=None, help="keep the work directory here")
    ap.add_argument("--calibrate", action="store_true", help="calibrate the profile from a served run of plan B first")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    specs = [p for p in PLANS if p.name in args.plans.split(",")]
    work = Path(tempfile.mkdtemp(prefix="rayfid")) if args.keep is None else args.keep
    work.mkdir(parents=True, exist_ok=True)
    prof = work / "profile"
    shutil.rmtree(prof, ignore_errors=True)
    shutil.copytree(args.profile, prof)
    calibration = None
    if args.calibrate:
        spec = next(p for p in PLANS if p.name == "B")
        plan = make_plan(prof, spec, args.backend, work / "plan-calibrate.json")
        trace = f"synthetic:poisson:qps={spec.qps:g},duration={args.duration:g}"
        calibration = serve_and_bench(prof, plan, trace, args.backend, work, "cal", calibrate_to=work / "cal")
        calibration = calibration["calibration"]
        print(f"calibrated: {calibration}", file=sys.stderr, flush=True)
        prof = work / "cal"
    rows = []
    for spec in specs:
        plan = make_plan(prof, spec, args.backend, work / f"plan-{spec.name}.json")
        trace = f"synthetic:poisson:qps={spec.qps:g},duration={args.duration:g}"
        runs = []
        for i in range(args.runs):
            b = serve_and_bench(prof, plan, trace, args.backend, work, f"{spec.name}{i}")
            runs.append({"p95_ms": b["p95_ms"], "server_p95_ms": b["server_p95_ms"], "p50_ms": b["p50_ms"],
                         "front_door_ms": b.get("front_door_ms"), "front_door_p95_ms": b.get("front_door_p95_ms"),
                         "shed": b["shed"], "errors": b["errors"], "load": round(load_average(), 2),
                         "factors": b["factors"]})  # fmt: skip
            print(f"plan {spec.name} run {i}: {runs[-1]}", file=sys.stderr, flush=True)
        sim = run_json("simulate", "--profile", str(prof), "--plan", str(plan), "--trace", trace)
        costs = recorded_costs(prof)
        served = statistics.median(r["p95_ms"] for r in runs)
        rows.append(
            {
                "plan": spec.name,
                "spec": spec.__dict__,
                "sim_p95_ms": sim["p95_ms"],
                "recorded": costs,
                "served_p95_ms": served,
                "error": (served - sim["p95_ms"]) / sim["p95_ms"],
                "runs": runs,
            }
        )
    if args.json:
        print(json.dumps({"backend": args.backend, "calibration": calibration, "rows": rows}, indent=1))
        return
    print(f"backend {args.backend}; Poisson arrivals for {args.duration:g} s; median of {args.runs} runs; "
          f"costs charged: {rows[-1]['recorded'] if rows else {}}; calibration: {calibration}")  # fmt: skip
    print("| plan | cascade (thresholds) | min queue | QPS | sim p95 ms | served p95 ms (runs) | error | load avg |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        s = r["spec"]
        ps = ", ".join(f"{x['p95_ms']:.1f}" for x in r["runs"])
        loads = ", ".join(f"{x['load']:.2f}" for x in r["runs"])
        print(
            f"| {r['plan']} | {s['cascade']} ({s['thresholds']}) | {s['min_queue']} | {s['qps']:g} "
            f"| {r['sim_p95_ms']:.1f} | {r['served_p95_ms']:.1f} ({ps}) | {r['error']:+.1%} | {loads} |"
        )


if __name__ == "__main__":
    main()
