#!/usr/bin/env bash
# Real models on a GPU (RESULTS.md, "Real models on a GPU"): profile the tweets-minilm family (both encoders on CUDA)
# and the digits family (all on CUDA), then check the simulator against the real models served on that GPU: plan
# from the GPU profile, `serve --models` (real models, no emulation) on 127.0.0.1, `bench --validation` sending the
# real tweets, and `simulate` of the same plan and trace. Needs a CUDA build of torch and the [text] extra.
#   TWEETS=DIR OUT=DIR bash benchmarks/gpu_profile.sh      (DIR: TweetEval sentiment, val_text.txt and so on)
set -euo pipefail
CS="${CS:-cascadeserve}"
OUT="${OUT:-/tmp/gpu_profile}"; TWEETS="${TWEETS:-../shared/data/datasets/tweeteval_sentiment}"
SLO="${SLO:-50}"; QPS="${QPS:-300}"; PORT="${PORT:-8765}"; WINDOW="${WINDOW:-0:60}"
TRACE="${TRACE:-src/cascadeserve/data/traces/twitter_2021_excerpt.txt}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,temperature.gpu --format=csv || true
${PY:-python3} -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available() and torch.cuda.get_device_name())"
TF="${TWEETS_FAMILY:-tweets-minilm-h100}"
for fam in ${FAMILIES:-$TF digits-h100}; do
  data="tweets:$TWEETS"; [ "${fam#digits}" != "$fam" ] && data=digits
  t0=$(date +%s.%N)
  $CS profile measure --models "profiles/$fam/models.yaml" --validation "$data" --out "$OUT/$fam" \
      --batch-sizes "${BATCH_SIZES:-1,2,4,...,256}" --pause-ms "${PAUSE_MS:-0}" --json > "$OUT/$fam.measure.json"
  echo "$fam measured in $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s"
  $CS profile show --profile "$OUT/$fam"
done
[ -n "${NO_SERVE:-}" ] && exit 0
P="$OUT/$TF"
$CS plan --profile "$P" --devices 1 --device-memory-mb 8000 --slo-p95-ms "$SLO" --max-qps "$QPS" \
    --out "$OUT/plan.json" --json > "$OUT/plan_summary.json"
$CS serve --plan "$OUT/plan.json" --profile "$P" --models "profiles/$TF/models.yaml" --name tweets \
    --port "$PORT" 2> "$OUT/serve.err" &
SP=$!
python3 - "$PORT" <<'PY'
import sys, time, urllib.request
for _ in range(600):
    try:
        if urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v2/health/ready", timeout=1).status == 200:
            break
    except OSError:
        time.sleep(0.2)
else:
    sys.exit("serve did not become ready in 120 s")
PY
for run in ${RUNS:-1}; do
  $CS bench --url "http://127.0.0.1:$PORT" --name tweets --trace "$TRACE" --window "$WINDOW" --max-qps "$QPS" \
      --validation "tweets:$TWEETS" --seed "$run" --json > "$OUT/bench$run.json"
  python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())" \
      "http://127.0.0.1:$PORT/metrics" > "$OUT/metrics$run.txt"
  $CS simulate --profile "$P" --plan "$OUT/plan.json" --trace "$TRACE" --window "$WINDOW" --max-qps "$QPS" \
      --seed "$run" --json > "$OUT/sim$run.json"
done
kill -TERM $SP; wait $SP || true
python3 - "$OUT" ${RUNS:-1} <<'PY'
import json, sys
out = sys.argv[1]
for run in sys.argv[2:]:
    b, s = json.load(open(f"{out}/bench{run}.json")), json.load(open(f"{out}/sim{run}.json"))
    sums: dict = {}  # served batch time over the profile's, per model (cumulative over the runs so far)
    for line in open(f"{out}/metrics{run}.txt"):
        for part in ("sum", "count"):
            if line.startswith(f"cascadeserve_batch_vs_profile_{part}{{"):
                model = line.split('model="')[1].split('"')[0]
                sums.setdefault(model, {})[part] = float(line.rsplit(" ", 1)[1])
    print(json.dumps({"run": run, "bench_p95_ms": b["p95_ms"], "sim_p95_ms": s["p95_ms"],
                      "error": round((b["p95_ms"] - s["p95_ms"]) / s["p95_ms"], 3),
                      "bench_accuracy": b["accuracy"], "sim_accuracy": s.get("accuracy"),
                      "sent": b["sent"], "ok": b["ok"], "send_lag_p99_ms": b.get("send_lag_p99_ms"),
                      "batch_vs_profile_mean": {m: round(v["sum"] / v["count"], 2) for m, v in sums.items()
                                                if v.get("count")}}))
PY
