"""Does contention slow a real LLM batch by the same factor at every batch size? Real models, alone and busy.

For each model of an LLM family and each batch size, times random batches of the validation set (seeded) twice:
**alone** (nothing else runs) and **busy** (a second thread runs another model's batches back to back, as the
host's other device does at a plan's peak). The busy/alone ratio per batch size is the busy factor the contention
rule (``profile/host.py``) would need at that size; one factor per model is right only if the ratios agree.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_llm_contention.py --models examples/llm/models.yaml \\
        --validation ../shared/data/datasets/llm/sst2_validation.jsonl --batch-sizes 1,2,4 --draws 8
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from cascadeserve.models.config import load_models_config
from cascadeserve.models.llm_prompts import TASK_SCORING, load_jsonl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", required=True)
    ap.add_argument("--validation", required=True)
    ap.add_argument("--batch-sizes", default="1,2,4")
    ap.add_argument("--draws", type=int, default=8)
    ap.add_argument("--background", default="", help="the model the other device runs (default: the first)")
    ap.add_argument("--background-batch", type=int, default=2)
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    data = load_jsonl(a.validation, limit=a.limit)
    adapters = load_models_config(a.models).build()
    works = {}
    for name, adapter in adapters.items():
        adapter.load()
        fn = adapter.predict if data.task == TASK_SCORING else adapter.generate  # type: ignore[attr-defined]
        fn(data.take(np.arange(2)))  # warm-up
        works[name] = fn
    rng = np.random.default_rng(a.seed)
    n = len(data.sample_ids)
    bg_name = a.background or next(iter(works))
    stop = threading.Event()

    def background() -> None:
        while not stop.is_set():
            works[bg_name](data.take(rng.integers(0, n, a.background_batch)))

    sizes = [int(b) for b in a.batch_sizes.split(",")]
    draws = {(m, b): [rng.integers(0, n, b) for _ in range(a.draws)] for m in works for b in sizes}

    def timed(phase: str) -> dict[tuple[str, int], float]:
        out = {}
        for (m, b), idxs in draws.items():
            secs = []
            for idx in idxs:
                t0 = time.perf_counter()
                works[m](data.take(idx))
                secs.append(time.perf_counter() - t0)
            out[(m, b)] = float(np.mean(secs))
            print(f"{phase:5} {m:<14} b={b}: {out[(m, b)] * 1000:8.1f} ms", flush=True)
        return out

    alone = timed("alone")
    thread = threading.Thread(target=background, daemon=True)
    thread.start()
    time.sleep(1.0)  # the other device is in its stride
    busy = timed("busy")
    stop.set()
    thread.join()
    report: dict[str, Any] = {"load_avg": os.getloadavg()[0], "background": f"{bg_name} x{a.background_batch}"}
    for m in works:
        report[m] = {b: {"alone_ms": alone[(m, b)] * 1000, "busy_factor": busy[(m, b)] / alone[(m, b)]} for b in sizes}
        print(m, " ".join(f"b={b}: x{report[m][b]['busy_factor']:.2f}" for b in sizes))
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
