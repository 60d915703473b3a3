"""Batch-time spread: drawn the same way by every engine, measured back from served batches, kept in the profile."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.conftest import make_toy_profile, with_token_costs

from cascadeserve.cascade import Cascade
from cascadeserve.errors import ProfileError
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import Profile, calibrate, load_profile, save_profile
from cascadeserve.profile.calibration import snapshot_factors
from cascadeserve.profile.spread import (
    MAX_SPREAD,
    SPREAD_DRAWS,
    lognormal_sigma,
    residual_spread,
    served_spread,
    spread_draws,
    spread_table,
)
from cascadeserve.runtime.costs import CostMonitor
from cascadeserve.runtime.observer import BatchEvent
from cascadeserve.simulate import simulate

PROFILE = make_toy_profile()


def _spread(profile: Profile, **sigmas: float) -> Profile:
    models = tuple(dataclasses.replace(m, batch_spread=sigmas.get(m.name, 0.0)) for m in profile.models)
    return dataclasses.replace(profile, models=models)


def test_no_model_with_spread_draws_nothing() -> None:
    assert spread_draws(PROFILE, 0) is None and spread_table(PROFILE, 3) is None


@settings(max_examples=20, deadline=None)
@given(st.floats(0.02, 0.8), st.integers(0, 50))
def test_each_devices_draws_have_mean_one_and_the_models_sigma(sigma: float, order: int) -> None:
    draws = spread_draws(_spread(PROFILE, m1=sigma), order)
    assert draws is not None and draws.shape == (3, SPREAD_DRAWS)
    assert np.all(draws[0] == 1.0) and np.all(draws[2] == 1.0)  # models without spread cost exactly their rule
    assert float(draws[1].mean()) == pytest.approx(1.0, abs=1e-12)  # the planner's mean costs do not move
    assert float(np.log(draws[1]).std()) == pytest.approx(sigma, rel=0.05)
    again = spread_draws(_spread(PROFILE, m1=sigma), order)
    assert again is not None and np.array_equal(draws, again)  # seeded: every engine draws the same


def test_devices_draw_apart_and_the_table_stacks_them() -> None:
    prof = _spread(PROFILE, m0=0.2)
    table = spread_table(prof, 3)
    assert table is not None and table.shape == (3, 3, SPREAD_DRAWS)
    d0, d1 = spread_draws(prof, 0), spread_draws(prof, 1)
    assert d0 is not None and d1 is not None and not np.array_equal(d0[0], d1[0])
    assert np.array_equal(table[1], d1)


def test_residual_spread_takes_the_rules_own_scatter_out_in_quadrature() -> None:
    rng = np.random.default_rng(3)
    obs = rng.lognormal(0.0, 0.3, 20_000)
    assert residual_spread(obs) == pytest.approx(0.3, abs=0.015)
    rule = rng.lognormal(0.0, 0.2, 20_000)
    assert residual_spread(obs, rule) == pytest.approx(math.sqrt(0.3**2 - 0.2**2), abs=0.02)
    assert residual_spread(obs, rng.lognormal(0.0, 0.5, 20_000)) == 0.0  # the rule already scatters more
    assert residual_spread(obs[:39]) is None  # too few batches to read a p95


def test_lognormal_sigma_inverts_the_mean_and_p95() -> None:
    for sigma in (0.05, 0.3, 1.0):
        mean = math.exp(sigma * sigma / 2.0)
        p95 = math.exp(1.6448536269514722 * sigma)
        assert lognormal_sigma(mean, p95) == pytest.approx(sigma)
    assert lognormal_sigma(1.0, 1.0) == 0.0 and lognormal_sigma(1.0, 1e9) == MAX_SPREAD


def test_served_spread_divides_out_the_hosts_load_and_each_sizes_factor() -> None:
    """Batches of 1 at x1.1 and of 4 at x1.6, slowed x(1 + 0.5·share) by the host, each scattered by σ = 0.2:
    only the scatter is left."""
    rng = np.random.default_rng(5)
    n = 4000
    sizes = rng.choice([1, 4], n)
    shares = rng.random(n)
    ratios = np.where(sizes == 1, 1.1, 1.6) * (1.0 + 0.5 * shares) * rng.lognormal(-0.02, 0.2, n)
    got = served_spread(PROFILE, 0, ratios, shares, sizes, busy_factor=1.5)
    assert got == pytest.approx(0.2, abs=0.015)
    left_in = served_spread(PROFILE, 0, ratios, shares, sizes, busy_factor=1.0)  # the host's load left in
    assert got is not None and left_in is not None and left_in > got + 0.02


def _one_model_plan(profile: Profile, devices: int = 1):  # type: ignore[no-untyped-def]
    return fixed_plan(profile, Cascade(("m1",), ()), [Device(name=f"d{i}", memory_mb=1000) for i in range(devices)])


def test_a_lone_batch_costs_its_rule_times_the_devices_next_draw() -> None:
    """Requests far apart: each is a batch of one on d0, and its latency is the runtime at size 1 times the k-th
    factor of d0's table, exactly, in both engines."""
    prof = _spread(PROFILE, m1=0.3)
    plan = _one_model_plan(prof)
    arrivals = np.arange(20) * 1.0
    draws = spread_draws(prof, 0)
    assert draws is not None
    rt = prof.model("m1").runtime.ms_of(1) / 1000.0 + plan.batch_overhead_ms / 1000.0
    for engine in ("compiled", "reference"):
        res = simulate(prof, plan, arrivals, engine=engine)  # type: ignore[arg-type]
        assert np.allclose(res.finish - arrivals, rt * draws[1, :20], rtol=0, atol=1e-12), engine
    flat = simulate(PROFILE, _one_model_plan(PROFILE), arrivals)
    assert np.allclose(flat.finish - arrivals, rt)


def test_spread_lengthens_the_tail_near_saturation_not_the_mean_work() -> None:
    prof = _spread(PROFILE, m1=0.3)
    plan = _one_model_plan(prof)
    rng = np.random.default_rng(0)
    rate = 0.85 / (prof.model("m1").runtime.ms_of(1) / 1000.0)  # ~85 % busy at batches of one
    arrivals = np.cumsum(rng.exponential(1.0 / rate, 5000))
    flat = simulate(PROFILE, _one_model_plan(PROFILE), arrivals, record_batches=True)
    spread = simulate(prof, plan, arrivals, record_batches=True)
    assert spread.percentile_ms(95) > 1.15 * flat.percentile_ms(95)
    busy = [sum(b.end - b.start for b in r.batches) for r in (flat, spread)]
    assert busy[1] == pytest.approx(busy[0], rel=0.05)


@pytest.mark.parametrize("tokens", [False, True])
def test_the_cost_monitor_measures_back_the_spread_the_engine_drew(tokens: bool) -> None:
    """The simulator's batches, drawn with σ = 0.25 beyond the rule (with token costs, beside the tokens' own
    scatter), fed to the cost monitor of the profile without spread: it reads σ ≈ 0.25 back, and calibration keeps
    it in the profile."""
    base = with_token_costs(PROFILE) if tokens else PROFILE
    prof = _spread(base, m1=0.25)
    plan = _one_model_plan(prof)
    arrivals = np.arange(3000) * 0.05  # far apart: batches of one, the host idle
    res = simulate(prof, plan, arrivals, record_batches=True)
    mon = CostMonitor(base)
    for b in res.batches:
        mon.batch(
            BatchEvent(start=b.start, end=b.end - plan.batch_overhead_ms / 1000.0, device=b.device, replica=b.replica,
                       row=b.row, size=b.size, answered=b.answered, model="m1", device_name="d0", generation=0)
        )  # fmt: skip
    snap = mon.snapshot()
    row = next(m for m in snap["models"] if m["model"] == "m1")
    assert row["batch_spread"] == pytest.approx(0.25, abs=0.03)
    assert next(m for m in snap["models"] if m["model"] == "m0")["batch_spread"] is None  # no batches
    got = snapshot_factors(snap, 20)
    new = calibrate(base, got.factors, source="test", spread=got.spread)
    assert new.model("m1").batch_spread == pytest.approx(0.25, abs=0.03) and "batch spread m1" in new.calibration


def test_the_profile_keeps_its_spread_and_refuses_a_bad_one(tmp_path: Path) -> None:
    prof = _spread(PROFILE, m2=0.17)
    save_profile(prof, tmp_path / "p")
    assert load_profile(tmp_path / "p").model("m2").batch_spread == pytest.approx(0.17)
    text = (tmp_path / "p" / "profile.yaml").read_text()
    for bad in ("2.5", "-0.1", "wide"):
        (tmp_path / "p" / "profile.yaml").write_text(text.replace("batch_spread: 0.17", f"batch_spread: {bad}"))
        with pytest.raises(ProfileError, match=r"m2.*batch_spread"):
            load_profile(tmp_path / "p")
    with pytest.raises(ValueError, match="batch spread of model 'm0'"):
        calibrate(PROFILE, {}, source="test", spread={"m0": 3.0})
    with pytest.raises(ValueError, match="batch_spread"):
        dataclasses.replace(PROFILE.models[0], batch_spread=float("nan"))
