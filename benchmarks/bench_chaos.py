"""Chaos: does a real server survive overload, a stalled model, slowloris clients and SIGKILL, and recover?

    .venv/bin/python benchmarks/bench_chaos.py [--overload-s 20] [--json] [--skip overload,stall,slowloris,kill]

Bounded, loopback only. Four phases, each on a fresh server:

* **overload then recovery** (``cascadeserve serve`` on the digits family, as ``bench_overload.py`` sets it up):
  twice the measured capacity for ``--overload-s``, 10 s of quiet, then a quarter of the capacity for 20 s. Target:
  ≤ 1 % shed in the quarter-load phase, and a call of 2 rows admitted after it.
* **a stalled model** (in process, a sub-millisecond first stage that stalls for 10 s on one request): liveness
  probes every 100 ms throughout (target: every one within 1 s), the stalled request's status and when it came
  (target: a deadline status at its 1 s deadline), and readiness naming the device.
* **slowloris** (the digits server): 200 connections that send a request head one byte every 2 s for up to 40 s;
  how many the server closed and when, and an ordinary request's latency meanwhile.
* **SIGKILL and restart**: the digits server killed with SIGKILL under load, started again with the same
  command: seconds until ready and whether the first request after it is answered.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_overload as ov  # noqa: E402  (the digits set-up, server and clients, shared)


def _pixels(n: int) -> dict[str, Any]:
    return {"inputs": [{"name": "pixels", "datatype": "FP32", "shape": [n, 64], "data": [[0.0] * 64] * n}]}


def overload_then_recovery(models: Path, prof: Path, plan: Path, overload_s: float) -> dict[str, Any]:
    proc, url = ov.start_server(models, prof, plan)
    try:
        cap = ov.measured_capacity(url)
        hot = ov.run_client(url, 2.0 * cap, overload_s, 0, raw=True)
        time.sleep(10.0)
        calm = ov.run_client(url, 0.25 * cap, 20.0, 1, raw=True)
        two = httpx.post(f"{url}/v2/models/digits/infer", json=_pixels(2), timeout=30)
    finally:
        ov.stop_server(proc)
    return {
        "capacity_qps": round(cap, 1),
        "overload_sent": hot["sent"],
        "overload_shed": hot["shed"],
        "calm_sent": calm["sent"],
        "calm_shed": calm["shed"],
        "calm_shed_pct": round(100.0 * calm["shed"] / max(1, calm["sent"]), 2),
        "two_rows_after": two.status_code,
    }


def stalled_model(stall_s: float = 10.0) -> dict[str, Any]:
    from cascadeserve.cascade import Cascade
    from cascadeserve.http import Server, ServerOptions, build_app
    from cascadeserve.plan import Device, fixed_plan
    from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve
    from cascadeserve.runtime import InputSpec, ModelConfig, RuntimeOptions

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 500)
    curves = [ModelProfile(f"m{i}", 100.0, RuntimeCurve((1, 64), (0.05 * (i + 1), 1.0 * (i + 1)))) for i in range(2)]
    scores = {m.name: rng.random((500, 3)) + np.eye(3)[labels] * 0.5 for m in curves}
    profile = Profile.from_scores("chaos", curves, labels, scores, device="synthetic", source="bench_chaos.py")
    stalling, release = threading.Event(), threading.Event()

    sure = np.tile([0.9, 0.05, 0.05], (4096, 1))

    def m0(batch: np.ndarray) -> np.ndarray:  # a few µs: the kind of model a server might run on its event loop
        if batch[0, 0] < 0 and stalling.is_set():
            release.wait(stall_s)
        return sure[: len(batch)]

    def m1(batch: np.ndarray) -> np.ndarray:
        return np.tile([0.1, 0.2, 0.7], (len(batch), 1))

    plan = fixed_plan(profile, Cascade(("m0", "m1"), (0.5,)), (Device(name="d0", memory_mb=1000),), min_queue=1)
    app = build_app(
        profile,
        plan,
        models=ModelConfig({"m0": m0, "m1": m1}, InputSpec("input", "FP32", (-1, 2))),
        runtime_options=RuntimeOptions(stall_after_s=2.0),
        server_options=ServerOptions(stop_grace_s=1.0),
    )
    server = Server(app, "127.0.0.1", 0, grace_s=1.0).start()
    url = f"{server.url}/v2/models/chaos/infer"

    def body(x: float, **params: object) -> dict[str, Any]:
        return {
            "inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 2], "data": [[x, 0.0]]}],
            "parameters": params,
        }

    try:
        with httpx.Client(timeout=60) as client:
            for _ in range(50):
                client.post(url, json=body(0.9))
            stalling.set()
            result: dict[str, Any] = {}

            def call() -> None:
                t0 = time.monotonic()
                r = httpx.post(url, json=body(-1.0, timeout_ms=1000), timeout=60)
                result.update(status=r.status_code, after_s=round(time.monotonic() - t0, 3))

            caller = threading.Thread(target=call)
            caller.start()
            probes: list[float] = []
            reasons: list[str] = []
            end = time.monotonic() + stall_s
            while time.monotonic() < end:
                t0 = time.monotonic()
                client.get(f"{server.url}/v2/health/live")
                probes.append(time.monotonic() - t0)
                ready = client.get(f"{server.url}/v2/health/ready")
                if ready.status_code != 200:
                    reasons.append(ready.json().get("reason", ""))
                time.sleep(0.1)
            release.set()
            caller.join(60)
    finally:
        server.stop()
    ms = np.asarray(probes) * 1000.0
    return {
        "probes": len(probes),
        "probe_p50_ms": round(float(np.median(ms)), 2),
        "probe_max_ms": round(float(ms.max()), 2),
        "stalled_status": result.get("status"),
        "stalled_after_s": result.get("after_s"),
        "not_ready_probes": len(reasons),
        "readiness_said_first": reasons[0] if reasons else None,
    }


def slowloris(models: Path, prof: Path, plan: Path, conns: int = 200, hold_s: float = 40.0) -> dict[str, Any]:
    proc, url = ov.start_server(models, prof, plan)
    host, port = ov._host_port(url)
    socks: list[socket.socket] = []
    closed_at: dict[int, float] = {}
    try:
        t0 = time.monotonic()
        for _ in range(conns):
            s = socket.create_connection((host, port), timeout=5)
            s.sendall(b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\n")
            s.setblocking(False)
            socks.append(s)
        lat = []
        while time.monotonic() - t0 < hold_s and len(closed_at) < conns:
            for i, s in enumerate(socks):
                if i in closed_at:
                    continue
                try:
                    if s.recv(4096) == b"":
                        closed_at[i] = time.monotonic() - t0
                        continue
                    closed_at[i] = time.monotonic() - t0  # an answer (408/400): the server ended it
                except BlockingIOError:
                    try:
                        s.send(b"X")
                    except OSError:
                        closed_at[i] = time.monotonic() - t0
                except OSError:
                    closed_at[i] = time.monotonic() - t0
            t1 = time.monotonic()
            ok = httpx.post(f"{url}/v2/models/digits/infer", json=_pixels(1), timeout=30).status_code == 200
            lat.append((time.monotonic() - t1) * 1000.0 if ok else float("inf"))
            time.sleep(2.0)
    finally:
        for s in socks:
            s.close()
        ov.stop_server(proc)
    times = sorted(closed_at.values())
    return {
        "connections": conns,
        "closed_by_server": len(times),
        "closed_median_s": round(statistics.median(times), 1) if times else None,
        "closed_last_s": round(times[-1], 1) if times else None,
        "ordinary_request_max_ms": round(max(lat), 1) if lat else None,
    }


def kill_and_restart(models: Path, prof: Path, plan: Path) -> dict[str, Any]:
    proc, url = ov.start_server(models, prof, plan)
    port = ov._host_port(url)[1]

    async def load() -> None:
        async with httpx.AsyncClient(timeout=5) as c:
            for _ in range(200):
                try:
                    await c.post(f"{url}/v2/models/digits/infer", json=_pixels(1))
                except httpx.HTTPError:
                    return

    loader = threading.Thread(target=lambda: asyncio.run(load()))
    loader.start()
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    loader.join(30)
    t0 = time.monotonic()
    again, url2 = ov.start_server(models, prof, plan, port=port)
    ready_s = time.monotonic() - t0
    try:
        first = httpx.post(f"{url2}/v2/models/digits/infer", json=_pixels(1), timeout=30).status_code
    finally:
        ov.stop_server(again)
    return {"same_port": url2.endswith(f":{port}"), "ready_after_s": round(ready_s, 1), "first_status": first}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--overload-s", type=float, default=20.0)
    ap.add_argument("--skip", default="", help="comma-separated phases to skip: overload, stall, slowloris, kill")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    out: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as d:
        models, prof, plan, _ = ov.setup(Path(d))
        phases = {
            "overload": lambda: overload_then_recovery(models, prof, plan, args.overload_s),
            "stall": stalled_model,
            "slowloris": lambda: slowloris(models, prof, plan),
            "kill": lambda: kill_and_restart(models, prof, plan),
        }
        for name, phase in phases.items():
            if name in skip:
                continue
            try:
                out[name] = phase()
            except Exception as e:  # one phase's failure is a figure too; the others still run
                out[name] = {"error": f"{type(e).__name__}: {e}"}
            print(json.dumps({name: out[name]}), file=sys.stderr, flush=True)
    out["load_after"] = os.getloadavg()[0]
    print(json.dumps(out, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
