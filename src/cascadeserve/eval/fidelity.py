"""Simulator fidelity (paper Fig. 13): each plan in the simulator and on the real runtime, over real HTTP.

For every plan the same arrivals go to :func:`~cascadeserve.simulate.simulate` and, through the open-loop load
generator, to a ``cascadeserve serve --emulate`` subprocess (so that the server and the client do not share a
GIL). The report gives the p95 and accuracy of both and their errors. ``server_p95_ms`` (queue + compute time as
the runtime reports it) separates the runtime's own fidelity from the HTTP round trip in the client's p95.

**Calibration.** A real deployment pays costs the profile does not contain: per batch (event-loop and thread
wake-ups around the model call, ~0.5-1 ms on a 2-core box) and per request (the HTTP round trip). They dominate
plans whose p95 is a few milliseconds, and they are not constants: on a small box their tail, which is what a p95
sees, is several times their median. With ``calibrate=True`` one separate, fixed calibration run measures their
distributions before any plan is evaluated: the cheapest model alone on one device, with Poisson arrivals of its
own at the trace's mean rate (the event loop's other work, HTTP parsing above all, grows with the rate, and so does
the tail of the overheads), capped so that the device stays at most 20% busy (no queueing to speak of), for at
least 10 s and 1,500 requests (the tail of a smaller sample is mostly noise). Per
answered request, the batch overhead is its server-side latency minus the model's batch-1 runtime, the request
overhead its client latency minus its server latency. Every plan is then also simulated with ``batch_overhead_ms``
set to the batch overhead's median (which moves the queueing), and each simulated request gets, for every stage it
passed, a draw of the batch overhead's deviation from that median, and on the client side a draw of the request
overhead (seeded draws, with replacement). The ``calibrated_*`` columns report the errors against the p95 of that.
Nothing is fitted per plan.
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

from cascadeserve.cascade import Cascade
from cascadeserve.eval.loadgen import LoadReport, run_load
from cascadeserve.plan import Device, fixed_plan, load_plan, plan_profile
from cascadeserve.profile import Profile, load_profile
from cascadeserve.simulate import SimResult, simulate
from cascadeserve.traces import poisson

__all__ = ["CALIBRATION_REQUESTS", "FidelityRow", "Overheads", "calibrate", "fidelity", "mean_qps", "wait_ready"]

CALIBRATION_QPS = 20.0
CALIBRATION_S = 10.0  # at least this long ...
CALIBRATION_REQUESTS = 1500  # ... and this many requests: the overheads' tail is what a p95 sees
CALIBRATION_SEED = 12_345


@dataclass(frozen=True)
class Overheads:
    """Costs of a deployment beyond the profiled runtimes (see the module docstring): samples, in ms."""

    batch_samples_ms: np.ndarray
    request_samples_ms: np.ndarray

    def __post_init__(self) -> None:
        if len(self.batch_samples_ms) == 0 or len(self.request_samples_ms) == 0:
            raise ValueError("the calibration run answered no request: no overhead to measure")

    @property
    def batch_ms(self) -> float:
        return float(np.median(self.batch_samples_ms))

    @property
    def request_ms(self) -> float:
        return float(np.median(self.request_samples_ms))

    def to_dict(self) -> dict[str, float]:
        b, r = self.batch_samples_ms, self.request_samples_ms
        return {
            "batch_ms": self.batch_ms,
            "batch_p95_ms": float(np.percentile(b, 95)),
            "request_ms": self.request_ms,
            "request_p95_ms": float(np.percentile(r, 95)),
            "samples": len(b),
        }

    def predict_p95_ms(self, sim: SimResult, seed: int = CALIBRATION_SEED) -> tuple[float, float]:
        """(server-side, client-side) p95 of ``sim`` (simulated with ``batch_overhead_ms = batch_ms``) once each
        request carries its overhead draws: one batch deviation per stage it passed, one request overhead."""
        rng = np.random.default_rng(seed)
        lat = sim.latency_s * 1000.0
        stages = sim.answer_stage.astype(np.int64) + 1
        dev = self.batch_samples_ms - self.batch_ms
        jitter = np.zeros(len(lat))
        for k in range(1, int(stages.max(initial=0)) + 1):
            passed = stages >= k
            jitter[passed] += rng.choice(dev, size=int(passed.sum()))
        server = lat + jitter
        client = server + rng.choice(self.request_samples_ms, size=len(lat))
        return float(np.percentile(server, 95)), float(np.percentile(client, 95))


@dataclass(frozen=True)
class FidelityRow:
    plan: str
    requests: int
    sim_p95_ms: float
    run_p95_ms: float
    run_server_p95_ms: float
    p95_error: float  # (run - sim) / sim, client-side p95 over HTTP
    server_p95_error: float  # same, with the runtime's own queue + compute times
    calibrated_sim_p95_ms: float | None  # server-side, simulated with the measured overheads (None: not calibrated)
    calibrated_p95_error: float | None  # client p95 vs the calibrated client-side prediction
    calibrated_server_p95_error: float | None
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


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    """Wait until the server ``proc`` started at ``url`` answers its readiness probe; raise when it exits first
    (with its stderr, when piped) or ``timeout_s`` passes."""
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


def _run(profile_dir: Path, plan_path: Path, prof: Profile, arrivals: np.ndarray) -> LoadReport:
    port = _free_port()
    proc = _serve(profile_dir, plan_path, port)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, proc)
        return asyncio.run(run_load(url, "fidelity", arrivals, sample_ids=prof.sample_ids, labels=prof.labels))
    finally:
        proc.terminate()
        proc.wait(10)


def calibrate(
    profile_dir: Path,
    prof: Profile,
    workdir: Path,
    qps: float = CALIBRATION_QPS,
    *,
    min_requests: int = CALIBRATION_REQUESTS,
    min_s: float = CALIBRATION_S,
) -> Overheads:
    """Measure the deployment's per-batch and per-request costs (the module docstring's calibration run) at
    ``qps`` Poisson arrivals of its own (the fidelity command passes the trace's mean rate), for at least ``min_s``
    seconds and ``min_requests`` requests."""
    cheapest = prof.by_cost(1)[0]
    plan = fixed_plan(
        prof, Cascade((cheapest,), ()), [Device(name="calibration", memory_mb=prof.model(cheapest).memory_mb + 1.0)]
    )
    path = plan.save(workdir / "calibration-plan.json")
    runtime_ms = float(prof.model(cheapest).runtime.ms_at(1))
    qps = min(qps, 0.2 * 1000.0 / max(runtime_ms, 1e-3))
    duration = max(min_s, min_requests / qps)
    rep = _run(profile_dir, path, prof, poisson(qps, duration, seed=CALIBRATION_SEED).arrivals)
    return Overheads(
        batch_samples_ms=np.maximum(0.0, rep.server_ms - runtime_ms),
        request_samples_ms=np.maximum(0.0, rep.latency_ms - rep.server_ms),
    )


def mean_qps(arrivals: np.ndarray) -> float:
    """Requests per second over the span of ``arrivals`` (the calibration run's rate)."""
    span = float(arrivals[-1] - arrivals[0]) if len(arrivals) > 1 else 0.0
    return len(arrivals) / span if span > 0 else CALIBRATION_QPS


def _error(run: float, sim: float) -> float:
    return (run - sim) / sim if sim > 0 else 0.0


def fidelity(
    profile_dir: Path, plans: Sequence[Path], arrivals: np.ndarray, *, overheads: Overheads | None = None
) -> list[FidelityRow]:
    """One row per plan; pass ``overheads`` (from :func:`calibrate`) to fill the ``calibrated_*`` columns."""
    prof = load_profile(profile_dir)
    rows = []
    for plan_path in plans:
        plan = load_plan(plan_path, prof)
        sim = simulate(plan_profile(prof, plan), plan, arrivals)
        rep = _run(profile_dir, plan_path, prof, arrivals)
        sim_p95 = sim.percentile_ms(95)
        cal: float | None = None
        cal_client: float | None = None
        if overheads is not None:
            cal_sim = simulate(prof, plan.model_copy(update={"batch_overhead_ms": overheads.batch_ms}), arrivals)
            cal, cal_client = overheads.predict_p95_ms(cal_sim)
        acc = rep.accuracy if rep.accuracy is not None else 0.0
        rows.append(
            FidelityRow(
                plan=plan_path.name,
                requests=len(arrivals),
                sim_p95_ms=sim_p95,
                run_p95_ms=rep.p95_ms,
                run_server_p95_ms=rep.server_p95_ms,
                p95_error=_error(rep.p95_ms, sim_p95),
                server_p95_error=_error(rep.server_p95_ms, sim_p95),
                calibrated_sim_p95_ms=cal,
                calibrated_p95_error=None if cal_client is None else _error(rep.p95_ms, cal_client),
                calibrated_server_p95_error=None if cal is None else _error(rep.server_p95_ms, cal),
                sim_accuracy=sim.accuracy,
                run_accuracy=acc,
                accuracy_error_points=(acc - sim.accuracy) * 100.0,
                shed=rep.shed,
                errors=rep.errors,
                send_lag_p99_ms=rep.send_lag_p99_ms,
            )
        )
    return rows
