"""The cascade as a dataflow against the same cascade on the gear runtime, on the same trace.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_flow_cascade.py [--models logreg,cnn,cnn-wide]
        [--thresholds 0.9,0.9] [--window 120:30] [--max-qps 120] [--runs 3]

The digits family (trained models from the cache). The flow is the paper's cascade shape (``model`` ->
``filter(uncertain(t))`` -> ``model`` ... -> left joins -> ``cascade_answer``), deployed twice:

* **flow**: the embedded dataflow executor with every optimisation (the model operators batch across calls, up
  to 10; 2 CPU workers);
* **gears**: ``deploy(backend="gears")``: the same shape recognised and served by cascadeserve's runtime on a
  one-gear fixed plan of the same cascade and thresholds (2 devices, every model on both, minimum queue 1).

The bundled Twitter excerpt (``--window``, scaled so its busiest second is ``--max-qps``) is replayed open loop
on each, one one-row call per arrival carrying a real validation image (in order, cycling). The table shows the
median over ``--runs`` runs of p50/p95/p99 latency (arrival to answer), the accuracy and how many calls were
answered. Both must give the same answers (checked: the same label for every call).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from typing import Any

import numpy as np
from bench_flow_common import machine, med, pct

from cascadeserve.flow import Dataflow, Table, cascade_answer, model, uncertain
from cascadeserve.plan import Device
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve


def build(adapters: list[Any], thresholds: list[float]) -> Dataflow:
    fl = Dataflow([("pixels", np.ndarray)])
    stages = [fl.map(model(adapters[0]))]
    for a, t in zip(adapters[1:], thresholds, strict=True):
        stages.append(stages[-1].filter(uncertain(t)).map(model(a)))
    out = stages[0]
    for s in stages[1:]:
        out = out.join(s, how="left")
    fl.output = out.map(cascade_answer)
    return fl


def replay(ex: Any, arrivals: np.ndarray, images: np.ndarray) -> tuple[list[float], list[int]]:
    n = len(arrivals)
    lat = [float("nan")] * n
    labels = [-1] * n
    done = threading.Event()
    left = [n]
    lock = threading.Lock()
    t0 = time.perf_counter()

    def finish(i: int, sent: float, fut: Any) -> None:
        lat[i] = (time.perf_counter() - sent) * 1e3
        try:
            labels[i] = int(fut.result().column("label")[0])
        except Exception:
            labels[i] = -2
        with lock:
            left[0] -= 1
            if left[0] == 0:
                done.set()

    for i, at in enumerate(arrivals):
        wait = t0 + float(at) - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        sent = t0 + float(at)
        fut = ex.execute(Table([("pixels", np.ndarray)], [images[i % len(images)]]))
        fut.add_done_callback(lambda f, i=i, sent=sent: finish(i, sent, f))
    done.wait(120)
    return lat, labels


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="logreg,cnn,cnn-wide")
    ap.add_argument("--thresholds", default="0.9,0.9")
    ap.add_argument("--window", default="120:30")
    ap.add_argument("--max-qps", type=float, default=120.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from cascadeserve.demo.run import trace_path
    from cascadeserve.models import TorchAdapter
    from cascadeserve.models.families import digits
    from cascadeserve.traces import build_trace

    print(f"# machine: {machine()}")
    names = args.models.split(",")
    thresholds = [float(t) for t in args.thresholds.split(",")]
    adapters = [TorchAdapter(n, digits.load(n), threads=1) for n in names]
    _, _, xv, yv, _ = digits.split(0)
    prof = Profile.from_scores(
        "digits",
        [ModelProfile(n, 1.0, RuntimeCurve((1,), (1.0,))) for n in names],
        yv,
        {a.name: a.predict(xv) for a in adapters},
        device="bench",
        source="benchmarks/bench_flow_cascade.py",
    )
    trace = build_trace(trace_path(), window=args.window, max_qps=args.max_qps, seed=0)
    arrivals = np.asarray(trace.arrivals)
    truth = np.asarray([yv[i % len(yv)] for i in range(len(arrivals))])
    fl = build(adapters, thresholds)
    devices = [Device(name="d0", memory_mb=1e6), Device(name="d1", memory_mb=1e6)]
    res: dict[str, list[dict[str, float]]] = {"flow": [], "gears": []}
    same = True
    for _ in range(args.runs):
        got: dict[str, list[int]] = {}
        for kind in ("flow", "gears"):
            ex = fl.deploy("gears", profile=prof, devices=devices) if kind == "gears" else fl.deploy(workers=2)
            lat, labels = replay(ex, arrivals, xv)
            ex.close()
            got[kind] = labels
            ok = np.asarray(labels) >= 0
            res[kind].append(
                {
                    "p50": pct(lat, 50),
                    "p95": pct(lat, 95),
                    "p99": pct(lat, 99),
                    "accuracy": float(np.mean(np.asarray(labels)[ok] == truth[ok])),
                    "answered": float(ok.sum()),
                }
            )
        same = same and got["flow"] == got["gears"]
    print(f"trace: {len(arrivals)} calls over {args.window} s of the Twitter excerpt, peak {args.max_qps:g} QPS")
    rows = {k: {m: med([r[m] for r in v]) for m in v[0]} for k, v in res.items()}
    for k, r in rows.items():
        print(
            f"{k:5s}: p50 {r['p50']:7.1f} ms, p95 {r['p95']:7.1f} ms, p99 {r['p99']:7.1f} ms, accuracy "
            f"{r['accuracy']:.4f}, answered {int(r['answered'])}/{len(arrivals)}"
        )
    print(f"same label for every call: {same}")
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
