"""Simulator fidelity (paper Fig. 13): each plan in the simulator and on the real runtime, over real HTTP.

For every plan the same arrivals go to :func:`~cascadeserve.simulate.simulate` and, through the open-loop load
generator, to a ``cascadeserve serve --emulate`` subprocess (so that the server and the client do not share a
GIL). The report gives the p95 and accuracy of both and their errors. ``server_p95_ms`` (queue + compute time as
the runtime reports it) separates the runtime's own fidelity from the HTTP round trip in the client's p95.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from cascadeserve.http.loadgen import run_load
from cascadeserve.plan import load_plan
from cascadeserve.profile import load_profile
from cascadeserve.simulate import simulate

__all__ = ["FidelityRow", "fidelity"]


@dataclass(frozen=True)
class FidelityRow:
    plan: str
    requests: int
    sim_p95_ms: float
    run_p95_ms: float
    run_server_p95_ms: float
    p95_error: float  # (run - sim) / sim, client-side p95 over HTTP
    server_p95_error: float  # same, with the runtime's own queue + compute times
    sim_accuracy: float
    run_accuracy: float
    accuracy_error_points: float
    shed: int
    errors: int
    send_lag_p99_ms: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(profile: Path, plan: Path, port: int) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-c",
        "from cascadeserve.cli import main; main()",
        "serve",
        "--plan",
        str(plan),
        "--profile",
        str(profile),
        "--emulate",
        "--name",
        "fidelity",
        "--port",
        str(port),
        "--grace-s",
        "1",
    ]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=os.environ.copy())


def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise RuntimeError(f"the server exited: {err.strip()}")
        try:
            if httpx.get(f"{url}/v2/health/ready", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the server did not become ready")


def fidelity(profile_dir: Path, plans: Sequence[Path], arrivals: np.ndarray) -> list[FidelityRow]:
    prof = load_profile(profile_dir)
    rows = []
    for plan_path in plans:
        plan = load_plan(plan_path, prof)
        sim = simulate(prof, plan, arrivals)
        port = _free_port()
        proc = _serve(profile_dir, plan_path, port)
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_ready(url, proc)
            rep = asyncio.run(run_load(url, "fidelity", arrivals, sample_ids=prof.sample_ids, labels=prof.labels))
        finally:
            proc.terminate()
            proc.wait(10)
        sim_p95 = sim.percentile_ms(95)
        acc = rep.accuracy if rep.accuracy is not None else 0.0
        rows.append(
            FidelityRow(
                plan=plan_path.name,
                requests=len(arrivals),
                sim_p95_ms=sim_p95,
                run_p95_ms=rep.p95_ms,
                run_server_p95_ms=rep.server_p95_ms,
                p95_error=(rep.p95_ms - sim_p95) / sim_p95 if sim_p95 > 0 else 0.0,
                server_p95_error=(rep.server_p95_ms - sim_p95) / sim_p95 if sim_p95 > 0 else 0.0,
                sim_accuracy=sim.accuracy,
                run_accuracy=acc,
                accuracy_error_points=(acc - sim.accuracy) * 100.0,
                shed=rep.shed,
                errors=rep.errors,
                send_lag_p99_ms=rep.send_lag_p99_ms,
            )
        )
    return rows
