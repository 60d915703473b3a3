"""A model slowed mid-run on real models: does ``serve --replan auto`` bring the served p95 back under the SLO?

Run: ``.venv/bin/python benchmarks/bench_cost_drift.py --profile DIR --models models.yaml --validation SPEC
--name NAME --slo-ms 150 --qps 40 --slow-model minilm-l6 [--modes auto,notify,off] [--runs 3]``

Per mode and run: plan the profile (2 devices) for ``--qps``; start ``cascadeserve serve --models`` in its own
process with ``--replan MODE --slowdown model=M,at=T,factor=F``; send Poisson arrivals of real validation inputs at
``--qps`` for ``--duration-s`` (``cascadeserve.eval.loadgen``, this process); poll ``GET /v2/cascade/costs`` and
``GET /v2/cascade/plan`` every half second for the drift decisions and the swaps. Report the p95 of each 10 s window
of arrival time, when the drift was decided and the plan swapped (seconds from the slowdown), the first window
after the slowdown from which every window meets the SLO, and sent / answered / shed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from cascadeserve.eval.loadgen import run_load
from cascadeserve.models import load_validation
from cascadeserve.plan import SLO, Device
from cascadeserve.planner import Planner
from cascadeserve.profile import load_profile
from cascadeserve.traces import poisson

CS = [str(Path(sys.executable).with_name("cascadeserve"))]


def _plan(profile_dir: Path, slo_ms: float, qps: float, out: Path) -> None:
    prof = load_profile(profile_dir)
    devices = tuple(Device(name=f"dev{i}", memory_mb=8192) for i in range(2))
    planner = Planner(n_ranges=6).fit(prof, devices, SLO(kind="p95_ms", value=slo_ms), qps * 1.2)
    assert planner.plan_ is not None
    planner.plan_.save(out)


async def _watch(url: str, stop: asyncio.Event, t0: float, log: dict[str, Any]) -> None:
    async with httpx.AsyncClient(timeout=10) as c:
        while not stop.is_set():
            try:
                costs = (await c.get(f"{url}/v2/cascade/costs")).json()
                plan = (await c.get(f"{url}/v2/cascade/plan")).json()
            except httpx.HTTPError:
                costs, plan = {}, {}
            now = time.monotonic() - t0
            drifts = int(costs.get("drifts") or 0)
            if drifts > len(log["drifts"]):  # a new cost-drift decision since the last poll
                log["drifts"].append((round(now, 1), costs.get("last_drift")))
            m = re.search(r"swapped (\d+)", plan.get("notes", {}).get("replan", ""))
            if m and int(m.group(1)) > len(log["swaps"]):
                log["swaps"].append((round(now, 1), plan["notes"].get("costs", "")))
            await asyncio.sleep(0.5)


async def _drive(url: str, name: str, arrivals: np.ndarray, rows: np.ndarray, labels: np.ndarray) -> tuple[Any, dict]:
    log: dict[str, Any] = {"drifts": [], "swaps": []}
    stop = asyncio.Event()
    t0 = time.monotonic()
    watcher = asyncio.create_task(_watch(url, stop, t0, log))
    rep = await run_load(url, name, arrivals, labels=labels, rows=rows)
    stop.set()
    await watcher
    return rep, log


def one_run(args: argparse.Namespace, mode: str, plan: Path, rows: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
    port = args.port
    slow = f"model={args.slow_model},at={args.slow_at_s},factor={args.factor}"
    cmd = [*CS, "serve", "--plan", str(plan), "--profile", str(args.profile), "--models", str(args.models),
           "--name", args.name, "--port", str(port), "--replan", mode, "--slowdown", slow,
           "--cost-window-s", str(args.cost_window_s)]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    with (args.log_dir / f"serve-{mode}.err").open("w") as err:
        proc = subprocess.Popen(cmd, stderr=err, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        started = time.monotonic()
        while time.monotonic() - started < 600:
            try:
                if httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        ready = time.monotonic() - started  # the slowdown's clock started when serve parsed its options
        arrivals = poisson(args.qps, args.duration_s, seed=args.seed).arrivals
        rep, log = asyncio.run(_drive(url, args.name, arrivals, rows, labels))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    slow_at = max(args.slow_at_s - ready, 0.0)  # seconds into the load when batches slowed down
    lat = np.full(len(arrivals), np.nan)
    lat[rep.ok_index] = rep.latency_ms
    windows = []
    for s in range(0, int(args.duration_s), 10):
        m = (arrivals >= s) & (arrivals < s + 10) & np.isfinite(lat)
        windows.append(round(float(np.percentile(lat[m], 95)), 1) if m.any() else None)
    after = int(slow_at // 10) + 1
    meets = [w is not None and w <= args.slo_ms for w in windows]
    back = next((k for k in range(after, len(windows)) if all(meets[k:])), None)
    return {
        "mode": mode,
        "slow_at_s": round(slow_at, 1),
        # every cost-drift decision and swap, in seconds from the slowdown (negative: before it), and what it said
        "drifts": [(round(t - slow_at, 1), what) for t, what in log["drifts"]],
        "swaps": [(round(t - slow_at, 1), costs) for t, costs in log["swaps"]],
        "back_within_slo_after_slowdown_s": None if back is None else round(back * 10 - slow_at, 1),
        "window_p95_ms": windows,
        "sent": rep.sent,
        "answered": rep.ok,
        "shed": rep.shed,
        "errors": rep.errors,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", type=Path, required=True)
    ap.add_argument("--models", type=Path, required=True)
    ap.add_argument("--validation", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--slo-ms", type=float, default=150.0)
    ap.add_argument("--qps", type=float, default=40.0)
    ap.add_argument("--duration-s", type=float, default=120.0)
    ap.add_argument("--slow-model", required=True)
    ap.add_argument("--slow-at-s", type=float, default=40.0)
    ap.add_argument("--factor", type=float, default=2.0)
    ap.add_argument("--cost-window-s", type=float, default=10.0)
    ap.add_argument("--modes", default="auto,notify,off")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--port", type=int, default=8793)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log-dir", type=Path, default=Path(tempfile.gettempdir()), help="Where serve's stderr goes.")
    args = ap.parse_args()
    data = load_validation(args.validation)
    rows = np.asarray(data.inputs, dtype=object if isinstance(data.inputs, list) else None)
    with tempfile.TemporaryDirectory() as d:
        plan = Path(d) / "plan.json"
        _plan(args.profile, args.slo_ms, args.qps, plan)
        for mode in args.modes.split(","):
            for r in range(args.runs):
                print(json.dumps({"run": r, **one_run(args, mode, plan, rows, data.labels)}), flush=True)


if __name__ == "__main__":
    main()
