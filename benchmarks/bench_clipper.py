"""Clipper's serving layer on cascades: the prediction cache, adaptive batching under a slowdown, model selection.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_clipper.py cache|batching|selection|all [--json]

* ``cache``: the digits profile (``profiles/digits``), cascade cnn-small -> cnn-wide (threshold 0.99) on two
  emulated devices, p95 SLO 50 ms. Requests take validation samples with Zipf(1.0) popularity (a random order of
  the 600 samples; rank k drawn with probability proportional to 1/k), Poisson arrivals, 10 s. The throughput at
  the SLO is the largest rate (bisection) at which p95 <= 50 ms and every request is answered, with and without a
  64-entry LRU cache, on the same traces; then the runtime (emulated devices on a fake clock: the real consumers,
  producer and cache, with virtual time) replays the same traces at both rates. The hit path: a real uvicorn server
  on 127.0.0.1, one request at a time: p50 of a cache hit, of a miss with the cache on, and of the same requests
  with the cache off (the miss path's added cost is the difference of the last two).
* ``batching``: the same cascade and devices, planner-style minimum queue 16 with a 20 ms max wait, p95 SLO
  60 ms, 1000 QPS uniform arrivals for 20 s; device d0 slows down 2x at t = 10 s (the fault hook). p95 before
  (arrivals in [1, 10) s) and after (arrivals in [11, 20) s) for plan, aimd and quantile, in the simulator and
  on the runtime (fake clock), plus a small grid of rates.
* ``selection``: two real models on ``sklearn.datasets.load_digits`` (the digits family's 600-image validation
  split, seed 0): ``current`` is a 3-nearest-neighbour classifier, ``candidate`` a logistic regression trained on
  the training images and their copies shifted one pixel right. The request stream is 3,000 validation images,
  then 3,000 *shifted one pixel right* (a camera that moved), which hurts the neighbour classifier (0.98 -> 0.61)
  far more than the candidate (0.95 -> 0.94), so the better model changes halfway. Each request is served by the
  :class:`~cascadeserve.store.Selector` (state in a real SQLite file) and its true label fed back at once. For
  exp3: cumulative regret against the best single model in hindsight and against the best model of each phase,
  and the feedback samples after the switch until the policy prefers the candidate (and keeps it for the rest of
  the stream); for exp4: ensemble accuracy against each single model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from cascadeserve.cascade import Cascade
from cascadeserve.plan import SLO, Device, GearPlan, fixed_plan
from cascadeserve.policy.cache import PredictionCache
from cascadeserve.profile import Profile, load_profile
from cascadeserve.profile.slowdown import Slowdown, Slowdowns
from cascadeserve.runtime import FakeClock, RuntimeOptions, emulated_runtime
from cascadeserve.simulate import simulate
from cascadeserve.simulate.engine import tick_windows

ROOT = Path(__file__).resolve().parents[1]
DEVS = (Device(name="d0", memory_mb=100), Device(name="d1", memory_mb=100))


def zipf_samples(n: int, n_samples: int, rng: np.random.Generator, exponent: float = 1.0) -> np.ndarray:
    """``n`` validation sample indices with Zipf popularity over a random order of the samples."""
    w = 1.0 / np.arange(1, n_samples + 1) ** exponent
    ranks = rng.choice(n_samples, size=n, p=w / w.sum())
    return rng.permutation(n_samples)[ranks]


def poisson(rate: float, duration: float, rng: np.random.Generator) -> np.ndarray:
    n = rng.poisson(rate * duration)
    return np.sort(rng.uniform(0.0, duration, n))


async def _replay(
    profile: Profile,
    plan: GearPlan,
    arrivals: np.ndarray,
    samples: np.ndarray,
    options: RuntimeOptions | None = None,
    slowdowns: Slowdowns | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The runtime on a fake clock: submit sample ``samples[i]`` at ``arrivals[i]``; latencies and cached flags."""
    clock = FakeClock()
    rt = emulated_runtime(profile, plan, clock=clock, options=options, slowdowns=slowdowns)
    await rt.start()
    tick = plan.tick_ms / 1000.0
    drain_at = tick_windows(arrivals, tick) * tick
    reqs = []
    times = arrivals.tolist()
    for i, t in enumerate(times):
        if i == 0 or t != times[i - 1]:
            await clock.advance_to(t, up_to_order=-1)
        reqs += rt.submit([int(samples[i])])
    await clock.advance_to(drain_at)
    rt.drain()
    while not all(r.done for r in reqs):
        await asyncio.sleep(0)
        nxt = clock.next_deadline()
        if nxt is not None:
            await clock.advance_to(nxt)
    await rt.stop(grace_s=0.0)
    answers = [r.future.result() for r in reqs]
    lat = np.array([a.finished for a in answers]) - arrivals
    return lat, np.array([a.cached for a in answers])


def _p95_ms(lat: np.ndarray) -> float:
    return float(np.percentile(lat, 95) * 1000.0)


# -- cache --------------------------------------------------------------------------------------------------------
def _cache_plan(profile: Profile) -> GearPlan:
    return fixed_plan(
        profile,
        Cascade(("cnn-small", "cnn-wide"), (0.99,)),
        DEVS,
        max_wait_ms=2.0,
        slo=SLO(kind="p95_ms", value=50.0),
    )


def _max_rate(ok: Any, lo: float, hi: float, steps: int = 12) -> float:
    for _ in range(steps):
        mid = (lo + hi) / 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def cache_sim(profile: Profile, cache_size: int = 64, duration: float = 10.0, seed: int = 0) -> dict[str, Any]:
    plan = _cache_plan(profile)

    def trace(rate: float) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(seed)
        arr = poisson(rate, duration, rng)
        return arr, zipf_samples(len(arr), profile.n_samples, rng)

    def run(rate: float, cached: bool) -> Any:
        arr, samples = trace(rate)
        cache = PredictionCache[int](cache_size) if cached else None
        return simulate(profile, plan, arr, cache=cache, samples=samples)

    def ok(cached: bool) -> Any:
        return lambda rate: (r := run(rate, cached)).unanswered == 0 and _p95_ms(r.latency_s) <= 50.0

    t0 = time.perf_counter()
    uncached = _max_rate(ok(False), 100.0, 20_000.0)
    cached = _max_rate(ok(True), 100.0, 60_000.0)
    res_c = run(cached, True)
    out: dict[str, Any] = {
        "cache_size": cache_size,
        "sim_max_qps_uncached": uncached,
        "sim_max_qps_cached": cached,
        "ratio": cached / uncached,
        "sim_hit_rate_at_cached_max": float(np.mean(res_c.cached)) if res_c.cached is not None else 0.0,
        "sim_wall_s": time.perf_counter() - t0,
    }
    # the runtime (fake clock) on the same traces, at both rates
    for label, rate in (("uncached_max", uncached), ("cached_max", cached)):
        arr, samples = trace(rate)
        for on in (False, True):
            opts = RuntimeOptions(cache_size=cache_size if on else None, max_in_flight=None)
            lat, hit = asyncio.run(_replay(profile, plan, arr, samples, opts))
            sim = run(rate, on)
            key = f"{label}_{'cached' if on else 'uncached'}"
            out[f"p95_ms_{key}"] = {"sim": _p95_ms(sim.latency_s), "runtime": _p95_ms(lat)}
            out[f"hit_rate_{key}"] = {
                "sim": float(np.mean(sim.cached)) if sim.cached is not None else 0.0,
                "runtime": float(np.mean(hit)),
            }
    return out


def cache_http(profile_dir: Path, n: int = 300, runs: int = 3) -> dict[str, Any]:
    """p50 over HTTP of a hit, a miss with the cache on, and the same requests with it off (median of runs)."""
    import httpx

    from cascadeserve.http import Server, build_app

    profile = load_profile(profile_dir)
    plan = _cache_plan(profile)

    def body(sample: int) -> dict[str, Any]:
        return {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1], "data": [sample]}]}

    def p50(url: str, samples: list[int]) -> float:
        lat = []
        with httpx.Client(timeout=10) as c:
            for s in samples:
                t0 = time.perf_counter()
                r = c.post(f"{url}/v2/models/digits/infer", json=body(s))
                lat.append(time.perf_counter() - t0)
                assert r.status_code == 200, r.text
        return statistics.median(lat) * 1000.0

    sids = [int(s) for s in profile.sample_ids.tolist()]
    res: dict[str, list[float]] = {"hit": [], "miss_cache_on": [], "cache_off": []}
    for _ in range(runs):
        for on in (True, False):
            app = build_app(profile, plan, emulate=True, runtime_options=RuntimeOptions(cache_size=4 if on else None))
            with Server(app, "127.0.0.1", 0) as srv:
                misses = sids[:n]  # distinct inputs: every one a miss (the cache holds 4)
                if on:
                    res["miss_cache_on"].append(p50(srv.url, misses))
                    p50(srv.url, [sids[0]] * 5)
                    res["hit"].append(p50(srv.url, [sids[0]] * n))
                else:
                    res["cache_off"].append(p50(srv.url, misses))
    med = {k: statistics.median(v) for k, v in res.items()}
    med["miss_added_ms"] = med["miss_cache_on"] - med["cache_off"]
    med["runs"] = runs
    med["requests_per_run"] = n
    return med


# -- adaptive batching --------------------------------------------------------------------------------------------
def _batching_plan(profile: Profile) -> GearPlan:
    return fixed_plan(
        profile,
        Cascade(("cnn-small", "cnn-wide"), (0.99,)),
        DEVS,
        min_queue=16,
        max_wait_ms=20.0,
        slo=SLO(kind="p95_ms", value=60.0),
    )


def batching(profile: Profile, duration: float = 20.0, rates: tuple[float, ...] = (800.0, 1000.0, 1200.0)) -> dict:
    plan = _batching_plan(profile)
    slow = Slowdowns.of(Slowdown("d0", duration / 2, 2.0))
    out: dict[str, Any] = {"slo_p95_ms": 60.0, "slowdown": "d0 x2 at t=10 s", "rows": []}
    for rate in rates:
        arr = np.sort(np.random.default_rng(0).uniform(0, duration, int(rate * duration)))
        samples = np.arange(len(arr)) % profile.n_samples
        before = (arr >= 1.0) & (arr < duration / 2)
        after = arr >= duration / 2 + 1.0
        for kind in ("plan", "aimd", "quantile"):
            p = plan.model_copy(update={"batching": kind})
            sim = simulate(profile, p, arr, slowdowns=slow)
            row: dict[str, Any] = {
                "qps": rate,
                "batching": kind,
                "sim_p95_before_ms": _p95_ms(sim.latency_s[before]),
                "sim_p95_after_ms": _p95_ms(sim.latency_s[after]),
            }
            if rate == 1000.0:  # the runtime on the fake clock, same trace and slowdown
                lat, _ = asyncio.run(_replay(profile, p, arr, samples, RuntimeOptions(max_in_flight=None), slow))
                row["runtime_p95_before_ms"] = _p95_ms(lat[before])
                row["runtime_p95_after_ms"] = _p95_ms(lat[after])
            row["holds_after"] = row["sim_p95_after_ms"] <= 60.0
            out["rows"].append(row)
    return out


def _digits_models() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Predictions of both models on the clean and the shifted validation images, and the labels."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # BLAS threads thrash on a busy 2-core machine
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split
    from sklearn.neighbors import KNeighborsClassifier

    x, y = load_digits(return_X_y=True)
    x = x / 16.0
    xtr, xva, ytr, yva = train_test_split(x, y, test_size=600, stratify=y, random_state=0)

    def shift(a: np.ndarray) -> np.ndarray:
        im = a.reshape(-1, 8, 8)
        out = np.zeros_like(im)
        out[:, :, 1:] = im[:, :, :-1]
        return out.reshape(-1, 64)

    knn = KNeighborsClassifier(3).fit(xtr, ytr)
    lr = LogisticRegression(max_iter=300).fit(np.vstack([xtr, shift(xtr)]), np.concatenate([ytr, ytr]))
    preds = np.array(
        [[knn.predict(xva), lr.predict(xva)], [knn.predict(shift(xva)), lr.predict(shift(xva))]]
    )  # [phase, model, sample]
    return preds, yva, xva


def selection(n_phase: int = 3000, eta: float = 0.05, gamma: float = 0.05, seed: int = 0) -> dict[str, Any]:
    from cascadeserve.store import Selector, SqliteSelectionStore
    from cascadeserve.store.selector import GLOBAL

    preds, labels, _ = _digits_models()
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.integers(0, len(labels), n_phase), rng.integers(0, len(labels), n_phase)])
    phase = np.repeat([0, 1], n_phase)
    truth = labels[order]
    each = preds[phase, :, order]  # [request, model]
    wrong = each != truth[:, None]
    out: dict[str, Any] = {
        "models": ["current (3-NN)", "candidate (logistic regression, shift-augmented)"],
        "accuracy_clean": [float(1 - wrong[:n_phase, m].mean()) for m in (0, 1)],
        "accuracy_shifted": [float(1 - wrong[n_phase:, m].mean()) for m in (0, 1)],
        "eta": eta,
        "gamma": gamma,
    }
    with tempfile.TemporaryDirectory() as tmp:
        sel3 = Selector(
            "digits",
            ["current", "candidate"],
            "exp3",
            SqliteSelectionStore(Path(tmp) / "e3.sqlite"),
            eta=eta,
            gamma=gamma,
            seed=seed,
        )
        chosen_wrong = np.zeros(len(order), dtype=bool)
        prefers = np.zeros(len(order), dtype=int)
        t0 = time.perf_counter()
        for i in range(len(order)):
            pick = sel3.choose()
            chosen_wrong[i] = wrong[i, pick.alternative]
            sel3.feedback_exp3(pick, not chosen_wrong[i])
            prefers[i] = sel3.state(GLOBAL).best()
        wall3 = time.perf_counter() - t0
        sel4 = Selector(
            "digits",
            ["current", "candidate"],
            "exp4",
            SqliteSelectionStore(Path(tmp) / "e4.sqlite"),
            eta=eta,
            seed=seed,
        )
        ens_wrong = np.zeros(len(order), dtype=bool)
        for i in range(len(order)):
            members = [int(each[i, 0]), int(each[i, 1])]
            ens_wrong[i] = sel4.combine(members).label != truth[i]
            sel4.feedback_exp4(members, int(truth[i]))
    best_fixed = int(np.argmin(wrong.sum(axis=0)))
    per_phase_best = wrong[:n_phase].sum(axis=0).min() + wrong[n_phase:].sum(axis=0).min()
    after = prefers[n_phase:]
    # samples after the switch until the candidate is preferred and stays preferred to the end
    flips = np.flatnonzero(after != 1)
    to_switch = int(flips[-1] + 1) if len(flips) else 0
    out["exp3"] = {
        "errors": int(chosen_wrong.sum()),
        "regret_vs_best_single": int(chosen_wrong.sum() - wrong[:, best_fixed].sum()),
        "regret_vs_best_per_phase": int(chosen_wrong.sum() - per_phase_best),
        "accuracy": float(1 - chosen_wrong.mean()),
        "feedback_until_prefers_candidate": to_switch,
        "candidate_share_last_1000": float(np.mean(after[-1000:] == 1)),
        "wall_s_per_request_incl_sqlite": wall3 / len(order),
    }
    out["exp4"] = {
        "accuracy": float(1 - ens_wrong.mean()),
        "accuracy_clean": float(1 - ens_wrong[:n_phase].mean()),
        "accuracy_shifted": float(1 - ens_wrong[n_phase:].mean()),
        "best_single_accuracy": float(1 - wrong[:, best_fixed].mean()),
        "best_single": best_fixed,
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["cache", "batching", "selection", "all"])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    profile = load_profile(ROOT / "profiles" / "digits")
    out: dict[str, Any] = {}
    if args.what in ("cache", "all"):
        out["cache_sim"] = cache_sim(profile)
        out["cache_http"] = cache_http(ROOT / "profiles" / "digits")
    if args.what in ("batching", "all"):
        out["batching"] = batching(profile)
    if args.what in ("selection", "all"):
        out["selection"] = selection()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
