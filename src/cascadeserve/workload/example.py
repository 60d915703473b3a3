"""The example workload ``cascadeserve init`` writes: the digits family, which trains itself from the images that
scikit-learn ships (no data to fetch), profiled small enough that ``cascadeserve up`` serves in about a minute."""

from __future__ import annotations

__all__ = ["EXAMPLE"]

EXAMPLE = """\
# A cascadeserve workload: what to serve, on what, under which objective and load. `cascadeserve up` profiles the
# models (when this file's models or data changed), plans gears (when the profile, SLO, devices or load changed)
# and serves them on http://HOST:PORT. Every field: docs/workloads.md; JSON schema: `cascadeserve workload schema`.
# Relative paths resolve against this file's folder.
name: digits                       # the served model's name: POST /v2/models/digits/infer

# The model family, cheapest first: a models config inline (the content of a models.yaml), or a path to one
# (`models: models.yaml`). These three are torch models of rising cost on scikit-learn's 8x8 digits; each trains
# itself on first use (a few seconds) and is cached (needs `pip install 'cascadeserve[demo]'`).
models:
  certainty: margin                # top-1 minus top-2 score: how sure a stage is
  threads: 1                       # intra-op threads per model
  input: {name: pixels, datatype: FP32, shape: [-1, 64]}   # what clients send: 64 pixel values per image
  models:
    - {name: logreg, adapter: torch, ref: "cascadeserve.models.families.digits:load",
       kwargs: {arch: logreg, quick: true}, preprocess: {dtype: float32}}
    - {name: cnn-small, adapter: torch, ref: "cascadeserve.models.families.digits:load",
       kwargs: {arch: cnn-small, quick: true}, preprocess: {dtype: float32}}
    - {name: cnn-wide, adapter: torch, ref: "cascadeserve.models.families.digits:load",
       kwargs: {arch: cnn-wide, quick: true}, preprocess: {dtype: float32}}

# Labelled validation data: a file (FILE.csv with sample_id,label,<input>; FILE.npz; FILE.jsonl) or a built-in
# set (digits: 600 held-out images). For the sentences example family, once trained (examples/sentences):
#   models: ../examples/sentences/models.yaml
#   pythonpath: [../examples/sentences]
#   validation: ~/.cache/cascadeserve/sentences/validation.csv
validation: digits

devices: {count: 1, memory_mb: 512, kind: cpu}   # the plan places model replicas on these

slo: {p95_ms: 100}                 # exactly one: {p95_ms: L} (maximise accuracy) or {accuracy: A} (minimise latency)

max_qps: 100                       # the highest load to plan for; or `trace: FILE` to weight the QPS ranges by it

profile:                           # how `up` measures the family (small, so it takes seconds)
  batch_sizes: "1,2,4,...,32"
  repeats: 3
  warmup: 1
  limit: 300                       # profile on the first 300 validation rows
  calibrate_s: 8                   # then serve the models here for 8 s and plan with what batches cost (0: off)

serve:
  host: 127.0.0.1                  # loopback; bind elsewhere only with a token
  port: 8000
  # batching: aimd                 # plan (the planner's queues), aimd or quantile (Clipper's adaptive batching)
  # cache_size: 1000               # an LRU of answers to repeated inputs
  # tune: true                     # online threshold tuning
  # replan: auto                   # re-plan when the load's distribution drifts
  # auth_token_env: CASCADESERVE_TOKEN   # the NAME of the environment variable holding the bearer token
"""
