"""Load drift (issue 17): ``--replan auto`` against ``--replan off``, in the simulator and on the runtime over HTTP.

Workload: the Twitter trace (``../shared/data/traces/twitter_2021``) with a shape change: its first 300 s (a quiet
night hour: mean 46, peak 73 tweets/s) followed by 300 s of hour 7 around that hour's busiest second (mean 270, peak
338), both scaled by one factor so that the peak is ``--max-qps``. Every plan is made by the gear planner with its
default Zipf QPS weights (10 ranges) for ``--profile`` on ``--devices`` devices of ``--device-memory-mb`` each under
``--slo``. Two designs (``benchmarks/RESULTS.md`` has both):

* **Accuracy SLO** (the defaults: ``tests/data/profiles/tweets-sklearn``, one roomy device, accuracy >= 0.572): the
  weights decide which ranges may use cheap cascades. Zipf says high load is rare, so the high ranges get the
  cheapest ones; when the load sits there, the run falls short of the SLO.
* **Latency SLO** (``--profile profiles/tweets-text5 --slo latency:100 --device-memory-mb 120 --max-qps 450``): the
  device holds one of the two MiniLMs, so the planner must drop models, and it drops the one whose removal costs the
  least *time-weighted* accuracy. Zipf weights keep MiniLM-L6 (useful at the frequent low loads) as long as they can,
  dropping the cheap text models first, which leaves the busy ranges a less accurate cascade; weights measured in
  the busy window drop MiniLM-L6 first and keep the accurate cascades there.

Arms, on the same arrivals: ``off, no scaling`` (the plan as made); ``off`` (appendix C.2's online QPS scaling
forced on, ``--qps-scaling on``); ``auto`` (re-planning in the background when the KS distance between the measured
and the planned range weights passes 0.25 over the last 60 s, at most once a minute, with the scaling of
``--qps-scaling auto``: on for an accuracy SLO, off for a latency SLO).

* ``--sim``: :func:`cascadeserve.simulate.replan.simulate_replanning`, a re-plan taking the time the child
  process took here (measured first), ``--runs`` arrival seeds, medians.
* ``--runtime``: ``serve --emulate``'s app in a **child process** (uvicorn on 127.0.0.1; the re-plan in a child of
  that one) and the open-loop load generator over HTTP in this process, so the two do not share one interpreter's
  GIL and CPU; ``--same-process`` runs the server on a thread of this process instead (the setup of the runs before
  2026-11-23 07:00). The accuracy is checked against the labels on the client. Each arm also reports the device
  **overshoot**: how much longer each emulated batch held the device than the profiled runtime it sleeps (the
  runtime's own per-batch cost, which the simulator charges as the plan's ``batch_overhead_ms``).

``--max-busy F`` makes every plan (and auto's re-plans, which inherit it) with device headroom (``plan --max-busy``):
the latency design meets its SLO on the runtime with 0.75 (RESULTS.md, "Device headroom closes load drift's p95").

    .venv/bin/python benchmarks/bench_replan.py [--sim] [--runtime] [--max-qps 150] [--sim-max-qps 150 3000]
        [--profile DIR] [--slo accuracy:A|latency:MS] [--devices N] [--device-memory-mb MB] [--phase-s S]
        [--batch-overhead-ms MS] [--max-busy F] [--same-process]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from cascadeserve.eval.loadgen import run_load
from cascadeserve.http import App, Server, ServerOptions, build_app
from cascadeserve.plan import SLO, Device, GearPlan
from cascadeserve.planner import Planner
from cascadeserve.planner.replan import replan
from cascadeserve.policy.replan import DriftSettings
from cascadeserve.profile import Profile, load_profile
from cascadeserve.runtime import LocalBackend, RuntimeOptions
from cascadeserve.runtime.observer import BatchEvent, NullObserver
from cascadeserve.runtime.replanner import ReplanOptions
from cascadeserve.simulate.replan import simulate_replanning
from cascadeserve.traces import arrivals_from_counts, load_per_second_counts, scale_counts

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "tests" / "data" / "profiles" / "tweets-sklearn"
TRACE = ROOT.parent / "shared" / "data" / "traces" / "twitter_2021" / "tweets_per_second.txt"
PHASE_S = 300


def drift_counts(max_qps: float, phase_s: int = PHASE_S) -> np.ndarray:
    c = load_per_second_counts(TRACE)
    busy = c[7 * 3600 : 8 * 3600]
    peak = int(busy.argmax())
    start = max(0, peak - phase_s // 2)
    return scale_counts(np.concatenate([c[:phase_s], busy[start : start + phase_s]]), max_qps)


@dataclass(frozen=True)
class Setup:
    """What the plan is made for: the profile, the SLO, the devices (``--profile``, ``--slo``, ``--devices``,
    ``--device-memory-mb``)."""

    profile_dir: Path
    slo: SLO
    devices: int
    memory_mb: float
    batch_overhead_ms: float | None = None  # None: the profile's recorded one (the planner's default)
    max_busy: float = 1.0  # the planner's device headroom (plan --max-busy); re-plans inherit it from the plan

    def hardware(self) -> tuple[Device, ...]:
        return tuple(Device(name=f"dev{i}", memory_mb=self.memory_mb) for i in range(self.devices))


def parse_slo(spec: str) -> SLO:
    """``accuracy:0.572`` or ``latency:200`` (p95 in ms)."""
    kind, _, value = spec.partition(":")
    if kind not in ("accuracy", "latency") or not value:
        raise argparse.ArgumentTypeError(f"--slo {spec!r}: use accuracy:A or latency:MS")
    return SLO(kind="accuracy" if kind == "accuracy" else "p95_ms", value=float(value))


def zipf_plan(profile: Profile, max_qps: float, setup: Setup) -> GearPlan:
    p = Planner(n_ranges=10, batch_overhead_ms=setup.batch_overhead_ms, max_busy=setup.max_busy).fit(
        profile, setup.hardware(), setup.slo, max_qps
    )
    assert p.plan_ is not None
    return p.plan_


def settings(mode: str, scaling: bool | None) -> DriftSettings:
    return DriftSettings(
        mode=mode,  # type: ignore[arg-type]
        window_ticks=600,
        min_ticks=300,
        threshold=0.25,
        cooldown_s=60.0,
        check_every=10,
        scaling=scaling,
    )


# auto scales as ``serve --qps-scaling auto`` does: on for an accuracy SLO (so auto = off + re-planning), off for a
# latency SLO (scaling its QPS down would pick gears too slow for the real load); "off" forces appendix C.2 on.
ARMS: tuple[tuple[str, str, bool | None], ...] = (
    ("off, no scaling", "off", False),
    ("off", "off", True),
    ("auto", "auto", None),
)


def child_replan_s(plan: GearPlan, profile_dir: Path) -> float:
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "p.json"
        plan.save(src)
        t0 = time.perf_counter()
        w = ",".join(["0"] * 6 + ["0.3", "0.3", "0.3", "0.1"])
        subprocess.run(
            [
                sys.executable,
                "-m",
                "cascadeserve.planner.replan",
                str(profile_dir),
                str(src),
                w,
                str(Path(d) / "o.json"),
            ],
            check=True,
        )
        return time.perf_counter() - t0


def run_sim(
    profile: Profile, max_qps: float, setup: Setup, runs: int, delay_s: float, phase_s: int
) -> list[dict[str, Any]]:
    plan = zipf_plan(profile, max_qps, setup)
    counts = drift_counts(max_qps, phase_s)
    rows = []
    for name, mode, scaling in ARMS:
        per: list[dict[str, float]] = []
        for seed in range(runs):
            arr = arrivals_from_counts(counts, seed=seed)
            t0 = time.perf_counter()
            run = simulate_replanning(
                profile,
                plan,
                arr,
                settings=settings(mode, scaling),
                replanner=lambda w, p: replan(profile, p, w),
                delay_s=delay_s,
            )
            r = run.result
            late = r.arrivals >= phase_s
            ts = run.tick_scale
            half = min(len(ts), round(phase_s * 1000 / plan.tick_ms))
            per.append(
                {
                    "accuracy": r.accuracy,
                    "p95_ms": r.percentile_ms(95),
                    "accuracy_phase2": float(r.correct[late].mean()),
                    "p95_phase2_ms": float(np.percentile(r.latency_s[late], 95) * 1000),
                    "unanswered": r.unanswered,
                    "swaps": len(run.swap_times),
                    "scale_phase1": float(np.median(ts[:half])),  # the QPS scale the gear lookup used
                    "scale_phase2": float(np.median(ts[half:])),
                    "wall_s": time.perf_counter() - t0,
                }
            )
            swaps = [round(t, 1) for t in run.swap_times]
            events = [
                {
                    "started": round(e.started, 1),
                    "ks": round(e.drift.distance, 3),
                    "verdict": None if e.verdict is None else e.verdict.action,
                    "why": None if e.verdict is None else e.verdict.reason,
                }
                for e in run.events
            ]
        row: dict[str, Any] = {k: statistics.median(p[k] for p in per) for k in per[0]}
        row.update(
            {
                "arm": name,
                "max_qps": max_qps,
                "requests": len(arr),
                "swap_times_seed_last": swaps,
                "replans_seed_last": events,
            }
        )
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


class BatchTimes(NullObserver):
    """Keeps each batch's model row, size and span (start, end) on the server, for the device overshoot: how much
    longer the emulated device held a batch than the profiled runtime it sleeps (the runtime's own per-batch cost:
    timer wake-ups, the precise clock's thread hop, the event loop's other work)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, float, float]] = []

    def batch(self, event: BatchEvent) -> None:
        self.rows.append((event.row, event.size, event.start, event.end))

    def summary(self, profile: Profile, split_s: float) -> dict[str, Any]:
        """Per model: batches, mean size, overshoot median/p95 (ms); and the device's busy fraction per window."""
        if not self.rows:
            return {}
        a = np.asarray(self.rows, dtype=np.float64)
        row, size, t0, t1 = a[:, 0].astype(int), a[:, 1].astype(int), a[:, 2], a[:, 3]
        prof = np.asarray([profile.models[r].runtime.seconds(int(n)) for r, n in zip(row, size, strict=True)])
        over = (t1 - t0 - prof) * 1000.0
        start = float(t0.min())
        late = t0 - start >= split_s
        out: dict[str, Any] = {"batches": len(a), "overshoot_mean_ms": round(float(over.mean()), 3)}
        for r in np.unique(row):
            m = row == r
            out[profile.models[int(r)].name] = {
                "batches": int(m.sum()),
                "mean_size": round(float(size[m].mean()), 2),
                "overshoot_mean_ms": round(float(over[m].mean()), 3),
                "overshoot_p50_ms": round(float(np.median(over[m])), 3),
                "overshoot_p95_ms": round(float(np.percentile(over[m], 95)), 3),
            }
        for name, m in (("quiet", ~late), ("busy", late)):
            if m.any():
                span = float(t1[m].max() - t0[m].min())
                out[f"busy_fraction_{name}"] = round(float((t1[m] - t0[m]).sum()) / max(span, 1e-9), 3)
                out[f"overshoot_share_{name}"] = round(float(over[m].sum() / 1000.0) / max(span, 1e-9), 3)
                out[f"overshoot_mean_ms_{name}"] = round(float(over[m].mean()), 3)
        return out


def _build(profile: Profile, plan: GearPlan, setup: Setup, mode: str, scaling: bool | None) -> tuple[App, BatchTimes]:
    times = BatchTimes()
    app = build_app(
        profile,
        plan,
        emulate=True,
        name="tweets",
        runtime_options=RuntimeOptions(max_in_flight=4096),
        server_options=ServerOptions(stop_grace_s=5.0),
        backend=LocalBackend(),
        replan=ReplanOptions(settings(mode, scaling), setup.profile_dir, timeout_s=120.0),
        observer=times,
    )
    return app, times


def _server_report(app: App, times: BatchTimes, profile: Profile, phase_s: int) -> dict[str, Any]:
    rp = app.replanner
    stats = rp.stats if rp is not None else None
    return {
        "generation": app.runtime.current.number,
        "replans": None if stats is None else {"started": stats.started, "swapped": stats.swapped},
        "history": [] if stats is None else stats.history,
        "batches": times.summary(profile, float(phase_s)),
    }


def _serve_child(conn: Connection, setup: Setup, plan_json: str, mode: str, scaling: bool | None, phase_s: int) -> None:
    """The server's process (``--server-process``, the default): build the arm's app, serve it on 127.0.0.1, send the
    URL, wait for the word to stop, send back what only the server knows (re-plans, generation, batch times)."""
    profile = load_profile(setup.profile_dir)
    app, times = _build(profile, GearPlan.from_json(plan_json), setup, mode, scaling)
    server = Server(app, "127.0.0.1", 0, grace_s=5.0).start()
    conn.send(server.url)
    conn.recv()
    report = _server_report(app, times, profile, phase_s)
    server.stop()
    conn.send(report)


def run_runtime(
    profile: Profile, max_qps: float, setup: Setup, phase_s: int, *, server_process: bool = True
) -> list[dict[str, Any]]:
    """The three arms over HTTP: the server in a child process (its own interpreter, so its event loop does not
    share a GIL with the load generator), or, with ``server_process=False``, on a thread of this process (the
    setup of the earlier runs)."""
    plan = zipf_plan(profile, max_qps, setup)
    arr = arrivals_from_counts(drift_counts(max_qps, phase_s), seed=0)
    ids = profile.sample_ids
    labels = profile.labels
    rows = []
    ctx = multiprocessing.get_context("spawn")
    for name, mode, scaling in ARMS:
        t0 = time.perf_counter()
        if server_process:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_serve_child, args=(child, setup, plan.to_json(), mode, scaling, phase_s))
            proc.start()
            url = parent.recv()
            try:
                rep = asyncio.run(run_load(url, "tweets", arr, sample_ids=ids, labels=labels))
            finally:
                parent.send("stop")
                server = parent.recv()
                proc.join(30)
        else:
            app, times = _build(profile, plan, setup, mode, scaling)
            srv = Server(app, "127.0.0.1", 0, grace_s=5.0).start()
            try:
                rep = asyncio.run(run_load(srv.url, "tweets", arr, sample_ids=ids, labels=labels))
                server = _server_report(app, times, profile, phase_s)
            finally:
                srv.stop()
        wall = time.perf_counter() - t0
        late = arr[rep.ok_index] >= phase_s  # answered requests of the second window
        row = {
            "arm": name,
            "max_qps": max_qps,
            "server_process": server_process,
            "sent": rep.sent,
            "ok": rep.ok,
            "dropped": rep.sent - rep.ok,
            "accuracy": rep.accuracy,
            "p95_ms": rep.p95_ms,
            "p95_phase2_ms": float(np.percentile(rep.latency_ms[late], 95)) if late.any() else None,
            "server_p95_ms": rep.server_p95_ms,
            "server_p95_phase2_ms": float(np.percentile(rep.server_ms[late], 95)) if late.any() else None,
            "send_lag_p99_ms": rep.send_lag_p99_ms,
            **server,
            "wall_s": wall,
            "load_average": os.getloadavg(),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sim", action="store_true")
    ap.add_argument("--runtime", action="store_true")
    ap.add_argument("--max-qps", type=float, default=150.0, help="the runtime arm's peak QPS")
    ap.add_argument("--sim-max-qps", type=float, nargs="+", default=[150.0, 3000.0])
    ap.add_argument("--profile", type=Path, default=PROFILE, help="profile directory (default: tweets-sklearn)")
    ap.add_argument("--slo", type=parse_slo, default=SLO(kind="accuracy", value=0.572), help="accuracy:A or latency:MS")
    ap.add_argument("--devices", type=int, default=1, help="number of devices")
    ap.add_argument("--device-memory-mb", type=float, default=16000.0, help="memory of each device")
    ap.add_argument(
        "--batch-overhead-ms",
        type=float,
        default=None,
        help="per-batch runtime cost the plans are made with (default: the profile's; 'serve --emulate' measures it)",
    )
    ap.add_argument(
        "--max-busy",
        type=float,
        default=1.0,
        help="device headroom the plans are made with (plan --max-busy; the re-plans inherit it); default 1: none",
    )
    ap.add_argument(
        "--same-process",
        action="store_true",
        help="run the server on a thread of this process, beside the load generator (the earlier runs' setup); "
        "default: the server in a child process",
    )
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--phase-s", type=int, default=PHASE_S, help="seconds of each of the two trace windows")
    ap.add_argument("--out", type=Path, default=None, help="write every row as JSON here")
    a = ap.parse_args()
    profile = load_profile(a.profile)
    setup = Setup(a.profile, a.slo, a.devices, a.device_memory_mb, a.batch_overhead_ms, a.max_busy)
    print(f"load average at start: {os.getloadavg()}", flush=True)
    out: dict[str, Any] = {}
    if a.sim or not a.runtime:
        delay = child_replan_s(zipf_plan(profile, a.sim_max_qps[0], setup), a.profile)
        print(f"re-plan in a child process: {delay:.2f} s (the simulated re-plan delay)", flush=True)
        out["child_replan_s"] = delay
        out["sim"] = [r for q in a.sim_max_qps for r in run_sim(profile, q, setup, a.runs, delay, a.phase_s)]
    if a.runtime:
        out["runtime"] = run_runtime(profile, a.max_qps, setup, a.phase_s, server_process=not a.same_process)
    print(f"load average at end: {os.getloadavg()}", flush=True)
    if a.out is not None:
        a.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
