"""An upstream stage (a model another server runs) gets a device of its own in every plan: the planner's, a fixed
one and the static fallback's; this host's devices never hold it, and it holds nothing else."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from tests.conftest import make_toy_profile

from cascadeserve.cascade import Cascade
from cascadeserve.errors import PlanError, ProfileError
from cascadeserve.plan import SLO, UPSTREAM_KIND, Device, GearPlan, fixed_plan, with_upstream_devices
from cascadeserve.planner import Planner, place_replicas
from cascadeserve.planner.placement import Load
from cascadeserve.profile import Profile, load_profile, save_profile
from cascadeserve.simulate import simulate
from cascadeserve.traces import poisson


def _upstream(profile: Profile, name: str) -> Profile:
    models = tuple(dataclasses.replace(m, upstream=m.name == name) for m in profile.models)
    return dataclasses.replace(profile, models=models)


PROFILE = _upstream(make_toy_profile(), "m2")
LOCAL = [Device(name="dev0", memory_mb=1000.0)]


def _placed_apart(plan: GearPlan) -> None:
    """Every replica of the upstream stage is on its device, and nothing else is there, in the placement and in
    every gear."""
    for reps in (plan.replicas, *(g.replicas for g in plan.gears)):
        for r in reps:
            assert (r.model == "m2") == (r.device == "upstream-m2"), r


def test_the_planner_adds_a_device_for_the_upstream_stage_beside_this_hosts() -> None:
    plan = Planner(n_ranges=3, seed=1).fit(PROFILE, LOCAL, SLO(kind="p95_ms", value=40.0), 300.0).plan_
    assert plan is not None
    assert [(d.name, d.kind, d.upstream) for d in plan.devices] == [
        ("dev0", "cpu", None),
        ("upstream-m2", UPSTREAM_KIND, "m2"),
    ]
    assert "m2" in plan.models()  # the most accurate stage is worth its own device
    _placed_apart(plan)
    res = simulate(PROFILE, plan, poisson(250.0, 20.0, seed=3).arrivals)
    assert res.percentile_ms(95) <= 40.0


def test_an_upstream_stage_never_takes_a_local_device_from_the_local_stages() -> None:
    """On one local device at 2,000 QPS, the same family with m2 local can only afford m1 alone (0.863); as an
    upstream stage m2 runs beside it, and the cascade through it holds the SLO at 0.9985."""
    slo, qps = SLO(kind="p95_ms", value=40.0), 2000.0
    here = Planner(n_ranges=1, seed=1).fit(make_toy_profile(), LOCAL, slo, qps).plan_
    there = Planner(n_ranges=1, seed=1).fit(PROFILE, LOCAL, slo, qps).plan_
    assert here is not None and there is not None
    assert (len(here.devices), here.gears[-1].models) == (1, ("m1",))
    assert (len(there.devices), there.gears[-1].models) == (2, ("m1", "m2"))
    assert there.gears[-1].predicted_accuracy == pytest.approx(0.9985)
    _placed_apart(there)


def test_a_fixed_plan_puts_the_upstream_stage_on_its_own_device_once() -> None:
    plan = fixed_plan(PROFILE, Cascade(("m0", "m2"), (0.5,)), LOCAL)
    assert [d.name for d in plan.devices] == ["dev0", "upstream-m2"]
    _placed_apart(plan)
    again = fixed_plan(PROFILE, Cascade(("m0", "m2"), (0.5,)), plan.devices)  # a re-plan passes the plan's devices
    assert again.devices == plan.devices
    assert with_upstream_devices(make_toy_profile(), LOCAL) == tuple(LOCAL)  # no upstream stage: nothing added


def test_a_plan_that_puts_a_local_model_on_an_upstream_device_is_refused() -> None:
    plan = fixed_plan(PROFILE, Cascade(("m0", "m2"), (0.5,)), LOCAL)
    bad = plan.model_copy(
        update={"replicas": (*plan.replicas, plan.replicas[0].model_copy(update={"device": "upstream-m2"}))}
    )
    with pytest.raises(
        PlanError, match="device 'upstream-m2' stands for upstream stage 'm2' and holds only it, not m0"
    ):
        bad.check_against(PROFILE)


def test_placement_keeps_a_model_where_it_is_allowed() -> None:
    load = Load({"a": 10.0, "b": 10.0}, {"a": 0.01, "b": 0.01})
    reps = place_replicas({"a": 10.0, "b": 10.0}, [100.0, 100.0], [load], allowed=lambda m, d: (m == "b") == (d == 1))
    assert reps == [("a", 0), ("b", 1)]


def test_the_profile_file_keeps_the_upstream_mark(tmp_path) -> None:  # type: ignore[no-untyped-def]
    save_profile(PROFILE, tmp_path / "p")
    back = load_profile(tmp_path / "p")
    assert [m.upstream for m in back.models] == [False, False, True]
    text = (tmp_path / "p" / "profile.yaml").read_text()
    (tmp_path / "p" / "profile.yaml").write_text(text.replace("upstream: true", "upstream: maybe"))
    with pytest.raises(ProfileError, match="model 'm2': upstream must be true or false"):
        load_profile(tmp_path / "p")


def test_the_static_fallback_keeps_the_upstream_device() -> None:
    """A load no gear plan carries on one device: the static floor's plan still gives m2 its own device."""
    planner = Planner(n_ranges=2, seed=1)
    plan = planner.fit(
        PROFILE,
        LOCAL,
        SLO(kind="p95_ms", value=8.0),
        2000.0,
        check_arrivals=np.sort(np.random.default_rng(0).uniform(0, 5, 4000)),
    ).plan_
    assert plan is not None
    assert any(d.upstream == "m2" for d in plan.devices)
    _placed_apart(plan)
