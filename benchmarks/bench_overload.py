"""Overload: real digits models served at twice the plan's capacity, open loop; is overload bounded by time?

    .venv/bin/python benchmarks/bench_overload.py [--factor 2] [--duration 60] [--runs 3] [--json]

Set-up (as ``cascadeserve demo`` does it): the digits family (five PyTorch models, trained once and cached), the
committed profile ``profiles/digits`` with runtimes x3 for the shared cores, and a plan from the planner for p95 ≤
150 ms on two devices. ``cascadeserve serve --models`` runs it in a subprocess with its defaults (admission by time:
shed past 2 SLOs of backlog at the plan's capacity; a deadline of 10 SLOs). The client runs in its own process
(this script with ``--raw-client``): ``rawload.open_loop`` sends real validation images, Poisson, at ``factor`` x a
capacity for ``duration`` seconds: the plan's highest gear's QPS (``--capacity plan``), or by default what the
deployment sustains on this machine, measured per run by a 10 s closed-loop calibration (``rawload``, 16
connections) against the same server (``--capacity measured``): on a shared 2-core machine the plan's promise
(runtimes x3) can be far above what the HTTP layer and the models get. Checks, per run:

* every accepted request is answered exactly once: the server's ``admitted_total`` equals its ``answered_total``,
  and equals what the client saw answered (200, or a 5xx other than 503);
* the accepted requests' p99 (client-side, HTTP included) is at most 3x the SLO;
* every other request got 503 with ``Retry-After`` (none timed out on the client, none refused).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SLO_MS = 150.0


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def setup(workdir: Path) -> tuple[Path, Path, Path, float]:
    """Models config, profile dir, plan file and the plan's capacity (its highest gear's QPS)."""
    from cascadeserve.models.families import digits
    from cascadeserve.plan import SLO, Device
    from cascadeserve.planner import Planner
    from cascadeserve.profile import calibrate, load_profile, save_profile

    digits.train_family(seed=0)
    models_yaml = digits.write_config(workdir / "models.yaml", seed=0, threads=1)
    base = load_profile(ROOT / "profiles" / "digits")
    profile = calibrate(base, dict.fromkeys(base.model_names, 3.0), source="runtimes x3 for a shared machine")
    prof_dir = save_profile(profile, workdir / "profile")
    devices = tuple(Device(name=f"dev{i}", memory_mb=256.0) for i in range(2))
    planner = Planner(n_ranges=6, max_batch=64, sim_requests=1500, seed=0)
    top = profile.model_names[int(np.argmax(profile.accuracies))]
    top_capacity = 2 * 32 / (float(profile.model(top).runtime.ms_at(32)) / 1000.0)
    peak = float(np.clip(1.5 * top_capacity, 150.0, 450.0))
    planner.fit(profile, devices, SLO(kind="p95_ms", value=SLO_MS), peak * 1.1)
    plan = planner.plan_
    assert plan is not None
    plan_path = plan.save(workdir / "plan.json")
    return models_yaml, prof_dir, plan_path, plan.max_qps


def metric(text: str, name: str, label: str = "") -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name)] in " {" and label in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def start_server(
    models: Path, prof: Path, plan: Path, *extra: str, port: int | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    port = port or _port()
    cmd = [sys.executable, "-c", "from cascadeserve.cli import main; main()", "serve", "--plan", str(plan)]
    cmd += ["--profile", str(prof), "--models", str(models), "--name", "digits", "--port", str(port), *extra]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    while time.monotonic() - t0 < 180:
        try:
            if httpx.get(f"{url}/v2/health/ready", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the server did not become ready")


def stop_server(proc: subprocess.Popen[bytes], wait_s: float = 30.0) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()


def client(url: str, qps: float, duration: float, out: Path, seed: int) -> None:
    """The client process: open-loop Poisson arrivals at ``qps`` with digits validation images."""
    from cascadeserve.eval.loadgen import run_load
    from cascadeserve.models.families import digits

    _, _, xv, _, _ = digits.split(0)
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / qps, int(qps * duration * 1.2)))
    arrivals = arrivals[arrivals < duration]
    rep = asyncio.run(
        run_load(url, "digits", arrivals, rows=np.asarray(xv, dtype=np.float32), connections=1024, request_timeout_s=60)
    )
    t_ok = arrivals[rep.ok_index]
    summary = rep.to_dict()
    summary["t_shed"] = arrivals[rep.shed_index].tolist()
    summary["latency_ms"] = rep.latency_ms.tolist()
    summary["server_ms"] = rep.server_ms.tolist()
    summary["t_ok"] = t_ok.tolist()
    out.write_text(json.dumps(summary))


def _digits_bodies() -> list[bytes]:
    """One V2 request body per digits validation image (FP32 ``pixels``, shape [1, 64])."""
    from cascadeserve.models.families import digits

    _, _, xv, _, _ = digits.split(0)
    rows = np.asarray(xv, dtype=np.float32)
    head = b'{"inputs":[{"name":"pixels","datatype":"FP32","shape":[1,64],"data":'
    return [head + json.dumps(r.tolist()).encode() + b"}]}" for r in rows]


def _host_port(url: str) -> tuple[str, int]:
    host, port = url.rsplit("//", 1)[1].rsplit(":", 1)
    return host, int(port)


def calibrate(url: str, out: Path, seconds: float = 10.0, connections: int = 16) -> None:
    """The client process, calibration mode: ``connections`` closed loops for ``seconds`` (``rawload``); the answer
    rate is what this deployment sustains on this machine (the cascade saturated, the HTTP layer not swamped)."""
    from rawload import closed_loop

    host, port = _host_port(url)
    res = closed_loop(
        host, port, "/v2/models/digits/infer", _digits_bodies(), connections=connections, duration_s=seconds
    )
    out.write_text(json.dumps({"qps": res.summary()["ok_per_s"]}))


def raw_client(url: str, qps: float, duration: float, out: Path, seed: int) -> None:
    """The client process for overload: open-loop Poisson arrivals at ``qps`` through ``rawload`` (a request costs it
    a few µs, so it offers twice this machine's capacity; latency from each request's scheduled time)."""
    from rawload import open_loop

    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / qps, int(qps * duration * 1.2)))
    arrivals = arrivals[arrivals < duration]
    host, port = _host_port(url)
    res = open_loop(host, port, "/v2/models/digits/infer", _digits_bodies(), arrivals, max_connections=1024)
    s = res.summary()
    ok = res.status == 200
    srv = res.server_ms[ok]
    summary = {
        "sent": s["sent"],
        "ok": int(ok.sum()),
        "shed": s["refused_503"],
        "shed_with_retry_after": s["refused_with_retry_after"],
        "status_counts": {str(k): v for k, v in s["status_counts"].items() if k > 0},
        "timed_out": int((res.status == -2).sum()),
        "refused": int((res.status == -1).sum()),
        "connection_errors": s["connection_errors"],
        "closed_idle_by_server": s["closed_idle_by_server"],
        "connections": s["connections"],
        "latency_ms": (res.latency_s[ok] * 1000.0).tolist(),
        "server_ms": srv[np.isfinite(srv)].tolist(),
        "t_ok": res.sched_s[ok].tolist(),
        "throughput_qps": s["ok_per_s"],
        "refused_p99_ms": s["refused_p99_ms"],
    }
    out.write_text(json.dumps(summary))


def measured_capacity(url: str) -> float:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "cal.json"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
        subprocess.run([sys.executable, __file__, "--calibrate", url, "--out", str(out)], check=True, env=env)
        return float(json.loads(out.read_text())["qps"])


def run_client(url: str, qps: float, duration: float, seed: int, raw: bool = False) -> dict[str, Any]:
    """The client in its own process: ``rawload`` (``raw``) or the project's aiohttp load generator (the soak's:
    a pooling client, as users run)."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "client.json"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
        subprocess.run(
            [
                sys.executable,
                __file__,
                "--raw-client" if raw else "--client",
                url,
                "--qps",
                str(qps),
                "--duration",
                str(duration),
                "--out",
                str(out),
                "--seed",
                str(seed),
            ],
            check=True,
            env=env,
        )
        return dict(json.loads(out.read_text()))


def one_run(
    models: Path, prof: Path, plan: Path, capacity: float | None, factor: float, duration: float, seed: int
) -> dict[str, Any]:
    proc, url = start_server(models, prof, plan)
    try:
        measured = measured_capacity(url) if capacity is None else capacity
        qps = factor * measured
        before = httpx.get(f"{url}/metrics", timeout=10).text  # the calibration's requests are not this run's
        c = run_client(url, qps, duration, seed, raw=True)
        time.sleep(0.5)
        text = httpx.get(f"{url}/metrics", timeout=10).text
    finally:
        stop_server(proc)
    admitted = metric(text, "cascadeserve_admitted_total") - metric(before, "cascadeserve_admitted_total")
    answered = metric(text, "cascadeserve_answered_total") - metric(before, "cascadeserve_answered_total")
    counts = c["status_counts"]
    client_answered = sum(v for k, v in counts.items() if k.isdigit() and k not in ("503", "413") and int(k) >= 200)
    lat = np.asarray(c["latency_ms"])
    return {
        "capacity_qps": round(measured, 1),
        "offered_qps": round(qps, 1),
        "sent": c["sent"],
        "ok": c["ok"],
        "shed_503": c["shed"],
        "shed_with_retry_after": c["shed_with_retry_after"],
        "other_statuses": {k: v for k, v in counts.items() if k not in ("200", "503")},
        "timed_out": c["timed_out"],
        "refused": c["refused"],
        "server_admitted": int(admitted),
        "server_answered": int(answered),
        "client_answered": client_answered,
        "exactly_once": int(admitted) == int(answered) == client_answered,
        "accepted_p50_ms": round(float(np.percentile(lat, 50)), 1) if len(lat) else None,
        "accepted_p99_ms": round(float(np.percentile(lat, 99)), 1) if len(lat) else None,
        "p99_over_slo": round(float(np.percentile(lat, 99)) / SLO_MS, 2) if len(lat) else None,
        # admission to answer inside the server (queue + compute): what admission by time bounds
        "server_p99_ms": round(float(np.percentile(c["server_ms"], 99)), 1) if c["server_ms"] else None,
        "goodput_qps": c["throughput_qps"],
        "refused_p99_ms": c["refused_p99_ms"],
        "client_connections": c["connections"],
        "connection_errors": c["connection_errors"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--factor", type=float, default=2.0)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--capacity",
        default="measured",
        help="'plan' (the plan's highest gear's QPS), 'measured' (closed-loop calibration per run) or a number",
    )
    ap.add_argument("--client", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--raw-client", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--calibrate", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--qps", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.client:
        client(args.client, args.qps, args.duration, Path(args.out), args.seed)
        return
    if args.raw_client:
        raw_client(args.raw_client, args.qps, args.duration, Path(args.out), args.seed)
        return
    if args.calibrate:
        calibrate(args.calibrate, Path(args.out))
        return
    with tempfile.TemporaryDirectory() as d:
        models, prof, plan, capacity = setup(Path(d))
        base = capacity if args.capacity == "plan" else None if args.capacity == "measured" else float(args.capacity)
        runs = [one_run(models, prof, plan, base, args.factor, args.duration, seed) for seed in range(args.runs)]
    p99s = [r["accepted_p99_ms"] for r in runs if r["accepted_p99_ms"] is not None]
    summary = {
        "plan_capacity_qps": round(capacity, 1),
        "capacity": args.capacity,
        "slo_p95_ms": SLO_MS,
        "factor": args.factor,
        "duration_s": args.duration,
        "runs": runs,
        "median_accepted_p99_ms": round(statistics.median(p99s), 1) if p99s else None,
        "median_ok": statistics.median(r["ok"] for r in runs),
        "median_shed": statistics.median(r["shed_503"] for r in runs),
        "all_exactly_once": all(r["exactly_once"] for r in runs),
        "all_p99_within_3x_slo": all((r["p99_over_slo"] or 0) <= 3.0 for r in runs),
        "all_rest_503_with_retry_after": all(
            r["shed_503"] == r["shed_with_retry_after"]
            and not r["timed_out"]
            and not r["refused"]
            and r["ok"] + r["shed_503"] + sum(r["other_statuses"].values()) == r["sent"]
            for r in runs
        ),
    }
    print(json.dumps(summary, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
