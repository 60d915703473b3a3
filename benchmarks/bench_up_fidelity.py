"""A new user's path, measured: ``cascadeserve up`` on a workload file with real models, then simulated vs served p95.

Run: ``.venv/bin/python benchmarks/bench_up_fidelity.py --models MODELS.yaml --validation DATA --name NAME
--slo-ms S --qps LOW,HIGH [--runs 3] [--devices 2] [--limit 1000] [--plans measured,calibrated,replanned]``

1. Writes a workload file (the models config, validation data, ``--devices`` CPU devices, p95 <= ``--slo-ms``,
   ``max_qps`` = the highest ``--qps``) and runs ``cascadeserve up --no-serve``: ``profile measure``, ``profile
   calibrate`` (the models served on this host for ``profile.calibrate_s`` seconds, the default 8), ``plan``. No
   file is edited by hand: what a newcomer gets.
2. Plans the measured profile too (what ``up`` planned before it calibrated: ``profile.calibrate_s: 0``). With
   ``replanned`` in ``--plans``: ``up``'s plan served as planned for as long (``profile calibrate --plan``), and the
   plan made from those costs.
3. Per plan named in ``--plans`` (``measured``, ``calibrated``: ``up``'s own, ``replanned``) and per QPS:
   ``cascadeserve simulate`` of the Twitter excerpt's first minute scaled to that QPS, and ``--runs`` times a fresh
   ``cascadeserve serve --workload`` (its own process, the real models) driven by ``cascadeserve bench --workload``
   (another process, real validation inputs). Prints one JSON line per cell: simulated p95, each served p95 (client
   side, and the server's own), their median, the error, and the host's speed probe before each run (a shared
   host's speed moves between minutes).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench_llm_load import speed_probe

from cascadeserve.eval.fidelity import wait_ready

CS = str(Path(sys.executable).with_name("cascadeserve"))
TRACE = "src/cascadeserve/data/traces/twitter_2021_excerpt.txt"


def workload_text(args: argparse.Namespace, high: float) -> str:
    return (
        f"name: {args.name}\n"
        f"models: {args.models.resolve()}\n"
        f"validation: {args.validation}\n"
        f"devices: {{count: {args.devices}, memory_mb: 8192}}\n"
        f"slo: {{p95_ms: {args.slo_ms:g}}}\n"
        f"max_qps: {high:g}\n"
        f"profile: {{limit: {args.limit}, repeats: 3}}\n"
        f"serve: {{port: {args.port}}}\n"
    )


def _json(cmd: list[str]) -> dict[str, Any]:
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    doc: dict[str, Any] = json.loads(out)
    return doc


def served(args: argparse.Namespace, wl: Path, plan: Path, prof: Path, qps: float, log: Path) -> dict[str, Any]:
    """One fresh server of ``plan`` with the real models, benched at ``qps``; the bench result and the speed probe."""
    probe = speed_probe()
    cmd = [CS, "serve", "--workload", str(wl), "--plan", str(plan), "--profile", str(prof)]
    with log.open("a") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    try:
        wait_ready(f"http://127.0.0.1:{args.port}", proc, timeout_s=600.0)  # model loading on a busy host
        bench = [CS, "bench", "--workload", str(wl), "--trace", TRACE, "--window", args.window, "--max-qps", f"{qps:g}"]
        doc = _json([*bench, "--json"])
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return {"probe_ms": probe, **doc}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path, required=True)
    ap.add_argument("--validation", required=True, help="A file, or a built-in set (tweets:DIR).")
    ap.add_argument("--name", required=True)
    ap.add_argument("--slo-ms", type=float, required=True)
    ap.add_argument("--qps", required=True, help="Comma-separated loads to serve at, e.g. 30,60.")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--limit", type=int, default=1000, help="Validation rows to profile on.")
    ap.add_argument("--window", default="0:60", help="The trace window replayed (s).")
    ap.add_argument("--port", type=int, default=8793)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/up_fidelity"))
    ap.add_argument("--plans", default="measured,calibrated", help="Plans to serve: measured, calibrated, replanned.")
    args = ap.parse_args()
    loads = [float(q) for q in args.qps.split(",")]
    w = args.dir / args.name
    shutil.rmtree(w, ignore_errors=True)
    w.mkdir(parents=True)
    wl = w / "cascadeserve.yaml"
    wl.write_text(workload_text(args, max(loads)))
    log = w / "up.log"
    with log.open("w") as out:
        subprocess.run([CS, "up", str(w), "--no-serve"], check=True, stdout=out, stderr=subprocess.STDOUT)
    state = w / ".cascadeserve"
    plan0 = w / "plan-measured.json"
    subprocess.run([CS, "plan", "--workload", str(wl), "--profile", str(state / "profile-measured"), "--out",
                    str(plan0)], check=True, capture_output=True)  # fmt: skip
    calibration = (state / "profile" / "profile.yaml").read_text().split("\nmodels:", 1)[0]
    print(json.dumps({"calibrated_profile": calibration}), flush=True)
    plans = {"measured": (plan0, state / "profile-measured"), "calibrated": (state / "plan.json", state / "profile")}
    if "replanned" in args.plans:  # up's plan served as planned, then planned again from those costs
        again, plan2 = w / "profile-replanned", w / "plan-replanned.json"
        cal = [CS, "profile", "calibrate", "--workload", str(wl), "--profile", str(state / "profile")]
        subprocess.run([*cal, "--plan", str(state / "plan.json"), "--out", str(again)], check=True, capture_output=True)
        subprocess.run([CS, "plan", "--workload", str(wl), "--profile", str(again), "--out", str(plan2)], check=True,
                       capture_output=True)  # fmt: skip
        plans["replanned"] = (plan2, again)
    for label in args.plans.split(","):
        plan, prof = plans[label]
        for qps in loads:
            sim_cmd = [CS, "simulate", "--workload", str(wl), "--plan", str(plan), "--profile", str(prof)]
            sim = _json([*sim_cmd, "--trace", TRACE, "--window", args.window, "--max-qps", f"{qps:g}", "--json"])
            runs = [served(args, wl, plan, prof, qps, w / "serve.log") for _ in range(args.runs)]
            med = statistics.median(r["p95_ms"] for r in runs)
            print(json.dumps({
                "plan": label, "qps": qps, "simulated_p95_ms": round(sim["p95_ms"], 1),
                "served_p95_ms": [round(r["p95_ms"], 1) for r in runs], "median_served_p95_ms": round(med, 1),
                "error_pct": round(100.0 * (med - sim["p95_ms"]) / sim["p95_ms"], 1),
                "server_p95_ms": [round(r["server_p95_ms"], 1) for r in runs],
                "shed": [r["shed"] for r in runs], "simulated_unanswered": sim["unanswered"],
                "probe_ms": [r["probe_ms"] for r in runs],
            }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
