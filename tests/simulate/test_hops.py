"""Process hops: a plan made for Ray pays its measured hop per process crossing, as latency only; and every plan
pays its profile's front door per answer."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from tests.cli_json import stdout_json

from cascadeserve.cascade import Cascade
from cascadeserve.cli import run
from cascadeserve.errors import InfeasibleError
from cascadeserve.plan import SLO, Device, Gear, GearPlan, GearReplica, Replica, fixed_plan, load_plan
from cascadeserve.planner import Planner
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve, load_profile, record_costs, save_profile
from cascadeserve.simulate import simulate
from cascadeserve.simulate.hops import charge_front_door, expected_hops, hop_costs, lognormal_sigma

THREE = Cascade(("m0", "m1", "m2"), (0.12, 0.2))


def _devices(n: int) -> list[Device]:
    return [Device(name=f"d{i}", memory_mb=1000) for i in range(n)]


def test_one_device_costs_one_hop_and_an_even_split_half_a_hop_per_forward(toy_profile: Profile) -> None:
    one = fixed_plan(toy_profile, THREE, _devices(1), backend="ray")
    assert expected_hops(one).tolist() == [[1.0, 1.0, 1.0]]  # forwards stay in the one server
    two = fixed_plan(toy_profile, THREE, _devices(2), backend="ray")
    assert expected_hops(two).tolist() == [[1.0, 1.5, 2.0]]  # the next replica is on the other device half the time


def _split_plan(shares: dict[tuple[str, str], float]) -> GearPlan:
    """A one-gear plan of m0 -> m1 over d0, d1 with the given (model, device) -> share."""
    reps = tuple(GearReplica(model=m, device=d, share=s) for (m, d), s in shares.items())
    gear = Gear(qps_low=0.0, qps_high=1e9, models=("m0", "m1"), thresholds=(0.6,), replicas=reps)
    replicas = tuple(Replica(model=m, device=d) for m, d in shares)
    return GearPlan(profile="toy", devices=tuple(_devices(2)), replicas=replicas, gears=(gear,), backend="ray")


def test_stages_on_different_devices_cross_every_time() -> None:
    apart = _split_plan({("m0", "d0"): 1.0, ("m1", "d1"): 1.0})
    assert expected_hops(apart).tolist() == [[1.0, 2.0]]
    half = _split_plan({("m0", "d0"): 0.5, ("m0", "d1"): 0.5, ("m1", "d1"): 1.0})
    assert expected_hops(half).tolist() == [[1.0, 1.5]]


def test_a_ray_plan_finishes_each_request_later_by_its_hops_and_nothing_else(toy_profile: Profile) -> None:
    # the same Ray plan with no hop to pay (the toy profile records none) replays the same trajectory: Ray's routing
    # of forwards (one router per device's server) is the plan's, whatever its hop costs
    free = fixed_plan(toy_profile, THREE, _devices(2), backend="ray")
    ray = free.model_copy(update={"hop_ms": 2.0})
    arrivals = np.arange(200) * 0.02
    a, b = simulate(toy_profile, free, arrivals), simulate(toy_profile, ray, arrivals)
    assert np.array_equal(a.answer_stage, b.answer_stage) and np.array_equal(a.correct, b.correct)
    hops = np.array([1.0, 1.5, 2.0])[a.answer_stage]
    assert np.allclose(b.finish - a.finish, hops * 0.002, rtol=0, atol=1e-12)
    assert set(a.answer_stage.tolist()) == {0, 1, 2}  # every stage is exercised
    assert np.array_equal(a.tick_busy, b.tick_busy)  # no device time


def test_a_ray_plan_without_its_own_hop_pays_the_profiles_and_a_local_plan_never_does(
    toy_profile: Profile, tmp_path: Path
) -> None:
    d = save_profile(toy_profile, tmp_path / "toy")
    record_costs(d, ray_hop_ms=3.0)
    prof = load_profile(d)
    assert prof.ray_hop_ms == 3.0
    arrivals = np.arange(100) * 0.02
    local = fixed_plan(toy_profile, THREE, _devices(1))  # made before the hop was recorded: no hop in it
    ray = fixed_plan(toy_profile, THREE, _devices(1), backend="ray")
    assert (local.backend, ray.backend, ray.hop_ms) == ("local", "ray", 0.0)
    base = simulate(prof, local, arrivals)
    assert np.allclose(simulate(prof, ray, arrivals).finish - base.finish, 0.003)
    assert fixed_plan(prof, THREE, _devices(1), backend="ray").hop_ms == 3.0  # made after: the plan carries it


def test_the_backend_and_hop_travel_in_the_plan_file_and_old_plans_are_local(
    toy_profile: Profile, tmp_path: Path
) -> None:
    plan = fixed_plan(toy_profile, THREE, _devices(2), backend="ray").model_copy(update={"hop_ms": 1.25})
    again = load_plan(plan.save(tmp_path / "p.json"), toy_profile)
    assert (again.backend, again.hop_ms) == ("ray", 1.25)
    doc = plan.model_dump(mode="json")
    del doc["backend"], doc["hop_ms"]
    old = GearPlan.model_validate(doc)
    assert (old.backend, old.hop_ms) == ("local", 0.0)


def test_record_costs_keeps_the_file_and_refuses_unknown_or_bad_values(toy_profile: Profile, tmp_path: Path) -> None:
    d = save_profile(toy_profile, tmp_path / "toy")
    record_costs(d, batch_overhead_ms=0.5)
    record_costs(d, ray_hop_ms=2.5)
    prof = load_profile(d)
    assert (prof.batch_overhead_ms, prof.ray_hop_ms, prof.model_names) == (0.5, 2.5, toy_profile.model_names)
    with pytest.raises(ValueError, match="not a serving cost"):
        record_costs(d, hop=1.0)
    with pytest.raises(ValueError, match="finite"):
        record_costs(d, ray_hop_ms=float("nan"))


def test_plan_fixed_backend_ray_then_simulate_charges_the_recorded_hop(
    toy_profile: Profile, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = save_profile(toy_profile, tmp_path / "toy")
    out = tmp_path / "plan.json"
    base = ["plan", "fixed", "--profile", str(d), "--cascade", "m0,m1", "--thresholds", "0.6", "--out", str(out)]
    assert run([*base, "--backend", "ray"]) == 0
    capsys.readouterr()
    sim = ["simulate", "--profile", str(d), "--plan", str(out), "--trace", "synthetic:constant:qps=20,duration=2"]
    assert run([*sim, "--json"]) == 0
    before = stdout_json(capsys)
    record_costs(d, ray_hop_ms=4.0)  # what serve --emulate --backend ray records at start-up
    assert run([*sim, "--json"]) == 0
    after = stdout_json(capsys)
    assert after["p50_ms"] == pytest.approx(before["p50_ms"] + 4.0)  # one device: every request one hop
    assert run([*base, "--backend", "nope"]) == 2


def _flat(hop_ms: float) -> Profile:
    """One model ``m``: 2 ms per sample at any batch size, 10 MB; Ray's hop recorded as ``hop_ms``."""
    n = 100
    labels = np.zeros(n, dtype=np.int64)
    m = ModelProfile("m", 10.0, RuntimeCurve((1, 64), (2.0, 128.0)))
    return Profile("flat", (m,), np.arange(n), labels, labels[None, :].copy(), np.ones((1, n)), ray_hop_ms=hop_ms)


def test_the_planner_checks_a_ray_plan_with_its_hops() -> None:
    slo = SLO(kind="p95_ms", value=20.0)

    def fit(backend: str, hop_ms: float) -> GearPlan:
        pl = Planner(n_ranges=2, seed=1, backend=backend)  # type: ignore[arg-type]
        plan = pl.fit(_flat(hop_ms), [Device(name="d0", memory_mb=100.0)], slo, 300.0).plan_
        assert plan is not None
        return plan

    local, ray = fit("local", 5.0), fit("ray", 5.0)
    assert (local.backend, ray.backend) == ("local", "ray")
    for g0, g1 in zip(local.gears, ray.gears, strict=True):  # one device: every request pays exactly one hop
        assert g0.predicted_p95_ms is not None and g1.predicted_p95_ms == pytest.approx(g0.predicted_p95_ms + 5.0)
    with pytest.raises(InfeasibleError):  # a 25 ms hop alone breaks a 20 ms SLO
        fit("ray", 25.0)
    assert fit("local", 25.0).backend == "local"  # the local backend never pays it


def test_lognormal_sigma_matches_the_mean_and_p95() -> None:
    assert lognormal_sigma(5.0, 5.0) == 0.0 and lognormal_sigma(5.0, 4.0) == 0.0 and lognormal_sigma(0.0, 9.0) == 0.0
    for sigma in (0.1, 0.5, 1.2):
        ratio = math.exp(1.6448536269514722 * sigma - sigma * sigma / 2)
        assert lognormal_sigma(4.0, 4.0 * ratio) == pytest.approx(sigma)
    assert lognormal_sigma(1.0, 100.0) == pytest.approx(1.6448536269514722)  # wider than a log-normal can be


def test_a_measured_p95_draws_each_hop_with_that_mean_and_tail(toy_profile: Profile) -> None:
    """One device: every request crosses once. With a p95 of 3× the mean, the charges keep the mean and take the
    measured tail; the same run is charged the same."""
    local = fixed_plan(toy_profile, THREE, _devices(1))
    ray = local.model_copy(update={"backend": "ray", "hop_ms": 4.0, "hop_p95_ms": 12.0})
    arrivals = np.arange(20_000) * 0.002
    base = simulate(toy_profile, local, arrivals)
    hop = (simulate(toy_profile, ray, arrivals).finish - base.finish) * 1000.0
    assert hop.min() > 0
    assert hop.mean() == pytest.approx(4.0, rel=0.03)
    assert np.percentile(hop, 95) == pytest.approx(12.0, rel=0.05)
    again = (simulate(toy_profile, ray, arrivals).finish - base.finish) * 1000.0
    assert np.array_equal(hop, again)


def test_drawn_hops_cross_devices_as_often_as_expected(toy_profile: Profile) -> None:
    """Two devices, an even split: a request answered at stage k pays 1 + k/2 hops on average, drawn or not."""
    free = fixed_plan(toy_profile, THREE, _devices(2), backend="ray")  # no hop recorded: pays nothing
    ray = free.model_copy(update={"hop_ms": 2.0, "hop_p95_ms": 4.0})
    arrivals = np.arange(20_000) * 0.002
    base = simulate(toy_profile, free, arrivals)
    hop = (simulate(toy_profile, ray, arrivals).finish - base.finish) * 1000.0
    for k, hops in enumerate(expected_hops(ray)[0]):
        at = base.answer_stage == k
        assert at.sum() > 1000
        assert hop[at].mean() == pytest.approx(2.0 * hops, rel=0.05)


def test_serve_records_the_hops_p95_and_plans_carry_it(toy_profile: Profile, tmp_path: Path) -> None:
    d = save_profile(toy_profile, tmp_path / "toy")
    record_costs(d, ray_hop_ms=3.0, ray_hop_p95_ms=7.5)
    prof = load_profile(d)
    assert (prof.ray_hop_ms, prof.ray_hop_p95_ms) == (3.0, 7.5)
    plan = fixed_plan(prof, THREE, _devices(1), backend="ray")
    assert (plan.hop_ms, plan.hop_p95_ms) == (3.0, 7.5)
    assert hop_costs(prof, plan) == (3.0, 7.5)
    assert hop_costs(prof, plan.model_copy(update={"hop_ms": 0.0, "hop_p95_ms": 0.0})) == (3.0, 7.5)
    assert hop_costs(prof, fixed_plan(prof, THREE, _devices(1))) == (0.0, 0.0)  # a local plan pays none


def test_the_front_door_delays_every_answer_on_every_backend_and_nothing_else(toy_profile: Profile) -> None:
    """A profile's front door (what ``bench`` saw beyond the server's time) finishes every answered request that
    much later, local or Ray, the mean itself without a p95 and drawn with one (the measured mean and tail)."""
    plan = fixed_plan(toy_profile, THREE, _devices(2))
    arrivals = np.arange(20_000) * 0.002
    base = simulate(toy_profile, plan, arrivals)
    door = dataclasses.replace(toy_profile, front_door_ms=3.0)
    const = simulate(door, plan, arrivals)
    assert np.allclose(const.finish - base.finish, 0.003, rtol=0, atol=1e-12)
    assert np.array_equal(const.answer_stage, base.answer_stage) and np.array_equal(const.tick_busy, base.tick_busy)
    drawn = (simulate(dataclasses.replace(door, front_door_p95_ms=6.0), plan, arrivals).finish - base.finish) * 1000
    assert drawn.min() > 0 and drawn.mean() == pytest.approx(3.0, rel=0.03)
    assert np.percentile(drawn, 95) == pytest.approx(6.0, rel=0.05)
    # on Ray it comes on top of the hops
    ray = plan.model_copy(update={"backend": "ray", "hop_ms": 2.0})
    hops = simulate(toy_profile, ray, arrivals).finish
    assert np.allclose(simulate(door, ray, arrivals).finish - hops, 0.003, rtol=0, atol=1e-12)


def test_a_shed_request_pays_no_front_door(toy_profile: Profile) -> None:
    res = simulate(toy_profile, fixed_plan(toy_profile, THREE, _devices(1)), np.arange(10) * 0.1)
    shed = np.zeros(10, dtype=bool)
    shed[3] = True  # as admission marks a request it refused
    got = charge_front_door(dataclasses.replace(res, shed=shed), 2.0)
    assert got.finish[3] == res.finish[3]
    assert np.allclose(np.delete(got.finish, 3) - np.delete(res.finish, 3), 0.002, rtol=0, atol=1e-12)
