"""The Ray backend against the local backend on the same emulated plan, in the same run.

    .venv/bin/python benchmarks/bench_ray.py [--devices 16] [--qps 1000] [--duration 3] [--runs 3] [--json]

* **Throughput and latency.** A 3-model cascade (emulated BERT-like runtimes, see ``_profile``) on ``--devices``
  emulated devices, every model on every device, even split, minimum queue 1, max wait 5 ms. An open-loop
  constant-rate load of ``--qps`` for ``--duration`` s is submitted in-process (``Runtime.submit``, no HTTP, so the
  figure is the backend's own cost); latency is submit -> answer on the front end's clock. Local and Ray runs
  alternate; the figures are medians over ``--runs``.
* **Per-request overhead.** One device, one model, 1 ms batches, 50 req/s: p50 latency on Ray minus p50 locally.
* **Gear-switch propagation.** A two-gear plan on all devices; a load step makes the producer switch; each server
  stamps when the switch reached it (same host, so ``time.monotonic`` is shared): max over servers of
  ``applied - switched``.
* **Restart.** ``ray.kill(server, no_restart=False)`` on a serving server; time until the restarted actor answers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from typing import Any

import numpy as np
import ray

from cascadeserve.backends.ray import RayBackend, server_actors
from cascadeserve.backends.ray.frontend import RayPlacement
from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, Gear, GearPlan, GearReplica, Replica, fixed_plan
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve
from cascadeserve.runtime import Answer, LocalBackend, Recorder, Runtime, RuntimeOptions


def _profile(n: int = 5000, seed: int = 0) -> Profile:
    rng = np.random.default_rng(seed)
    ms = ((0, 2.0, 6.0), (1, 5.0, 20.0), (2, 12.0, 60.0))  # (i, ms at batch 1, ms at batch 64)
    models = [ModelProfile(f"m{i}", 300.0, RuntimeCurve((1, 64), (a, b))) for i, a, b in ms]
    labels = rng.integers(0, 3, n)
    scores = {m.name: rng.random((n, 3)) + np.eye(3)[labels] * (i + 1) * 0.6 for i, m in enumerate(models)}
    return Profile.from_scores("bench", models, labels, scores, device="emulated", source="benchmarks/bench_ray.py")


def _devices(n: int) -> tuple[Device, ...]:
    return tuple(Device(name=f"d{i}", memory_mb=1000) for i in range(n))


def _make(kind: str, prof: Profile, plan: GearPlan, rec: Recorder) -> Runtime:
    backend = RayBackend() if kind == "ray" else LocalBackend()
    return backend.emulated_runtime(prof, plan, observer=rec, options=RuntimeOptions(max_in_flight=None))


async def _load(rt: Runtime, prof: Profile, qps: float, duration: float) -> dict[str, float]:
    n = int(qps * duration)
    t0 = time.monotonic()
    reqs = []
    sent = []
    for i in range(n):
        due = t0 + i / qps
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        sent.append(time.monotonic())
        reqs += rt.submit([i % prof.n_samples])
    answers: list[Answer] = list(await asyncio.wait_for(asyncio.gather(*(r.future for r in reqs)), timeout=120))
    lat = np.array([a.finished - s for a, s in zip(answers, sent, strict=True)]) * 1000.0
    end = max(a.finished for a in answers)
    return {
        "answered": len(answers),
        "throughput": len(answers) / (end - t0),
        "p50_ms": float(np.percentile(lat, 50)),
        "p99_ms": float(np.percentile(lat, 99)),
    }


async def _serve(kind: str, prof: Profile, plan: GearPlan, qps: float, duration: float) -> dict[str, float]:
    rec = Recorder()
    rt = _make(kind, prof, plan, rec)
    await rt.start()
    await _load(rt, prof, min(qps, 100.0), 0.5)  # warm-up (Ray: worker processes, first calls)
    out = await _load(rt, prof, qps, duration)
    await rt.stop(grace_s=2.0)
    return out


async def _propagation(prof: Profile, n_devices: int) -> float:
    devs = _devices(n_devices)
    replicas = tuple(Replica(model=m, device=d.name) for d in devs for m in ("m0", "m1"))
    share = 1.0 / n_devices
    slow = Gear(
        qps_low=0,
        qps_high=200,
        models=("m0", "m1"),
        thresholds=(0.5,),
        replicas=tuple(GearReplica(model=r.model, device=r.device, share=share) for r in replicas),
    )
    fast = Gear(
        qps_low=200,
        qps_high=1e6,
        models=("m0",),
        replicas=tuple(GearReplica(model=r.model, device=r.device, share=share) for r in replicas if r.model == "m0"),
    )
    plan = GearPlan(profile="bench", devices=devs, replicas=replicas, gears=(slow, fast), max_wait_ms=5.0)
    rt = _make("ray", prof, plan, Recorder())
    assert isinstance(rt.placement, RayPlacement)
    await rt.start()
    await _load(rt, prof, 600.0, 0.5)  # 600 req/s: gear 1 after the first tick
    await asyncio.sleep(0.3)
    gen = rt.current
    delays = [rt.placement.fleet.gear_set_at[d.name][gen.number] - gen.transport.switched_at for d in devs]
    await rt.stop(grace_s=1.0)
    return max(delays) * 1000.0


async def _restart(prof: Profile) -> float:
    plan = fixed_plan(prof, Cascade(("m0",), ()), _devices(1), max_wait_ms=5.0)
    rt = _make("ray", prof, plan, Recorder())
    assert isinstance(rt.placement, RayPlacement)
    await rt.start()
    actor = server_actors(rt)["d0"]
    born = await actor.ping.remote()
    t0 = time.monotonic()
    ray.kill(actor, no_restart=False)
    while True:
        try:
            if await asyncio.wait_for(actor.ping.remote(), timeout=10) != born:
                break
        except Exception:
            await asyncio.sleep(0.01)
    took = time.monotonic() - t0
    await rt.stop(grace_s=0.5)
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=16)
    ap.add_argument("--qps", type=float, default=1000.0)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="csray", dir="/tmp")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 << 20, _temp_dir=tmp, log_to_driver=False)
    prof = _profile()
    plan = fixed_plan(prof, Cascade(("m0", "m1", "m2"), (0.4, 0.4)), _devices(args.devices), max_wait_ms=5.0)
    one = fixed_plan(prof, Cascade(("m0",), ()), _devices(1), max_wait_ms=5.0)
    runs: dict[str, list[dict[str, float]]] = {"local": [], "ray": [], "local_low": [], "ray_low": []}
    prop: list[float] = []
    restart: list[float] = []
    for _ in range(args.runs):
        for kind in ("local", "ray"):
            runs[kind].append(asyncio.run(_serve(kind, prof, plan, args.qps, args.duration)))
            runs[f"{kind}_low"].append(asyncio.run(_serve(kind, prof, one, 50.0, 2.0)))
        prop.append(asyncio.run(_propagation(prof, args.devices)))
        restart.append(asyncio.run(_restart(prof)))
    ray.shutdown()

    def med(kind: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[kind])

    out: dict[str, Any] = {
        "devices": args.devices,
        "offered_qps": args.qps,
        "duration_s": args.duration,
        "runs": args.runs,
        "throughput": {k: med(k, "throughput") for k in ("local", "ray")},
        "p50_ms": {k: med(k, "p50_ms") for k in ("local", "ray")},
        "p99_ms": {k: med(k, "p99_ms") for k in ("local", "ray")},
        "throughput_ratio_ray_over_local": med("ray", "throughput") / med("local", "throughput"),
        "overhead_p50_ms_at_50qps": med("ray_low", "p50_ms") - med("local_low", "p50_ms"),
        "low_load_p50_ms": {"local": med("local_low", "p50_ms"), "ray": med("ray_low", "p50_ms")},
        "gear_propagation_ms_max_over_servers": statistics.median(prop),
        "restart_s": statistics.median(restart),
        "raw": {"runs": runs, "propagation_ms": prop, "restart_s": restart},
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            if k != "raw":
                print(f"{k}: {v}")


if __name__ == "__main__":
    main()
