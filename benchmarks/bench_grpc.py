"""The protocols side by side: one-row infer over HTTP JSON, HTTP binary tensors and gRPC, on the same server.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_grpc.py [--duration 5] [--runs 3] [--json]
        [--profile tests/data/profiles/tweets-sklearn] [--model nb-words] [--clients 1,16]

One server runs in a subprocess on 127.0.0.1: ``cascadeserve serve --emulate --no-measure-overhead`` on a one-model
``plan fixed`` plan of the committed profile (as ``bench_front_door.py`` does), with ``--grpc-port``, so HTTP and
gRPC go to the same runtime. This process is the client (a separate process from the server), with asyncio
clients on one event loop (uvloop when installed): ``tritonclient.http.aio`` sending JSON (``binary_data=False``,
JSON outputs), ``tritonclient.http.aio`` sending binary tensors (``binary_data=True``, binary outputs: tritonclient's
defaults) and ``tritonclient.grpc.aio`` (raw contents). At ``--clients`` levels (default 1 and 16), that many
coroutines each send one-row requests (a ``sample_id`` of the profile, cycled) back to back, each on its own client
(its own connection or channel), for ``--duration`` seconds after a short warm-up; every request must answer 200.

Per run every (protocol, clients) pair is measured once, in an order rotated from run to run so that no protocol
always goes first; the figures are requests per second, p50 and p99 latency (client side, ``perf_counter`` around
each call) and the server process's CPU µs per request (user + system, every thread, through psutil). The report
gives the median over runs of each, and for each client count each protocol's added p50 against the fastest p50
there (median of the per-run differences). Clients and server share the machine's cores: at 16 clients the client
side's own cost is in the latency too, for every protocol alike.
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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import tritonclient.grpc.aio as grpc_aio
import tritonclient.http.aio as http_aio

ROOT = Path(__file__).resolve().parent.parent
PROTOCOLS = ("http-json", "http-binary", "grpc")
MODEL = "m"
WARMUP_S = 0.5

Infer = Callable[[int], Awaitable[None]]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _sample_ids(profile: Path) -> list[int]:
    lines = (profile / "labels.csv").read_text().splitlines()[1:]
    return [int(line.split(",")[0]) for line in lines[:500]]


async def _client(protocol: str, http_port: int, grpc_port: int) -> tuple[Infer, Callable[[], Awaitable[None]]]:
    """One client of ``protocol``: a coroutine that infers one sample id, and the one that closes the client."""
    if protocol == "grpc":
        g = grpc_aio.InferenceServerClient(f"127.0.0.1:{grpc_port}")

        async def grpc_infer(sid: int) -> None:
            inp = grpc_aio.InferInput("sample_id", [1], "INT64")
            inp.set_data_from_numpy(np.array([sid], dtype=np.int64))
            result = await g.infer(MODEL, [inp])
            assert result.as_numpy("label") is not None

        return grpc_infer, g.close
    h = http_aio.InferenceServerClient(f"127.0.0.1:{http_port}")
    binary = protocol == "http-binary"
    # JSON all the way for http-json: naming every output with binary_data=False asks for them in JSON
    names = ("label", "certainty", "model")
    outputs = None if binary else [http_aio.InferRequestedOutput(n, binary_data=False) for n in names]

    async def http_infer(sid: int) -> None:
        inp = http_aio.InferInput("sample_id", [1], "INT64")
        inp.set_data_from_numpy(np.array([sid], dtype=np.int64), binary_data=binary)
        result = await h.infer(MODEL, [inp], outputs=outputs)
        assert result.as_numpy("label") is not None

    return http_infer, h.close


def _cpu_s(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


async def _measure(
    protocol: str, clients: int, ports: tuple[int, int], pid: int, ids: list[int], duration_s: float
) -> dict[str, float]:
    """``clients`` coroutines in a closed loop for ``duration_s`` (after a warm-up that is not counted)."""
    pairs = [await _client(protocol, *ports) for _ in range(clients)]
    latencies: list[float] = []
    phase = {"counting": False, "stop": False}

    async def loop(k: int, infer: Infer) -> None:
        i = k
        while not phase["stop"]:
            t0 = time.perf_counter()
            await infer(ids[i % len(ids)])
            if phase["counting"]:
                latencies.append(time.perf_counter() - t0)
            i += clients

    try:
        tasks = [asyncio.create_task(loop(k, infer)) for k, (infer, _) in enumerate(pairs)]
        await asyncio.sleep(WARMUP_S)
        c0, t0 = _cpu_s(pid), time.perf_counter()
        phase["counting"] = True
        await asyncio.sleep(duration_s)
        phase["counting"] = False
        elapsed, cpu = time.perf_counter() - t0, _cpu_s(pid) - c0
        phase["stop"] = True
        await asyncio.gather(*tasks)
    finally:
        for _, close in pairs:
            await close()
    ms = np.asarray(latencies) * 1000.0
    return {
        "rps": len(ms) / elapsed,
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "server_cpu_us": cpu / max(len(ms), 1) * 1e6,
        "requests": float(len(ms)),
    }


def _wait_ready(http_port: int, grpc_port: int, proc: subprocess.Popen[bytes], timeout_s: float = 120.0) -> None:
    import tritonclient.grpc as tg
    import tritonclient.http as th

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            if (
                th.InferenceServerClient(f"127.0.0.1:{http_port}").is_server_ready()
                and tg.InferenceServerClient(f"127.0.0.1:{grpc_port}").is_server_ready()
            ):
                return
        except Exception:  # not listening yet: connection refused, in either client's own exception type
            pass
        time.sleep(0.2)
    raise RuntimeError("the server did not come up")


def _summary(runs: list[dict[str, dict[str, float]]], levels: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c in levels:
        keys = [f"{p}@{c}" for p in PROTOCOLS]
        fastest = [min(run[k]["p50_ms"] for k in keys) for run in runs]
        for k in keys:
            out[k] = {
                m: statistics.median(run[k][m] for run in runs) for m in ("rps", "p50_ms", "p99_ms", "server_cpu_us")
            }
            added = [run[k]["p50_ms"] - f for run, f in zip(runs, fastest, strict=True)]
            out[k]["added_p50_ms"] = statistics.median(added)
    return out


async def _bench(args: argparse.Namespace, ports: tuple[int, int], pid: int, ids: list[int]) -> dict[str, Any]:
    levels = [int(c) for c in args.clients.split(",")]
    pairs = [(p, c) for c in levels for p in PROTOCOLS]
    runs: list[dict[str, dict[str, float]]] = []
    for i in range(args.runs):
        shift = i % len(pairs)
        run: dict[str, dict[str, float]] = {}
        for protocol, clients in pairs[shift:] + pairs[:shift]:  # rotated: no pair always first, or always warm
            r = await _measure(protocol, clients, ports, pid, ids, args.duration)
            run[f"{protocol}@{clients}"] = r
            if not args.json:
                print(
                    f"run {i + 1} {protocol:>11} × {clients:>2}: {r['rps']:7.0f} req/s, p50 {r['p50_ms']:6.2f} ms, "
                    f"p99 {r['p99_ms']:6.2f} ms, server CPU {r['server_cpu_us']:5.0f} µs/req",
                    flush=True,
                )
        load1 = os.getloadavg()[0]  # a busy machine shows here: such a run's figures are suspect
        runs.append(run)
        if not args.json:
            print(f"run {i + 1}: load average {load1:.2f}", flush=True)
    return {"duration_s": args.duration, "clients": levels, "runs": runs, "median": _summary(runs, levels)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=5.0, help="seconds measured per protocol and client count")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--clients", default="1,16", help="concurrent clients, comma-separated")
    ap.add_argument("--profile", type=Path, default=ROOT / "tests/data/profiles/tweets-sklearn")
    ap.add_argument("--model", default="nb-words")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    ids = _sample_ids(args.profile)
    cli = "import sys; from cascadeserve.cli import run; sys.argv[0] = 'cascadeserve'; sys.exit(run())"
    with tempfile.TemporaryDirectory() as tmp:
        plan = Path(tmp) / "plan.json"
        subprocess.run(
            [sys.executable, "-c", cli, "plan", "fixed", "--profile", str(args.profile), "--cascade", args.model,
             "--out", str(plan)],
            check=True, env=env, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        ports = (_port(), _port())
        server = subprocess.Popen(
            [sys.executable, "-c", cli, "serve", "--profile", str(args.profile), "--plan", str(plan), "--emulate",
             "--no-measure-overhead", "--port", str(ports[0]), "--grpc-port", str(ports[1]), "--name", MODEL],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            _wait_ready(*ports, server)
            try:
                import uvloop

                runner: Callable[..., Any] = uvloop.run
            except ImportError:
                runner = asyncio.run
            summary = runner(_bench(args, ports, server.pid, ids))
        finally:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    for key, m in summary["median"].items():
        print(
            f"median {key:>14}: {m['rps']:7.0f} req/s, p50 {m['p50_ms']:6.2f} ms (+{m['added_p50_ms']:.2f} against "
            f"the fastest), p99 {m['p99_ms']:6.2f} ms, server CPU {m['server_cpu_us']:5.0f} µs/req"
        )


if __name__ == "__main__":
    main()
