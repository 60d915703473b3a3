#!/usr/bin/env bash
# Plans that hold on the serving host, with real models: simulated vs served p95 for a family calibrated to this host.
#
#   benchmarks/host_fidelity.sh PROFILE MODELS VALIDATION NAME SLO_MS QPS_LOW QPS_HIGH [RUNS]
#   e.g. benchmarks/host_fidelity.sh profiles/tweets-minilm profiles/tweets-minilm/models.yaml \
#        tweets:../shared/data/datasets/tweeteval_sentiment tweets 150 40 80 3
#
# 1. plan the profile as measured (2 devices), serve that plan with the real models, bench the Twitter excerpt at
#    QPS_HIGH, and `profile calibrate --url --bench` from that run (the batches' costs and the front door the client
#    saw; the supported path: no file is edited by hand);
# 2. plan the calibrated profile;
# 3. at QPS_LOW and QPS_HIGH: RUNS times serve + bench (a fresh server each run), and simulate the same plan and
#    trace once; print simulated p95, served p95 (client side and server side) and the error.
# Each server runs in its own process (`cascadeserve serve`), the load generator in another (`cascadeserve bench`).
# The summary's first row is the plan made from the profile as measured, simulated against its own served run (the
# calibration run): how far the uncalibrated plan was off. Env: DEVICES (default 2), CS, PY, W, PORT, TRACE, WINDOW.
# Before each served run a fixed single-thread workload is timed (the last column): on a shared host the machine's
# own speed moves between runs, and that column says which runs ran on a slow machine.
set -euo pipefail
PROFILE=$1; MODELS=$2; VAL=$3; NAME=$4; SLO=$5; LOW=$6; HIGH=$7; RUNS=${8:-3}
CS="${CS:-.venv/bin/cascadeserve}"; PY="${PY:-.venv/bin/python}"; DEVICES="${DEVICES:-2}"
W="${W:-/tmp/host_fidelity}/$NAME"; PORT="${PORT:-8791}"
TRACE="${TRACE:-src/cascadeserve/data/traces/twitter_2021_excerpt.txt}"; WINDOW="${WINDOW:-0:60}"
rm -rf "$W"; mkdir -p "$W"; cp -r "$PROFILE" "$W/raw"

serve() {  # PLAN PROFILE -> starts a server in the background; SP holds its pid
  $CS serve --plan "$1" --profile "$2" --models "$MODELS" --name "$NAME" --port "$PORT" 2> "$W/serve.err" &
  SP=$!
  $PY - "$PORT" "$SP" <<'PY' || { echo "server did not become ready" >&2; cat "$W/serve.err" >&2; exit 1; }
import os, sys, time, urllib.request
for _ in range(1200):  # 10 minutes: model loading on a busy host
    try:
        if urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v2/health/ready", timeout=2).status == 200:
            sys.exit(0)
    except OSError:
        try:
            os.kill(int(sys.argv[2]), 0)
        except OSError:
            sys.exit(1)  # the server exited
        time.sleep(0.5)
sys.exit(1)
PY
}
stop() { kill -TERM "$SP"; wait "$SP" || true; }
probe() {  # OUT: the machine's speed just before a run (ms for a fixed single-thread workload; lower is faster)
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $PY -c "import time, numpy as np
a = np.random.default_rng(0).random((256, 256)); t = time.perf_counter()
for _ in range(300): a @ a
print(round((time.perf_counter() - t) * 1000, 1))" > "$1"
}
bench() {  # QPS OUT
  $CS bench --url "http://127.0.0.1:$PORT" --name "$NAME" --validation "$VAL" --trace "$TRACE" --window "$WINDOW" \
      --max-qps "$1" --json > "$2"
}

$CS plan --profile "$W/raw" --devices "$DEVICES" --device-memory-mb 8192 --slo-p95-ms "$SLO" --max-qps "$HIGH" \
    --out "$W/plan0.json" > /dev/null
serve "$W/plan0.json" "$W/raw"
bench "$HIGH" "$W/calibration-bench.json"
$CS profile calibrate --profile "$W/raw" --url "http://127.0.0.1:$PORT" --bench "$W/calibration-bench.json" \
    --out "$W/cal"
stop
$CS simulate --profile "$W/raw" --plan "$W/plan0.json" --trace "$TRACE" --window "$WINDOW" --max-qps "$HIGH" \
    --json > "$W/sim0-$HIGH.json"
$CS plan --profile "$W/cal" --devices "$DEVICES" --device-memory-mb 8192 --slo-p95-ms "$SLO" --max-qps "$HIGH" \
    --out "$W/plan.json" > /dev/null
$CS plan explain --plan "$W/plan.json" > "$W/plan.txt"
for QPS in "$LOW" "$HIGH"; do
  $CS simulate --profile "$W/cal" --plan "$W/plan.json" --trace "$TRACE" --window "$WINDOW" --max-qps "$QPS" \
      --json > "$W/sim-$QPS.json"
  for r in $(seq "$RUNS"); do
    probe "$W/probe-$QPS-$r.txt"; serve "$W/plan.json" "$W/cal"; bench "$QPS" "$W/bench-$QPS-$r.json"; stop
  done
done
python3 - "$W" "$LOW" "$HIGH" "$RUNS" "$NAME" <<'PY'
import json, statistics, sys
w, low, high, runs, name = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
print(f"{name}: qps | simulated p95 | served p95 (client, median of {runs}) | error | server-side p95 | shed | speed probe ms")
sim0, b0 = json.load(open(f"{w}/sim0-{high}.json")), json.load(open(f"{w}/calibration-bench.json"))
e0 = 100 * (b0["p95_ms"] - sim0["p95_ms"]) / sim0["p95_ms"]
print(f"{high:>6} | {sim0['p95_ms']:8.1f} | {b0['p95_ms']:8.1f} (plan from the measured profile, 1 run) | {e0:+.1f}% | "
      f"{b0['server_p95_ms']:.1f} | {b0['shed']} | -")
for q in (low, high):
    sim = json.load(open(f"{w}/sim-{q}.json"))
    b = [json.load(open(f"{w}/bench-{q}-{r}.json")) for r in range(1, runs + 1)]
    served = statistics.median(x["p95_ms"] for x in b)
    server = statistics.median(x["server_p95_ms"] for x in b)
    sp = sim["p95_ms"]
    runs_s = ", ".join("%.1f" % x["p95_ms"] for x in b)
    shed = sum(x["shed"] for x in b)
    probes = ", ".join(open(f"{w}/probe-{q}-{r}.txt").read().strip() for r in range(1, runs + 1))
    print(f"{q:>6} | {sp:8.1f} | {served:8.1f} ({runs_s}) | {100 * (served - sp) / sp:+.1f}% | {server:.1f} | {shed} | {probes}")
PY
