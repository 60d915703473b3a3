"""HTTP benchmarks: cascadeserve's V2 server vs Ray Serve (``@serve.batch``) on a trivial model, same generator.

    .venv/bin/python benchmarks/bench_http.py [--qps 3000] [--duration 5] [--runs 3] [--no-ray] [--json]

Both servers run a trivial one-model "cascade" (a numpy no-op returning two class scores) behind
``POST /v2/models/trivial/infer`` with one ``sample_id`` INT64 row per request; the open-loop load generator
(:func:`cascadeserve.eval.loadgen.run_load`) sends a constant-rate trace to each in turn, in the same run.
cascadeserve runs as ``cascadeserve serve --models`` in a subprocess (batches: minimum queue 1, the device takes
whatever is queued); Ray Serve runs one replica with ``@serve.batch(max_batch_size=64, batch_wait_timeout_s=0.001)``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from cascadeserve.eval.loadgen import run_load
from cascadeserve.plan import Device, Gear, GearPlan, GearReplica, Replica
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve, save_profile

HERE = Path(__file__).resolve().parent


def trivial_model() -> Any:
    """Factory for the models config: ``bench_http:trivial_model``."""

    def f(batch: np.ndarray) -> np.ndarray:
        return np.tile(np.array([0.9, 0.1]), (len(batch), 1))

    return f


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(url: str, timeout_s: float = 120.0) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


def _start_cascadeserve(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    prof = Profile(
        "trivial",
        (ModelProfile("trivial", 1.0, RuntimeCurve((1,), (0.01,))),),
        np.arange(10),
        np.zeros(10, dtype=np.int64),
        np.zeros((1, 10), dtype=np.int64),
        np.ones((1, 10)),
    )
    save_profile(prof, tmp / "profile")
    plan = GearPlan(
        profile="trivial",
        devices=(Device(name="d0", memory_mb=10),),
        replicas=(Replica(model="trivial", device="d0"),),
        gears=(
            Gear(
                qps_low=0,
                qps_high=1e9,
                models=("trivial",),
                replicas=(GearReplica(model="trivial", device="d0", share=1.0),),
            ),
        ),
    )
    plan.save(tmp / "plan.json")
    (tmp / "models.yaml").write_text("models:\n  trivial: bench_http:trivial_model\n")
    port = _port()
    # this checkout's src first: the venv's editable install may point at another checkout (a worktree's bench
    # would otherwise serve that one's code), as bench_front_door and bench_overload do
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), str(HERE)])}
    cmd = [sys.executable, "-c", "from cascadeserve.cli import main; main()", "serve", "--plan", str(tmp / "plan.json")]
    cmd += ["--profile", str(tmp / "profile"), "--models", str(tmp / "models.yaml"), "--port", str(port)]
    cmd += ["--name", "trivial"]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    _wait(f"{url}/v2/health/ready")
    return proc, url


def ray_trivial_app() -> Any:
    """The trivial model as a Ray Serve application (one replica, ``@serve.batch``), answering the V2 shape."""
    from ray import serve
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    @serve.deployment(max_ongoing_requests=1000)
    class Trivial:
        @serve.batch(max_batch_size=64, batch_wait_timeout_s=0.001)
        async def predict(self, ids: list[int]) -> list[tuple[int, float]]:
            scores = np.tile(np.array([0.9, 0.1]), (len(ids), 1))
            labels = scores.argmax(axis=1)
            return [(int(labels[i]), float(scores[i, 0] - scores[i, 1])) for i in range(len(ids))]

        async def __call__(self, request: Request) -> JSONResponse:
            if request.method == "GET":
                return JSONResponse(
                    {"name": "trivial", "inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [-1]}]}
                )
            body = await request.json()
            sid = int(body["inputs"][0]["data"][0])
            label, cert = await self.predict(sid)
            return JSONResponse(
                {
                    "model_name": "trivial",
                    "outputs": [
                        {"name": "label", "datatype": "INT64", "shape": [1], "data": [label]},
                        {"name": "certainty", "datatype": "FP32", "shape": [1], "data": [cert]},
                        {"name": "model", "datatype": "BYTES", "shape": [1], "data": ["trivial"]},
                    ],
                }
            )

    return Trivial.bind()


def _start_ray() -> str:
    import ray
    from ray import serve

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    port = _port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(ray_trivial_app(), route_prefix="/v2/models/trivial")
    url = f"http://127.0.0.1:{port}"
    _wait(f"{url}/v2/models/trivial")
    return url


def _load(url: str, qps: float, duration: float) -> dict[str, Any]:
    n = int(qps * duration)
    arrivals = np.arange(n) / qps
    rep = asyncio.run(run_load(url, "trivial", arrivals, sample_ids=np.arange(10)))
    return rep.to_dict()


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--qps", type=float, default=3000.0)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out: dict[str, Any] = {"offered_qps": args.qps, "duration_s": args.duration}
    with tempfile.TemporaryDirectory() as d:
        proc, url = _start_cascadeserve(Path(d))
        try:
            _load(url, 500, 1.0)  # warm up
            runs = [_load(url, args.qps, args.duration) for _ in range(args.runs)]
        finally:
            proc.terminate()
            proc.wait(20)
    out["cascadeserve"] = {k: _median(runs, k) for k in ("throughput_qps", "p50_ms", "p99_ms", "send_lag_p99_ms")}
    out["cascadeserve"]["ok_fraction"] = _median(runs, "ok") / _median(runs, "sent")
    print(json.dumps(out), file=sys.stderr, flush=True)  # keep our figures even if Ray falls over
    if not args.no_ray:
        url = _start_ray()
        _load(url, 200, 1.0)
        ray_runs = []
        for _ in range(args.runs):
            try:
                ray_runs.append(_load(url, args.qps, args.duration))
            except Exception as e:  # the Ray proxy has died under overload on 2 cores; record it, do not hide it
                out["ray_serve_failure"] = f"{type(e).__name__}: {e}"
                break
        if not ray_runs:
            print(json.dumps(out, indent=2))
            return
        out["ray_serve_runs"] = len(ray_runs)
        out["ray_serve"] = {k: _median(ray_runs, k) for k in ("throughput_qps", "p50_ms", "p99_ms", "send_lag_p99_ms")}
        out["ray_serve"]["ok_fraction"] = _median(ray_runs, "ok") / _median(ray_runs, "sent")
        out["throughput_ratio"] = out["cascadeserve"]["throughput_qps"] / max(out["ray_serve"]["throughput_qps"], 1e-9)
    if not args.no_ray:
        import ray
        from ray import serve

        serve.shutdown()
        ray.shutdown()
    print(json.dumps(out, indent=2) if args.json else out)


if __name__ == "__main__":
    main()
