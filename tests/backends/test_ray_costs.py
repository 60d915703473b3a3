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
from cascadeserve.backends.ray import RayBackend
from cascadeserve.cli.serve import _measure_costs

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
    _measure_costs(toy_profile, plan, RayBackend(), d, d)  # what serve --emulate --backend ray --out DIR does
    prof = load_profile(d)
    assert math.isfinite(prof.ray_hop_ms) and prof.ray_hop_ms > 0
    assert math.isfinite(prof.ray_hop_p95_ms) and prof.ray_hop_p95_ms > 0
    assert math.isfinite(prof.batch_overhead_ms) and prof.batch_overhead_ms >= 0
    # simulate charges the recorded hop (mean and p95) per hop, on top of the same replay
    arrivals = np.arange(200) * 0.01
    local = plan.model_copy(update={"backend": "local", "batch_overhead_ms": prof.batch_overhead_ms})
    ray = plan.model_copy(update={"batch_overhead_ms": prof.batch_overhead_ms})
    a, b = simulate(prof, local, arrivals), simulate(prof, ray, arrivals)
    assert np.array_equal(b.finish, charge_hops(a, ray, prof.ray_hop_ms, prof.ray_hop_p95_ms).finish)
    const = simulate(dataclasses.replace(prof, ray_hop_p95_ms=0.0), ray, arrivals)  # without the p95: the mean
    hops = expected_hops(ray)[0][a.answer_stage]
    assert np.allclose(const.finish - a.finish, hops * prof.ray_hop_ms / 1000.0, rtol=0, atol=1e-9)
    # a second serve measures nothing: the profile records both costs
    before = (d / "profile.yaml").read_text()
    _measure_costs(prof, plan, RayBackend(), d, d)
    assert (d / "profile.yaml").read_text() == before
