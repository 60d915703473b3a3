"""Degradation timelines (paper Fig. 8/9) and fixed-device trade-off curves (Fig. 5/6).

**Timeline.** Each system runs on a spiky trace at its own device count. Its setting is chosen by the same rule
for every system: among its grid's settings, the most accurate one whose p95 on this trace meets the latency SLO,
or, when none does, the one with the lowest p95. Accuracy and p95 are then measured over sliding windows of the
requests' arrival times. With ``real=True`` every chosen deployment also runs on the asyncio runtime with emulated
devices (requests submitted in process at their arrival times, latency measured on the wall clock), with the
same policy hooks as in the simulator (MS+'s AIMD batching, Cocktail+'s gear schedule; a fresh AIMD limit per
run). A real run's accuracy can differ from the simulated one only where a request's gear depends on timing (a
gear chosen from measured QPS); its latency also carries the machine's own overheads.

**Curves.** At a fixed device count, each fixed-device system's latency-accuracy Pareto front over its grid.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from cascadeserve.baselines import Deployment, Outcome, System, Workload
from cascadeserve.runtime import RuntimeOptions

__all__ = ["degradation", "pareto", "sliding", "trade_off_curves"]


def sliding(
    arrivals: np.ndarray, latency_s: np.ndarray, correct: np.ndarray, window_s: float, step_s: float = 1.0
) -> dict[str, list[float]]:
    """p95 latency (ms) and accuracy of the requests that arrived in each window ``[t - window_s, t)``."""
    end = float(arrivals[-1]) if len(arrivals) else 0.0
    ts = np.arange(window_s, end + step_s, step_s)
    lo = np.searchsorted(arrivals, ts - window_s)
    hi = np.searchsorted(arrivals, ts)
    p95, acc, t_out = [], [], []
    for t, a, b in zip(ts.tolist(), lo.tolist(), hi.tolist(), strict=True):
        if b > a:
            t_out.append(t)
            p95.append(float(np.percentile(latency_s[a:b], 95) * 1000.0))
            acc.append(float(correct[a:b].mean()))
    return {"t": t_out, "p95_ms": p95, "accuracy": acc}


def _choose(system: System, w: Workload, devices: int, slo_ms: float) -> tuple[Deployment, Outcome] | None:
    best: tuple[tuple[int, float, float], Deployment, Outcome] | None = None
    for cfg in system.configs(w, devices):
        dep = system.deploy(w, devices, cfg)
        if dep is None:
            continue
        o = dep.outcome(dep.simulate(w.trace.arrivals))
        ok = o.p95_ms <= slo_ms
        key = (0 if ok else 1, -o.accuracy if ok else o.p95_ms, o.p95_ms)
        if best is None or key < best[0]:
            best = (key, dep, o)
    return None if best is None else (best[1], best[2])


async def _replay(dep: Deployment, arrivals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rt = dep.emulated_runtime(options=RuntimeOptions(max_in_flight=None))
    await rt.start()
    n = len(arrivals)
    sent = np.zeros(n)
    futures: list[Any] = []
    t0 = time.monotonic()
    i = 0
    while i < n:
        now = time.monotonic() - t0
        j = int(np.searchsorted(arrivals, now, side="right"))
        if j > i:
            ids = list(range(i, j))
            sent[i:j] = now
            futures += [r.future for r in rt.submit([k % dep.profile.n_samples for k in ids])]
            i = j
        await asyncio.sleep(max(0.0, min(0.001, float(arrivals[i]) - now)) if i < n else 0)
    answers = await asyncio.gather(*futures)
    done = time.monotonic()
    await rt.stop(grace_s=0)
    # the runtime's clock is monotonic seconds; an answer's ``finished`` is on that clock
    fin = np.array([a.finished for a in answers]) - t0
    fin = np.where(np.isfinite(fin), fin, done - t0)
    labels = dep.profile.labels[np.arange(n) % dep.profile.n_samples]
    correct = np.array([a.label for a in answers]) == labels
    # latency from the intended arrival time, so the replay's own send lag counts against the system
    return fin - arrivals, correct


def degradation(
    w: Workload,
    systems: Sequence[System],
    devices: Mapping[str, int],
    slo_ms: float,
    *,
    window_s: float = 5.0,
    real: bool = False,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Per system: the chosen setting, its overall outcome, and sliding-window p95/accuracy (and real ones).
    ``progress`` hears a line per system chosen and before each real replay (each lasts the trace's duration)."""
    arr = np.asarray(w.trace.arrivals)
    out: dict[str, Any] = {"slo_ms": slo_ms, "window_s": window_s, "trace": w.trace.source, "systems": {}}
    qps = w.trace.per_second_counts()
    out["qps"] = {"t": list(range(len(qps))), "qps": [int(q) for q in qps]}
    for s in systems:
        d = devices.get(s.name)
        if d is None:
            continue
        hit = _choose(s, w, d, slo_ms)
        if hit is None:
            continue
        dep, o = hit
        if progress is not None:
            progress(f"timeline: {s.name} on {d} devices, simulated p95 {o.p95_ms:.1f} ms")
        res = dep.simulate(arr)
        entry: dict[str, Any] = {
            "devices": d,
            "outcome": o.to_dict(),
            "sim": sliding(arr, res.latency_s, res.correct, window_s),
        }
        if real:
            if progress is not None:
                progress(f"timeline: {s.name} replaying {len(arr):,} requests on the runtime in real time")
            lat, correct = asyncio.run(_replay(dep, arr))
            entry["real"] = sliding(arr, lat, correct, window_s)
            entry["real_p95_ms"] = float(np.percentile(lat, 95) * 1000.0)
            entry["real_accuracy"] = float(correct.mean())
        out["systems"][s.name] = entry
    return out


def pareto(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """Outcomes no other beats on both p95 (lower) and accuracy (higher), fastest first."""
    front: list[Outcome] = []
    best = -np.inf
    for o in sorted(outcomes, key=lambda o: (o.p95_ms, -o.accuracy)):
        if o.accuracy > best:
            front.append(o)
            best = o.accuracy
    return front


def trade_off_curves(
    outcomes_by_system: Mapping[str, Mapping[int, Sequence[Outcome]]], devices: int
) -> dict[str, list[dict[str, float]]]:
    """Per system, its Pareto front at ``devices`` devices (systems not evaluated there are left out)."""
    out: dict[str, list[dict[str, float]]] = {}
    for name, by_d in outcomes_by_system.items():
        if devices in by_d:
            out[name] = [{"p95_ms": o.p95_ms, "accuracy": o.accuracy} for o in pareto(by_d[devices])]
    return out
