#!/usr/bin/env bash
# Issue 13 acceptance: on a profile not developed against (profiles/digits, copied so the recorded overhead does not
# touch the committed one), plan, serve --emulate + bench over HTTP, and simulate the same plan and trace, with no
# calibration flag: serve measures and records the runtime's per-batch overhead at start-up, simulate charges it.
set -euo pipefail
CS="${CS:-.venv/bin/cascadeserve}"
W="${W:-/tmp/hold_fid}"
SLO="${SLO:-20}"; QPS="${QPS:-400}"; PORT="${PORT:-8765}"
TRACE="${TRACE:-src/cascadeserve/data/traces/twitter_2021_excerpt.txt}"
rm -rf "$W/digits"; mkdir -p "$W"; cp -r "${PROFILE:-profiles/digits}" "$W/digits"
if [ -n "${CASCADE:-}" ]; then  # a hand-made one-device plan (batch caps by the planner's rule)
  $CS plan fixed --profile "$W/digits" --cascade "$CASCADE" --thresholds "${THRESHOLDS:-}" --devices 1 \
      --out "$W/plan.json"
else
  $CS plan --profile "$W/digits" --devices 2 --device-memory-mb 512 --slo-p95-ms "$SLO" --max-qps "$QPS" \
      --out "$W/plan.json" --json > "$W/plan_summary.json"
fi
$CS serve --plan "$W/plan.json" --profile "$W/digits" --emulate --name digits --port "$PORT" 2> "$W/serve.err" &
SP=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/v2/health/ready" >/dev/null && break; sleep 0.2; done
$CS bench --url "http://127.0.0.1:$PORT" --name digits --trace "$TRACE" --window "${WINDOW:-0:60}" --max-qps "$QPS" \
    --profile "$W/digits" --json > "$W/bench.json"
kill -TERM $SP; wait $SP || true
$CS simulate --profile "$W/digits" --plan "$W/plan.json" --trace "$TRACE" --window "${WINDOW:-0:60}" --max-qps "$QPS" \
    --json > "$W/sim.json"
cat "$W/serve.err"
python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
b, s = json.load(open(f"{w}/bench.json")), json.load(open(f"{w}/sim.json"))
bp = b.get("p95_ms"); sp = s["p95_ms"]
print(json.dumps({"bench_p95_ms": bp, "sim_p95_ms": sp, "error": (bp - sp) / sp, "sim_overhead_ms": s["batch_overhead_ms"],
                  "bench": {k: b[k] for k in b if not isinstance(b[k], (list, dict))}}, indent=1))
PY
