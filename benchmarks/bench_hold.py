"""Plans that hold (issue 13): every plan for a range of SLOs replayed on two public traces, and every gear held.

Run: ``.venv/bin/python benchmarks/bench_hold.py [--profiles tweets-text5,tweets-minilm,tweets-sklearn]
[--slos 20,200]``

For each profile and latency SLO:

* plan with 10 ranges weighted by the QPS distribution of the Twitter trace's first 20 minutes (zero seconds
  dropped, scaled to the profile's peak); ``--check`` adds the planner's trace check on that window (the default
  of ``cascadeserve plan --qps-dist trace:...``; several plans and replays per SLO, so off by default here);
* replay the plan on that Twitter window and on the Azure Functions 2019 trace's first 20 minutes scaled to the
  same peak (a trace it was not planned on): p95, accuracy, whether p95 ≤ SLO;
* hold each gear at its range's top QPS for 60 s (Poisson): the worst gear's p95 and whether every gear meets the
  SLO.

``tweets-text5`` is built here (once, into ``profiles/tweets-text5``) from the two committed TweetEval profiles,
which share their 2,000 validation samples: nb-words, lr-words, lr-chars (scikit-learn) and MiniLM-L3, MiniLM-L6
(sentence encoders with a head); the encoders' per-sample cost *grows* with batch size on this CPU (L3: 5.0 ms at
batch 1, 5.3 ms per sample at 8, 7.9 ms at 64).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from cascadeserve.plan import SLO, Device, Gear, GearPlan
from cascadeserve.planner import Planner, QpsDistribution
from cascadeserve.profile import Profile, load_profile, save_profile
from cascadeserve.simulate import simulate
from cascadeserve.traces import build_trace, poisson

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "traces"
TWITTER = DATA / "twitter_2021" / "tweets_per_second.txt"
AZURE = DATA / "azure_functions_2019_sample" / "invitro_1000_inv.csv"
TEXT5 = ROOT / "profiles" / "tweets-text5"

# profile -> (devices, peak QPS, latency SLOs in ms)
SETUPS: dict[str, tuple[int, float, tuple[float, ...]]] = {
    "tweets-text5": (4, 400.0, (50.0, 100.0)),
    "tweets-minilm": (3, 166.0, (50.0, 100.0)),
    "tweets-sklearn": (1, 2000.0, (20.0,)),
}


def text5() -> Profile:
    """The 5-model TweetEval family (see the module docstring), written to ``profiles/tweets-text5`` once."""
    if (TEXT5 / "profile.yaml").is_file():
        return load_profile(TEXT5)
    sk = load_profile(ROOT / "tests" / "data" / "profiles" / "tweets-sklearn")
    lm = load_profile(ROOT / "profiles" / "tweets-minilm")
    assert np.array_equal(sk.labels, lm.labels) and np.array_equal(sk.sample_ids, lm.sample_ids)
    pick = [(sk, "nb-words"), (sk, "lr-words"), (sk, "lr-chars"), (lm, "minilm-l3"), (lm, "minilm-l6")]
    prof = Profile(
        name="tweets-text5",
        models=tuple(p.model(m) for p, m in pick),
        sample_ids=np.array(sk.sample_ids),
        labels=np.array(sk.labels),
        predictions=np.stack([p.predictions[p.index(m)] for p, m in pick]),
        certainties=np.stack([p.certainties[p.index(m)] for p, m in pick]),
        task="classification",
        device="cpu (x86_64, 2 cores), 1 thread per model",
        source="tweets-sklearn (nb-words, lr-words, lr-chars) + tweets-minilm (minilm-l3, minilm-l6), same 2,000 "
        "TweetEval sentiment validation samples; built by benchmarks/bench_hold.py",
    )
    save_profile(prof, TEXT5)
    return load_profile(TEXT5)


def _profile(name: str) -> Profile:
    if name == "tweets-text5":
        return text5()
    if name == "tweets-sklearn":
        return load_profile(ROOT / "tests" / "data" / "profiles" / "tweets-sklearn")
    return load_profile(ROOT / "profiles" / name)


def _one_gear(plan: GearPlan, g: Gear) -> GearPlan:
    return plan.model_copy(update={"gears": (g.model_copy(update={"qps_low": 0.0}),)})


def run(name: str, hold_s: float, check: bool, slos_given: tuple[float, ...] = ()) -> list[dict[str, Any]]:
    prof = _profile(name)
    n_dev, peak, slos = SETUPS[name]
    slos = slos_given or slos
    devs = [Device(name=f"dev{i}", memory_mb=16000.0) for i in range(n_dev)]
    twitter = build_trace(str(TWITTER), max_qps=peak, window="0:1200", drop_zero=True, seed=0)
    azure = build_trace(str(AZURE), fmt="azure-functions", max_qps=peak, window="0:1200", drop_zero=True, seed=0)
    dist = QpsDistribution("empirical", trace=str(TWITTER), window="0:1200")
    rows = []
    for slo_ms in slos:
        slo = SLO(kind="p95_ms", value=slo_ms)
        pl = Planner(n_ranges=10, qps_dist=dist, seed=0)
        t0 = time.perf_counter()
        try:
            pl.fit(prof, devs, slo, peak, check_arrivals=twitter.arrivals if check else None)
        except Exception as e:
            rows.append({"profile": name, "slo_ms": slo_ms, "error": str(e)})
            continue
        plan_s = time.perf_counter() - t0
        plan = pl.plan_
        assert plan is not None and pl.report_ is not None
        row: dict[str, Any] = {
            "profile": name,
            "devices": n_dev,
            "peak_qps": peak,
            "slo_ms": slo_ms,
            "planner_s": round(plan_s, 2),
            "simulated_requests": pl.report_.simulated_requests,
            "caps": sorted({(gr.model, getattr(gr, "max_batch", None) or 0) for g in plan.gears for gr in g.replicas}),
            "cascades": sorted({" > ".join(g.models) for g in plan.gears}),
        }
        for tname, tr in (("twitter", twitter), ("azure", azure)):
            res = simulate(prof, plan, tr.arrivals)
            p95 = res.percentile_ms(95)
            row[tname] = {
                "requests": len(tr),
                "p95_ms": round(p95, 2),
                "accuracy": round(res.accuracy, 4),
                "holds": bool(p95 <= slo_ms),
            }
        worst, held = 0.0, True
        for i, g in enumerate(plan.gears):
            res = simulate(prof, _one_gear(plan, g), poisson(g.qps_high, hold_s, seed=100 + i).arrivals)
            p95 = res.percentile_ms(95)
            worst = max(worst, p95)
            held = held and p95 <= slo_ms
        row["gears_held_60s"] = {"worst_p95_ms": round(worst, 2), "all_within_slo": held, "seconds": hold_s}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profiles", default="tweets-text5,tweets-minilm,tweets-sklearn")
    ap.add_argument("--hold-s", type=float, default=60.0)
    ap.add_argument("--check", action="store_true", help="plan with the trace check on the Twitter window")
    ap.add_argument("--slos", default="", help="latency SLOs in ms, comma-separated (default: each profile's own)")
    a = ap.parse_args()
    slos = tuple(float(x) for x in a.slos.split(",") if x.strip())
    out = []
    for name in a.profiles.split(","):
        out.extend(run(name.strip(), a.hold_s, a.check, slos))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
