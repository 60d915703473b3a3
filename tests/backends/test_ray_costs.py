"""The Ray backend's costs, measured at start-up with its own server actor, are what its plans' simulations charge.

Mechanism only: nothing here compares a simulated with a served latency (``benchmarks/bench_ray_fidelity.py`` does).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from cascadeserve.cascade import Cascade
from cascadeserve.eval.overhead import measure_batch_overhead
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import Profile, load_profile, save_profile
from cascadeserve.simulate import simulate
from cascadeserve.simulate.hops import charge_hops, expected_hops

pytest.importorskip("ray")
from cascadeserve.api.checks import measure_costs
from cascadeserve.backends.ray import RayBackend

pytestmark = pytest.mark.usefixtures("ray_session")


def test_the_start_up_run_on_a_ray_server_measures_a_positive_finite_hop(toy_profile: Profile) -> None:
    got = measure_batch_overhead(toy_profile, seconds=0.3, backend=RayBackend())
    assert got.samples > 0 and got.model == "m0"
    assert math.isfinite(got.hop_ms) and got.hop_ms > 0  # an actor call and its answer are never free
    assert math.isfinite(got.hop_p95_ms) and got.hop_p95_ms > 0
    assert math.isfinite(got.median_ms) and 0.0 <= got.median_ms <= got.p95_ms
    assert measure_batch_overhead(toy_profile, seconds=0.2).hop_ms == 0.0  # the local runtime has no hop


def test_serve_records_the_ray_costs_and_a_ray_plan_is_charged_exactly_them(
    toy_profile: Profile, tmp_path: Path
) -> None:
    d = save_profile(toy_profile, tmp_path / "toy")
    devices = [Device(name=f"d{i}", memory_mb=1000) for i in range(2)]
    cascade = Cascade(("m0", "m1"), (0.12,))
    plan = fixed_plan(toy_profile, cascade, devices, backend="ray")  # made before any serve: no costs in it
    measure_costs(toy_profile, plan, RayBackend(), d, d)  # what serve --emulate --backend ray --out DIR does
    prof = load_profile(d)
    assert math.isfinite(prof.ray_hop_ms) and prof.ray_hop_ms > 0
    assert math.isfinite(prof.ray_hop_p95_ms) and prof.ray_hop_p95_ms > 0
    assert math.isfinite(prof.batch_overhead_ms) and prof.batch_overhead_ms >= 0
    # simulate charges the recorded hop (mean and p95) per hop, on top of the same replay
    arrivals = np.arange(200) * 0.01
    ray = plan.model_copy(update={"batch_overhead_ms": prof.batch_overhead_ms})
    # the same plan without the hop: the same replay (a local plan routes forwards otherwise than Ray's per-device
    # servers, which a queue shows: beside 8 busy loops the measured overhead queued the batches, and it differed)
    a = simulate(dataclasses.replace(prof, ray_hop_ms=0.0, ray_hop_p95_ms=0.0), ray, arrivals)
    b = simulate(prof, ray, arrivals)
    assert np.array_equal(b.finish, charge_hops(a, ray, prof.ray_hop_ms, prof.ray_hop_p95_ms).finish)
    const = simulate(dataclasses.replace(prof, ray_hop_p95_ms=0.0), ray, arrivals)  # without the p95: the mean
    hops = expected_hops(ray)[0][a.answer_stage]
    assert np.allclose(const.finish - a.finish, hops * prof.ray_hop_ms / 1000.0, rtol=0, atol=1e-9)
    # a second serve measures nothing: the profile records both costs
    before = (d / "profile.yaml").read_text()
    measure_costs(prof, plan, RayBackend(), d, d)
    assert (d / "profile.yaml").read_text() == before


def test_a_server_on_ray_measures_the_hop_while_serving_and_calibrate_records_it(
    toy_profile: Profile, tmp_path: Path
) -> None:
    """Per first-stage answer, the server keeps its latency beyond its server time (the hop there and back as
    serving sees it); ``profile calibrate --url`` writes its mean and p95 as the profile's Ray hop."""
    import asyncio

    import httpx

    from cascadeserve.cli import run
    from cascadeserve.eval.loadgen import run_load
    from cascadeserve.http import Server, build_app

    d = save_profile(dataclasses.replace(toy_profile, ray_hop_ms=0.5, ray_hop_p95_ms=0.6), tmp_path / "toy")
    prof = load_profile(d)
    devices = [Device(name=f"d{i}", memory_mb=1000) for i in range(2)]
    # threshold 0: every sample exits at the first stage, one hop there and back each
    plan = fixed_plan(prof, Cascade(("m0", "m1"), (0.0,)), devices, backend="ray", max_wait_ms=5.0)
    app = build_app(prof, plan, emulate=True, name="toy", backend=RayBackend())
    with Server(app, "127.0.0.1", 0, grace_s=2.0) as server:
        report = asyncio.run(run_load(server.url, "toy", np.linspace(0, 2.0, 100), sample_ids=np.arange(100)))
        assert report.ok == 100
        snap = httpx.get(f"{server.url}/v2/cascade/costs", timeout=60).json()
        out = tmp_path / "cal"
        argv = ["profile", "calibrate", "--profile", str(d), "--url", server.url, "--out", str(out)]
        code = run([*argv, "--min-batches", "5"])
    assert code == 0
    hop = snap["hop"]
    assert snap["backend"] == "ray"
    assert hop["answers"] == 100
    assert 0 < hop["mean_ms"] <= hop["p95_ms"] and math.isfinite(hop["p95_ms"])  # an actor call is never free
    after = load_profile(out)
    assert (after.ray_hop_ms, after.ray_hop_p95_ms) == pytest.approx((hop["mean_ms"], hop["p95_ms"]), rel=1e-5)
    assert "Ray process hop" in after.calibration
