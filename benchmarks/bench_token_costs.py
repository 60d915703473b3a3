"""Does a batch of a real LLM cost what its tokens say? Real models, random batches, two predictions side by side.

For each model of an LLM family and each batch size, draws random batches of the validation set (seeded), times the
real model on each (``predict`` for scoring sets, ``generate`` for generation sets; the median of ``--repeats``), and
compares the measured time with two predictions from the profile:

* **size only**: ``runtime_ms[b]``, what every engine charged before token costs;
* **tokens**: ``profile.tokens`` (the batch's longest prompt and output, anchored to ``runtime_ms[b]``).

The host may run at another speed than the profile's (calibration is another matter), so each prediction is first
scaled by one factor per model (the ratio of mean measured to mean predicted time over all draws); what is reported
is then how well each follows the batch-to-batch differences: the median absolute error in %, and the Pearson
correlation of measured with predicted times. A least-squares fit ``time = a + c·longest prompt`` per batch size says
how much of a batch's time is fixed.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_token_costs.py --profile profiles/llm-sst2 \
        --models examples/llm/models.yaml --validation ../shared/data/datasets/llm/sst2_validation.jsonl \
        --batch-sizes 1,4 --draws 16 --repeats 2 --json /tmp/token_costs.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from cascadeserve.models.config import load_models_config
from cascadeserve.models.llm_prompts import TASK_SCORING, load_jsonl
from cascadeserve.profile import load_profile
from cascadeserve.profile.tokens import token_tables


def _time(fn: Any, repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return float(np.median(runs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--validation", required=True)
    ap.add_argument("--batch-sizes", default="1,4")
    ap.add_argument("--draws", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated model names (default: every model with tokens)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    prof = load_profile(a.profile)
    validation = load_jsonl(a.validation, limit=prof.n_samples)
    if [str(s) for s in validation.sample_ids] != [str(s) for s in prof.sample_ids]:
        raise SystemExit("the validation set's samples are not the profile's (same file, same --limit?)")
    adapters = load_models_config(a.models).build()
    sizes = [int(b) for b in a.batch_sizes.split(",")]
    tables = token_tables(prof.models, prof.n_samples, max(sizes))
    if tables is None:
        raise SystemExit(f"{a.profile} has no token costs")
    rng = np.random.default_rng(a.seed)
    names = [m.name for m in prof.models if m.tokens is not None and (not a.only or m.name in a.only.split(","))]
    report: dict[str, Any] = {"machine": os.uname().nodename, "load_avg": os.getloadavg()[0], "models": {}}
    for name in names:
        row = prof.index(name)
        adapter = adapters[name]
        adapter.load()
        work = adapter.predict if validation.task == TASK_SCORING else adapter.generate  # type: ignore[attr-defined]
        work(validation.take(np.arange(2)))  # warm-up
        rows = []
        for b in sizes:
            for _ in range(a.draws):
                idx = rng.integers(0, prof.n_samples, b)
                secs = _time(lambda idx=idx, work=work: work(validation.take(idx)), a.repeats)
                longest = float(tables.prompt_tokens[row, idx].max())
                rows.append((b, secs, prof.models[row].runtime.table(max(sizes))[b], tables.seconds(row, idx), longest))
        arr = np.asarray(rows)
        out: dict[str, Any] = {}
        for label, col in (("size_only", 2), ("tokens", 3)):
            pred = arr[:, col] * arr[:, 1].mean() / arr[:, col].mean()
            err = np.abs(arr[:, 1] - pred) / arr[:, 1] * 100
            corr = float(np.corrcoef(arr[:, 1], arr[:, col])[0, 1]) if arr[:, col].std() > 0 else 0.0
            out[label] = {"median_abs_error_pct": float(np.median(err)), "pearson": corr}
        fits = {}
        for b in sizes:
            sel = arr[:, 0] == b
            c, a0 = np.polyfit(arr[sel, 4], arr[sel, 1] * 1000, 1)
            fits[b] = {"fixed_ms": float(a0), "ms_per_token": float(c), "mean_ms": float(arr[sel, 1].mean() * 1000)}
        out["fit"] = fits
        out["host_factor"] = float(arr[:, 1].mean() / arr[:, 2].mean())
        report["models"][name] = out
        print(name, json.dumps(out, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
