"""Calibration by batch size against one factor per model, side by side on the same served batches.

Run: ``.venv/bin/python benchmarks/calibration_ab.py --profile DIR --plan PLAN0 --models MODELS.yaml --validation
VAL --name NAME --slo-ms S --low Q1 --high Q2 [--runs 2] [--out DIR]``

1. serve ``PLAN0`` (a plan of the profile as measured) with the real models, its cost monitor's per-batch records
   (measured / profiled time, the host's busy share, the batch size) written to a file while it runs, and ``bench``
   it at ``--high`` QPS;
2. calibrate the profile twice from those batches and that run's front door: size-blind (one factor per model, the
   busy factor fitted over all sizes, as before) and by batch size (:func:`cascadeserve.profile.host.fit_contention`
   with sizes); plan both;
3. simulate both at ``--low`` and ``--high``, and serve each ``--runs`` times per load, alternating, with ``bench``.
Prints the fitted factors and, per calibration and load, the simulated and served (median) p95 and the error.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from cascadeserve.policy.costs import trimmed_mean
from cascadeserve.profile import calibrate, load_profile, save_profile
from cascadeserve.profile.host import fit_contention, size_factors

CS = str(Path(sys.executable).with_name("cascadeserve"))
TRACE = "src/cascadeserve/data/traces/twitter_2021_excerpt.txt"

# the server of step 1: `cascadeserve serve` whose cost monitors write their per-batch records every 2 s
PATCHED = """
import json, sys, threading, time
from cascadeserve.runtime import costs as K
from cascadeserve.cli import main
mons, init = [], K.CostMonitor.__init__
K.CostMonitor.__init__ = lambda self, *a, **k: (init(self, *a, **k), mons.append(self))[0]
def dump():
    while True:
        time.sleep(2.0)
        out = {m: {"ratios": list(c._since[r]), "shares": list(c._shares[r]), "sizes": list(c._sizes[r])}
               for c in mons for m, r in c._rows.items()}
        open(RAW, "w").write(json.dumps(out))
RAW = sys.argv.pop(1)
threading.Thread(target=dump, daemon=True).start()
sys.argv = ["cascadeserve", *sys.argv[1:]]
main()
"""


def serve(args: argparse.Namespace, plan: Path, prof: Path, raw: Path | None = None) -> subprocess.Popen[bytes]:
    head = [sys.executable, "-c", PATCHED, str(raw)] if raw else [CS]
    cmd = [*head, "serve", "--plan", str(plan), "--profile", str(prof), "--models", str(args.models),
           "--name", args.name, "--port", str(args.port)]  # fmt: skip
    proc = subprocess.Popen(cmd, stderr=(args.out / "serve.err").open("w"), stdout=subprocess.DEVNULL)
    for _ in range(1200):
        try:
            if httpx.get(f"http://127.0.0.1:{args.port}/v2/health/ready", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit(f"the server did not become ready: {args.out / 'serve.err'}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(60)


def bench(args: argparse.Namespace, qps: float, out: Path) -> float:
    cmd = [CS, "bench", "--url", f"http://127.0.0.1:{args.port}", "--name", args.name, "--validation",
           args.validation, "--trace", TRACE, "--window", "0:60", "--max-qps", str(qps), "--json"]  # fmt: skip
    subprocess.run(cmd, stdout=out.open("w"), check=True)
    return float(json.loads(out.read_text())["p95_ms"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("--profile", "--plan", "--models"):
        ap.add_argument(name, type=Path, required=True)
    ap.add_argument("--validation", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--slo-ms", type=float, required=True)
    ap.add_argument("--low", type=float, required=True)
    ap.add_argument("--high", type=float, required=True)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--port", type=int, default=8791)
    ap.add_argument("--out", type=Path, default=Path("/tmp/calibration_ab"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    raw_path = args.out / "batches.json"
    proc = serve(args, args.plan, args.profile, raw_path)
    try:
        bench(args, args.high, args.out / "calibration-bench.json")
        time.sleep(3.0)  # one more write of the records after the last batch
    finally:
        stop(proc)
    raw = json.loads(raw_path.read_text())
    doc = json.loads((args.out / "calibration-bench.json").read_text())
    door = (float(doc["front_door_ms"]), float(doc["front_door_p95_ms"]))
    prof = load_profile(args.profile)
    factors: dict[str, dict[str, float]] = {"blind": {}, "sized": {}}
    busy: dict[str, dict[str, float]] = {"blind": {}, "sized": {}}
    sizes: dict[str, dict[int, float]] = {}
    for m, d in raw.items():
        r, s, z = (np.asarray(d[k]) for k in ("ratios", "shares", "sizes"))
        for kind, fit in (("blind", fit_contention(r, s)), ("sized", fit_contention(r, s, z))):
            factors[kind][m] = fit.alone if fit else trimmed_mean(r)
            if fit:
                busy[kind][m] = fit.busy_factor
        fit = fit_contention(r, s, z)
        by = fit.by_size if fit else size_factors(r, z)
        if len(by) >= 2:
            sizes[m] = by
        counts = dict(zip(*(a.tolist() for a in np.unique(z, return_counts=True)), strict=True))
        shown = {b: round(v, 3) for b, v in by.items()}
        print(f"{m}: blind x{factors['blind'][m]:.3f} busy {busy['blind'].get(m)}; by size {shown} busy "
              f"{busy['sized'].get(m)}; batches by size {counts}")  # fmt: skip
    for kind in ("blind", "sized"):
        by_size = sizes if kind == "sized" else None
        cal = calibrate(prof, factors[kind], source=kind, busy=busy[kind], front_door=door, sizes=by_size)
        save_profile(cal, args.out / kind)
        subprocess.run([CS, "plan", "--profile", str(args.out / kind), "--devices", "2", "--device-memory-mb", "8192",
                        "--slo-p95-ms", str(args.slo_ms), "--max-qps", str(args.high), "--out",
                        str(args.out / f"plan-{kind}.json")], stdout=subprocess.DEVNULL, check=True)  # fmt: skip
    result: dict[tuple[str, float], tuple[float, list[float]]] = {}
    for q in (args.low, args.high):
        for kind in ("blind", "sized"):
            cmd = [CS, "simulate", "--profile", str(args.out / kind), "--plan", str(args.out / f"plan-{kind}.json"),
                   "--trace", TRACE, "--window", "0:60", "--max-qps", str(q), "--json"]  # fmt: skip
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            result[(kind, q)] = (float(json.loads(out.stdout)["p95_ms"]), [])
        for run in range(args.runs):
            for kind in ("blind", "sized"):
                proc = serve(args, args.out / f"plan-{kind}.json", args.out / kind)
                try:
                    result[(kind, q)][1].append(bench(args, q, args.out / f"bench-{kind}-{q}-{run}.json"))
                finally:
                    stop(proc)
    for (kind, q), (sim, served) in result.items():
        med = statistics.median(served)
        err = 100 * (med - sim) / sim
        print(f"{kind:>5} {q:g} QPS: simulated {sim:.1f} ms, served {med:.1f} ms {served} ({err:+.1f} %)")


if __name__ == "__main__":
    main()
