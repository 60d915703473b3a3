"""Throughput at equal quality: an LLM cascade against its largest model alone and a pre-generation router.

Run: ``.venv/bin/python benchmarks/bench_llm_throughput.py --profile DIR --validation FILE.jsonl
[--batch-size 8] [--devices 2] [--target-accuracy A] [--folds 5]``

On one profile (its recorded predictions, certainties and per-batch runtimes) and the same devices:

* **largest alone**: the largest model (most memory) answers every prompt;
* **cascade**: the cheapest point of the cascade frontier (``profile frontier``) whose accuracy reaches the target
  (default: the largest model's accuracy; where the frontier tops out below it, its best point, stated);
* **router** (RouteLLM-style, decided before generating): a TF-IDF + logistic-regression classifier on the prompt
  text, trained on which of the cheapest and the largest model was right, sends each prompt to exactly one of them;
  its probabilities are out-of-fold (``--folds``), its threshold the cheapest that reaches the same target.

Throughput is the saturated capacity the profile implies: ``devices x 1000 / work`` requests per second, with
``work`` the expected device-ms per request at ``--batch-size`` (each stage's batch time / batch size, times the
share of prompts that reach it); the router's own classifier (well under a millisecond) is left out, in its favour.
Then a served check: the cascade's and the largest model's fixed plans are simulated at 90 % of the capacity the
profile implies for them (Poisson arrivals, 120 s), and the answered rate and p95 are printed.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold

from cascadeserve.cascade import Cascade, enumerate_frontier
from cascadeserve.models import load_validation
from cascadeserve.models.llm_prompts import decode_item
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.planner import default_batch_caps
from cascadeserve.profile import Profile, load_profile
from cascadeserve.simulate import simulate
from cascadeserve.traces import poisson


def work_ms(prof: Profile, model: str, b: int) -> float:
    return prof.model(model).runtime.per_sample_ms(b)


def router_points(prof: Profile, prompts: list[str], small: str, large: str, b: int, folds: int) -> list[dict]:
    """(threshold, share sent to the large model, accuracy, work) of the router at every cut of its probabilities."""
    cs, cl = prof.correct[prof.index(small)], prof.correct[prof.index(large)]
    y = (cl & ~cs).astype(int)  # the large model is needed: it is right where the small one is wrong
    p = np.zeros(len(y))
    if 0 < y.sum() < len(y):
        skf = StratifiedKFold(n_splits=min(folds, int(min(y.sum(), len(y) - y.sum()))), shuffle=True, random_state=0)
        for tr, te in skf.split(prompts, y):
            vec = TfidfVectorizer(ngram_range=(1, 2), min_df=1, sublinear_tf=True)
            x = vec.fit_transform([prompts[i] for i in tr])
            clf = LogisticRegression(max_iter=1000, C=1.0, class_weight="balanced").fit(x, y[tr])
            p[te] = clf.predict_proba(vec.transform([prompts[i] for i in te]))[:, 1]
    ws, wl = work_ms(prof, small, b), work_ms(prof, large, b)
    out = []
    for cut in np.unique(np.concatenate([[np.inf], p])):
        to_large = p >= cut
        acc = float(np.where(to_large, cl, cs).mean())
        share = float(to_large.mean())
        out.append({"cut": float(cut), "to_large": share, "accuracy": acc, "work_ms": share * wl + (1 - share) * ws})
    return out


def cheapest(points: list[dict], target: float) -> dict | None:
    ok = [p for p in points if p["accuracy"] >= target - 1e-12]
    return min(ok, key=lambda p: p["work_ms"]) if ok else None


def served(prof: Profile, cascade: Cascade, devices: int, qps: float, seed: int = 0) -> dict[str, Any]:
    """Simulate ``plan fixed``'s one-gear plan of ``cascade`` (every model on every device, the planner's batch
    caps) at ``qps``, Poisson arrivals for 120 s."""
    devs = tuple(Device(name=f"dev{i}", memory_mb=1e6) for i in range(devices))
    caps = default_batch_caps(prof, None, overhead_ms=prof.batch_overhead_ms)
    plan = fixed_plan(prof, cascade, devs, batch_caps=caps)
    arr = poisson(qps, 120.0, seed=seed).arrivals
    res = simulate(prof, plan, arr)
    done = res.finish[np.isfinite(res.finish)]
    return {
        "qps_offered": round(qps, 3),
        "plan": str(cascade),
        "answered_per_s": round(len(done) / float(done.max() - arr[0]), 3) if len(done) else 0.0,
        "p95_ms": round(res.percentile_ms(95), 1),
        "accuracy": round(float(res.correct.mean()), 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--validation", required=True, help="The labelled JSONL the profile was measured on.")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--target-accuracy", type=float)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--levels", type=int, default=21)
    args = ap.parse_args()
    prof = load_profile(args.profile)
    data = load_validation(args.validation)
    row_of = {str(k): i for i, k in enumerate(data.sample_ids)}  # the profile's samples are the set's ids
    prompts = [decode_item(data.inputs[row_of[str(i)]]).prompt for i in prof.sample_ids]
    b = args.batch_size
    order = prof.by_cost(b)
    small = order[0]
    large = max(prof.model_names, key=lambda m: prof.model(m).memory_mb)
    acc = dict(zip(prof.model_names, prof.accuracies.tolist(), strict=True))
    target = args.target_accuracy if args.target_accuracy is not None else acc[large]
    front = enumerate_frontier(prof, levels=np.round(np.linspace(0, 1, args.levels), 6), batch_size=b)
    pts = [{"cascade": c, "accuracy": a, "work_ms": w} for c, a, w in front]
    casc = cheapest(pts, target)
    stated = target
    if casc is None:  # the frontier tops out below the target: its best point, stated
        casc = max(pts, key=lambda p: p["accuracy"])
        stated = casc["accuracy"]
    rout = cheapest(router_points(prof, prompts, small, large, b, args.folds), stated)
    cap = {
        "largest alone": args.devices * 1000.0 / work_ms(prof, large, b),
        "cascade": args.devices * 1000.0 / casc["work_ms"],
    }
    if rout is not None:
        cap["router"] = args.devices * 1000.0 / rout["work_ms"]
    models = {m: (round(acc[m], 4), round(work_ms(prof, m, b), 1)) for m in order}
    cas = casc["cascade"]
    cascade_row = {"models": list(cas.models), "thresholds": list(cas.thresholds),
                   "accuracy": round(casc["accuracy"], 4), "work_ms": round(casc["work_ms"], 1)}  # fmt: skip
    router_row = None if rout is None else {k: round(v, 4) for k, v in rout.items()} | {"small": small, "large": large}
    report = {
        "profile": prof.name,
        f"models (accuracy, work ms/request at batch {b})": models,
        "target_accuracy": round(target, 4),
        "cascade": cascade_row,
        "router": router_row,
        "capacity_qps": {k: round(v, 3) for k, v in cap.items()},
        "cascade_vs_largest": round(cap["cascade"] / cap["largest alone"], 2),
        "cascade_vs_router": None if rout is None else round(cap["cascade"] / cap["router"], 2),
        "served_check": {
            "cascade": served(prof, cas, args.devices, 0.9 * cap["cascade"]),
            "largest alone": served(prof, Cascade((large,), ()), args.devices, 0.9 * cap["largest alone"]),
        },
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
