"""Cost drift over real HTTP on 127.0.0.1: one model slowed mid-run (the slowdown hook), the server's cost monitor
sees it, ``notify`` names the model, ``auto`` re-plans with the measured costs and swaps with nothing dropped, and
``GET /v2/cascade/costs`` shows what ``profile calibrate`` reads."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from pathlib import Path

import httpx
import pytest
from tests.http.http_helpers import metric

from cascadeserve.cascade import Cascade
from cascadeserve.http import Server, ServerOptions, build_app
from cascadeserve.plan import SLO, Device, fixed_plan
from cascadeserve.policy.costs import CostSettings
from cascadeserve.policy.replan import DriftSettings, ReplanMode
from cascadeserve.profile import RuntimeCurve, load_profile, save_profile
from cascadeserve.profile.calibration import snapshot_factors
from cascadeserve.profile.slowdown import Slowdown, Slowdowns
from cascadeserve.runtime import RuntimeOptions
from cascadeserve.runtime.replanner import ReplanOptions

PROFILE = Path(__file__).resolve().parents[1] / "data" / "profiles" / "tweets-sklearn"
# load drift never fires here (its window is long): only cost drift re-plans
QUIET = {"window_ticks": 100_000, "min_ticks": 100_000, "threshold": 0.99, "cooldown_s": 1e6, "check_every": 10}
SCALE = 10.0  # the profile's runtimes x10 (lr-words 5.5 ms, lr-chars 18 ms at batch 1), saved to a temporary copy
# drift is x2 and 25 ms per batch: an emulated device's wake-ups add ~1 ms to every batch on a quiet machine and ~10
# ms at load 6, which must not read as drift of the healthy model; lr-chars slowed 6x is ~90 ms over at batch 1
COSTS = CostSettings(tolerance=1.0, window_s=2.0, sustain_s=1.0, min_batches=5, cooldown_s=1000.0, min_excess_ms=25.0)


@pytest.fixture(scope="module")
def scaled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tweets profile whose batches take 10x as long (re-plans read it from disk)."""
    prof = load_profile(PROFILE)
    models = tuple(
        dataclasses.replace(m, runtime=RuntimeCurve(m.runtime.batch_sizes, tuple(x * SCALE for x in m.runtime.ms)))
        for m in prof.models
    )
    out = tmp_path_factory.mktemp("costs") / "tweets-sklearn"
    save_profile(dataclasses.replace(prof, models=models), out)
    return out


def _server(profile_dir: Path, mode: ReplanMode, slow_at_s: float) -> Server:
    profile = load_profile(profile_dir)
    plan = fixed_plan(
        profile,
        Cascade(("lr-words", "lr-chars"), (0.99,)),
        (Device(name="dev0", memory_mb=1000),),
        max_qps=200,
        slo=SLO(kind="p95_ms", value=100.0),
    )
    slow = Slowdowns.of(Slowdown("*", slow_at_s, 6.0, "lr-chars")).shifted(time.monotonic())
    app = build_app(
        profile,
        plan,
        emulate=True,
        name="tweets",
        runtime_options=RuntimeOptions(max_in_flight=4096, slowdowns=slow),
        server_options=ServerOptions(stop_grace_s=2.0),
        # a generous bound: beside 8 busy loops the child planner ran past 120 s
        replan=ReplanOptions(DriftSettings(mode=mode, **QUIET), profile_dir, timeout_s=600.0),  # type: ignore[arg-type]
        costs=COSTS,
    )
    return Server(app, "127.0.0.1", 0, grace_s=2.0).start()


async def _stream(url: str, until: float, stop: asyncio.Event) -> tuple[int, int]:
    sent = ok = 0
    async with httpx.AsyncClient(timeout=120) as client:

        async def worker(k: int) -> None:
            nonlocal sent, ok
            i = k
            while not stop.is_set() and time.monotonic() < until:
                body = {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1], "data": [i % 500]}]}
                sent += 1
                r = await client.post(f"{url}/v2/models/tweets/infer", json=body)
                ok += r.status_code == 200
                i += 4
                await asyncio.sleep(0.005)

        await asyncio.gather(*(worker(k) for k in range(4)))
    return sent, ok


def _drive(server: Server, done: object, bound_s: float = 90.0) -> tuple[int, int]:
    """Stream until ``done()`` holds (then one more second), or ``bound_s`` passes."""

    async def run() -> tuple[int, int]:
        stop = asyncio.Event()
        until = time.monotonic() + bound_s

        async def watch() -> None:
            while time.monotonic() < until and not done():  # type: ignore[operator]
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)
            stop.set()

        (sent, ok), _ = await asyncio.gather(_stream(server.url, until, stop), watch())
        return sent, ok

    return asyncio.run(run())


@pytest.mark.timeout(900)  # the re-plan's own bound is 600 s (a child planner beside 8 busy loops took over 120 s)
def test_auto_replans_with_the_measured_costs_and_swaps_without_dropping(scaled: Path) -> None:
    server = _server(scaled, "auto", slow_at_s=1.0)
    try:
        rp, rt = server.app.replanner, server.app.runtime
        assert rp is not None
        sent, ok = _drive(server, lambda: rp.stats.swapped >= 1, bound_s=600.0)
        assert rp.stats.cost_drifts >= 1 and rp.stats.swapped == 1, rp.stats
        assert ok == sent  # every request answered across the swap
        assert rt.current.number == 1
        costs = rt.plan.notes["costs"]
        assert costs.startswith("profile 'tweets-sklearn' calibrated: runtimes lr-chars x")  # only what changed
        factor = float(costs.split("lr-chars x")[1].split()[0].rstrip(","))
        assert 4.5 < factor < 12.0  # 6x slower (printed to 3 digits), plus wake-ups on a busy machine
        snap = httpx.get(f"{server.url}/v2/cascade/costs", timeout=10).json()
        row = {m["model"]: m for m in snap["models"]}["lr-chars"]
        assert row["applied"] == pytest.approx(factor, rel=1e-3)
        text = httpx.get(f"{server.url}/metrics", timeout=10).text
    finally:
        server.stop()
    assert metric(text, "cascadeserve_cost_drifts_total") >= 1
    assert metric(text, "cascadeserve_admitted_total") == metric(text, "cascadeserve_answered_total")


def test_notify_names_the_slow_model_and_keeps_the_plan(scaled: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    server = _server(scaled, "notify", slow_at_s=0.5)
    try:
        rp = server.app.replanner
        assert rp is not None
        sent, ok = _drive(server, lambda: rp.stats.cost_drifts >= 1)
        assert ok == sent and rp.stats.swapped == 0 and server.app.runtime.current.number == 0
        snap = httpx.get(f"{server.url}/v2/cascade/costs", timeout=10).json()
    finally:
        server.stop()
    # one line per drift, the server's events line (notify's own note is at info level: it is in the plan's notes)
    events = [r.getMessage() for r in caplog.records if r.name == "cascadeserve.events"]
    drift = [m for m in events if "cost drift" in m]
    assert drift and drift[0].startswith("tweets: cost drift: lr-chars batches take x") and "lr-words" not in drift[0]
    assert not [r for r in caplog.records if r.name == "cascadeserve.replan"]
    assert "lr-chars" in rp.stats.last and "--replan auto" in rp.stats.last
    got = snapshot_factors(snap, min_batches=5)
    assert got.factors["lr-chars"] > 3.0  # since the start: most batches ran after the slowdown
    assert got.notes == ["model 'nb-words': 0 batches (fewer than --min-batches 5): unchanged"]  # not in the plan
