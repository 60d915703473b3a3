"""The online threshold tuner against an exhaustive grid (issue 17's "tuner quality and speed").

For each profile, every 2- and 3-model cascade (cheapest first), ``--windows`` held-back windows of ``--size``
validation records, and three accuracy targets, it runs the hill climber (from thresholds 0.5) and a 0.01 grid
over the same window at the same target, and reports the climber's work saving as a fraction of the grid's
(windows where even the grid misses the target are left out), and both times. Two references: the labels, and the
last stage's prediction (what audit sampling gives while serving).

    .venv/bin/python benchmarks/bench_tuner.py [--runs 3] [--size 500] [--windows 10]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from pathlib import Path

import numpy as np

from cascadeserve.eval.tuning import compare_on_windows, windows_from_profile
from cascadeserve.profile import load_profile

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ["profiles/digits", "profiles/tweets-minilm", "tests/data/profiles/tweets-sklearn"]


def run_once(size: int, n_windows: int, seed: int) -> list[dict[str, object]]:
    rows_out: list[dict[str, object]] = []
    for prof in PROFILES:
        p = load_profile(ROOT / prof)
        names = p.by_cost(8)
        for ref in ("label", "last stage"):
            found = []
            for k in (2, 3):
                for models in itertools.combinations(names, k):
                    rows = [p.index(m) for m in models]
                    ms = np.array([p.models[r].runtime.per_sample_ms(8) for r in rows])
                    wins = list(windows_from_profile(p, models, min(size, p.n_samples // 2), n_windows, seed=seed))
                    if ref == "last stage":
                        wins = [(c, pr, pr[:, -1].copy(), w) for c, pr, _, w in wins]
                    top = float(max(p.accuracies[rows])) if ref == "label" else 1.0
                    res = compare_on_windows(wins, ms, [top - d for d in (0.005, 0.01, 0.02)], [0.5] * (k - 1))
                    found += [r for r in res if r.grid_accuracy >= r.target]
            ratio = [r.ratio for r in found]
            rows_out.append(
                {
                    "profile": Path(prof).name,
                    "reference": ref,
                    "windows": len(found),
                    "ratio_median": statistics.median(ratio),
                    "ratio_mean": statistics.fmean(ratio),
                    "ratio_p10": float(np.percentile(ratio, 10)),
                    "tuner_ms_median": statistics.median(r.tuner_s * 1e3 for r in found),
                    "tuner_ms_p95": float(np.percentile([r.tuner_s * 1e3 for r in found], 95)),
                    "grid_ms_median_3stage": statistics.median(
                        [r.grid_s * 1e3 for r in found if r.grid_candidates > 101] or [0.0]
                    ),
                }
            )
    return rows_out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--size", type=int, default=500, help="records per window")
    ap.add_argument("--windows", type=int, default=10, help="windows per cascade")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    runs = [run_once(a.size, a.windows, seed) for seed in range(a.runs)]
    keys = ["ratio_median", "ratio_mean", "ratio_p10", "tuner_ms_median", "tuner_ms_p95", "grid_ms_median_3stage"]
    out = []
    for i, row in enumerate(runs[0]):
        merged = dict(row)
        for key in keys:  # median over runs (different held-back windows per run)
            merged[key] = round(statistics.median(float(r[i][key]) for r in runs), 4)  # type: ignore[arg-type]
        out.append(merged)
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{'profile':16} {'reference':10} {'win':>5} {'ratio med':>9} {'mean':>6} {'p10':>6} "
          f"{'tuner ms':>8} {'p95':>6} {'grid ms (3-stage)':>17}")  # fmt: skip
    for r in out:
        print(
            f"{r['profile']:16} {r['reference']:10} {r['windows']:>5} {r['ratio_median']:>9.4f} "
            f"{r['ratio_mean']:>6.3f} {r['ratio_p10']:>6.3f} {r['tuner_ms_median']:>8.2f} {r['tuner_ms_p95']:>6.2f} "
            f"{r['grid_ms_median_3stage']:>17.1f}"
        )


if __name__ == "__main__":
    main()
