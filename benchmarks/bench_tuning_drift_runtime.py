"""Data drift, real data, on the runtime with emulated devices: fixed thresholds vs ``serve --tune`` vs the most
accurate model alone, on a real clock.

The sibling of ``bench_tuning_drift.py`` (the simulator): the same digits plan (planned on clean validation images,
``profiles/digits-drift/clean``), the same drift stream (``profiles/digits-drift/stream``: one-pixel-shifted images
replace clean ones from 20 % to 60 % of the run) and the same tuner targets (each gear's clean agreement with its
last stage, less one point), but served by the in-process runtime (:func:`cascadeserve.runtime.emulated_runtime`:
devices that wait the profiled runtimes and answer from the recorded predictions), with arrivals replayed in real
time. Side by side, on the same arrivals and sample order, one after another:

* **fixed**: the plan's thresholds;
* **tuned**: ``RuntimeOptions(tuning=...)``, what ``serve --tune`` builds (audits of early exits, the last stage's
  prediction as the reference, decisions at the producer tick, hot swaps);
* **best alone**: ``cnn-wide`` alone on the same devices.

Reported: accuracy (labels) per window, device milliseconds per request (every batch's span on its emulated device,
audits included; and the profiled runtime of the same batches, what the simulator charges), p95 latency, threshold
changes, and agreement with ``cnn-wide`` over the drifted last third (the tuner's reference). ``--trace FILE``
writes the tuned run's timeline (thresholds, windowed agreement and work over time) for ``--plot``.

    .venv/bin/python benchmarks/bench_tuning_drift_runtime.py [--qps 150] [--seconds 60] [--runs 2]
        [--audit 0.1] [--trace out.json] [--plot docs/tuning-drift.png]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from cascadeserve.cascade import Cascade
from cascadeserve.eval.drift_stream import SHIFT_ID_OFFSET, drift_order
from cascadeserve.plan import SLO, Device, GearPlan, fixed_plan
from cascadeserve.planner import Planner
from cascadeserve.policy import PlanTables
from cascadeserve.policy.tuning import OnlineTuning
from cascadeserve.profile import Profile, load_profile
from cascadeserve.runtime import Answer, Recorder, RuntimeOptions, emulated_runtime
from cascadeserve.traces import poisson

ROOT = Path(__file__).resolve().parents[1]


async def serve_stream(
    profile: Profile, plan: GearPlan, arrivals: np.ndarray, samples: np.ndarray, options: RuntimeOptions
) -> tuple[list[Answer | None], Recorder, float]:
    """Replay ``arrivals`` in real time (request ``i`` takes validation row ``samples[i]``); the answers, the
    recorder of batches and threshold changes, and the clock time the run started at."""
    rec = Recorder()
    rt = emulated_runtime(profile, plan, observer=rec, options=options)
    await rt.start()
    start = rt.clock.now()
    futures = []
    i, n = 0, len(arrivals)
    while i < n:
        now = rt.clock.now() - start
        j = int(np.searchsorted(arrivals, now, side="right"))
        for k in range(i, max(i, j)):  # everything due by now, one request per arrival
            futures += [r.future for r in rt.submit([int(samples[k])])]
        i = max(i, j)
        if i < n:
            await asyncio.sleep(max(0.0, min(0.002, arrivals[i] - (rt.clock.now() - start))))
    results = await asyncio.gather(*futures, return_exceptions=True)
    await asyncio.sleep(0.2)  # let the last audit continuations finish (they count as work)
    await rt.stop(grace_s=1.0)
    return [r if isinstance(r, Answer) else None for r in results], rec, start


def timeline(
    profile: Profile, answers: list[Answer | None], rec: Recorder, start: float, samples: np.ndarray,
    arrivals: np.ndarray,
    bucket_s: float,
) -> dict[str, Any]:  # fmt: skip
    """Per ``bucket_s`` of the run: agreement with cnn-wide and accuracy of the answers of requests arriving in it,
    device ms per request, and the thresholds in force (gear of most arrivals)."""
    last = profile.index("cnn-wide")
    n_b = int(np.ceil(arrivals[-1] / bucket_s)) + 1
    agree = np.zeros(n_b)
    acc = np.zeros(n_b)
    cnt = np.zeros(n_b)
    gear_votes: list[dict[int, int]] = [{} for _ in range(n_b)]
    for i, a in enumerate(answers):
        b = int(arrivals[i] // bucket_s)
        cnt[b] += 1
        if a is None:
            continue
        agree[b] += a.label == profile.predictions[last, samples[i]]
        acc[b] += a.label == profile.labels[samples[i]]
        gear_votes[b][a.gear] = gear_votes[b].get(a.gear, 0) + 1
    work = np.zeros(n_b)
    prof = np.zeros(n_b)
    for e in rec.batches:
        b = min(n_b - 1, max(0, int((e.start - start) // bucket_s)))
        work[b] += (e.end - e.start) * 1000.0
        prof[b] += profile.models[e.row].runtime.seconds(e.size) * 1000.0
    changes = [
        {"t": d.at - start, "gear": d.gear, "new": list(d.new), "reason": d.reason} for d in rec.threshold_changes
    ]
    keep = cnt > 0  # a bucket past the last arrival holds no request
    return {
        "bucket_s": bucket_s,
        "t": (np.arange(n_b) * bucket_s)[keep].tolist(),
        "agreement": (agree / np.maximum(cnt, 1))[keep].tolist(),
        "accuracy": (acc / np.maximum(cnt, 1))[keep].tolist(),
        "work_ms_per_request": (work / np.maximum(cnt, 1))[keep].tolist(),
        "profiled_ms_per_request": (prof / np.maximum(cnt, 1))[keep].tolist(),
        "gear": [max(v, key=lambda g: v[g]) if v else -1 for v, k in zip(gear_votes, keep, strict=True) if k],
        "changes": changes,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qps", type=float, default=150.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--windows", type=int, default=6)
    ap.add_argument("--audit", type=float, default=0.1, help="audit fraction of early exits")
    ap.add_argument("--window", type=int, default=512, help="records per gear in the tuner's window")
    ap.add_argument("--period", type=float, default=5.0, help="seconds between periodic re-tunes")
    ap.add_argument("--trace", type=Path, default=None, help="write the last tuned run's timeline (JSON)")
    ap.add_argument("--plot", type=Path, default=None, help="plot the last runs' timelines (PNG)")
    a = ap.parse_args()
    clean = load_profile(ROOT / "profiles" / "digits-drift" / "clean")
    stream = load_profile(ROOT / "profiles" / "digits-drift" / "stream")
    devices = [Device(name=f"dev{i}", memory_mb=1000.0) for i in range(2)]
    t0 = time.perf_counter()
    fitted = Planner(n_ranges=4, seed=0).fit(clean, devices, SLO(kind="p95_ms", value=50.0), a.qps * 1.5).plan_
    assert fitted is not None
    plan: GearPlan = fitted
    plan_s = time.perf_counter() - t0
    best = fixed_plan(stream, Cascade(("cnn-wide",)), devices, max_qps=a.qps * 1.5)
    clean_tuning = OnlineTuning.for_plan(PlanTables(plan, {m: clean.index(m) for m in clean.model_names}), clean)
    targets = dict(clean_tuning.tuner.target)
    rows = {m: stream.index(m) for m in stream.model_names}

    def tuning(tables: PlanTables) -> OnlineTuning:
        tu = OnlineTuning.for_plan(
            PlanTables(tables.plan, rows), stream, audit_fraction=a.audit, window=a.window, period_s=a.period
        )
        tu.tuner.target = dict(targets)  # the targets of the clean data, as in the simulator's benchmark
        return tu

    pos = {int(s): i for i, s in enumerate(stream.sample_ids)}
    cl = stream.sample_ids[stream.sample_ids < SHIFT_ID_OFFSET]
    sh = stream.sample_ids[stream.sample_ids >= SHIFT_ID_OFFSET]
    print(f"plan ({plan_s:.1f} s): " + "; ".join(f"{'>'.join(g.models)} @ {g.thresholds}" for g in plan.gears))
    print("tuner targets (agreement with the last stage):", {g: round(t, 4) for g, t in targets.items()})
    table: dict[str, list[list[float]]] = {}
    lines: dict[str, dict[str, Any]] = {}
    last = stream.index("cnn-wide")
    for run in range(a.runs):
        arr = poisson(a.qps, a.seconds, seed=run).arrivals
        order = drift_order(len(arr), cl, sh, 0.2, 0.6, seed=run)
        samples = np.array([pos[int(s)] for s in order], dtype=np.int64)
        systems = (
            ("fixed", plan, RuntimeOptions()),
            ("tuned", plan, RuntimeOptions(tuning=tuning)),
            ("best alone", best, RuntimeOptions()),
        )
        for name, p, opts in systems:
            answers, rec, start = asyncio.run(serve_stream(stream, p, arr, samples, opts))
            labels = np.array([-1 if x is None else x.label for x in answers])
            correct = labels == stream.labels[samples]
            edges = np.linspace(0, len(arr), a.windows + 1).astype(int)
            accs = [float(correct[x:y].mean()) for x, y in itertools.pairwise(edges)]
            tail = slice(2 * len(arr) // 3, len(arr))
            agree = float(np.mean(labels[tail] == stream.predictions[last, samples[tail]]))
            work = sum(e.end - e.start for e in rec.batches) * 1000.0 / len(arr)
            # the profiled device time of the same batches (what the simulator charges): without the real clock's
            # sleep overshoot and event-loop delays, which every batch pays and cascades (more batches) pay more
            prof_work = sum(stream.models[e.row].runtime.seconds(e.size) for e in rec.batches) * 1000.0 / len(arr)
            lat = np.array([x.finished - start - arr[i] for i, x in enumerate(answers) if x is not None])
            p95 = float(np.percentile(lat, 95)) * 1000.0 if len(lat) else float("nan")
            unanswered = sum(x is None for x in answers)
            row = [*accs, work, p95, float(len(rec.threshold_changes)), agree, float(unanswered), prof_work]
            table.setdefault(name, []).append(row)
            lines[name] = timeline(stream, answers, rec, start, samples, arr, bucket_s=a.seconds / 30)
            print(f"  run {run} {name}: agree(last third) {agree:.4f}, work {work:.3f} ms/req (profiled "
                  f"{prof_work:.3f}), p95 {p95:.1f} ms, "
                  f"{len(rec.threshold_changes)} changes, {unanswered} unanswered", flush=True)  # fmt: skip
    print(f"{'system':11} " + " ".join(f"acc w{i}" for i in range(a.windows)) + "  work ms/req  p95 ms  changes"
          "  agree (last third)  unanswered  profiled work ms/req")  # fmt: skip
    for name, runs in table.items():
        med = [statistics.median(r[i] for r in runs) for i in range(len(runs[0]))]
        accs = " ".join(f"{x:6.3f}" for x in med[: a.windows])
        w = a.windows
        print(f"{name:11} {accs}  {med[w]:11.3f}  {med[w + 1]:6.1f}  {med[w + 2]:7.0f}  {med[w + 3]:.4f}"
              f"  {med[w + 4]:.0f}  {med[w + 5]:.3f}")  # fmt: skip
    initial = {g: list(gear.thresholds) for g, gear in enumerate(plan.gears)}
    doc = {"qps": a.qps, "seconds": a.seconds, "audit": a.audit, "targets": targets, "initial": initial,
           "systems": lines}  # fmt: skip
    if a.trace is not None:
        a.trace.write_text(json.dumps(doc))
    if a.plot is not None:
        from cascadeserve.eval.plots import plot_tuning

        plot_tuning(doc, a.plot)


if __name__ == "__main__":
    main()
