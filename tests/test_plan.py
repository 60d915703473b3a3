"""Gear plans: JSON round trip, validation with clear errors, checks against a profile, ``fixed_plan``, and
reading schema-1 files (replicas keyed by ``"model@device"``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cascadeserve.cascade import Cascade
from cascadeserve.errors import PlanError
from cascadeserve.plan import (
    SCHEMA_VERSION,
    SLO,
    Device,
    Gear,
    GearPlan,
    GearReplica,
    Replica,
    fixed_plan,
    load_plan,
)
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve


def abc_profile(memory: tuple[float, float, float] = (100.0, 300.0, 600.0)) -> Profile:
    models = tuple(
        ModelProfile(name, mem, RuntimeCurve((1,), (float(i + 1),)))
        for i, (name, mem) in enumerate(zip("abc", memory, strict=True))
    )
    return Profile(
        "abc",
        models,
        np.arange(2),
        np.array([0, 1]),
        np.zeros((3, 2), dtype=np.int64),
        np.full((3, 2), 0.5),
    )


BASE: dict[str, Any] = {
    "schema_version": 2,
    "profile": "abc",
    "devices": [
        {"name": "d0", "memory_mb": 1000.0, "kind": "gpu"},
        {"name": "d1", "memory_mb": 500.0},
    ],
    "replicas": [
        {"model": "a", "device": "d0"},
        {"model": "b", "device": "d0"},
        {"model": "a", "device": "d1"},
        {"model": "b", "device": "d1"},
    ],
    "gears": [
        {
            "qps_low": 0.0,
            "qps_high": 50.0,
            "models": ["a", "b"],
            "thresholds": [0.6],
            "replicas": [
                {"model": "a", "device": "d0", "min_queue": 1, "share": 0.5},
                {"model": "a", "device": "d1", "min_queue": 2, "share": 0.5},
                {"model": "b", "device": "d0", "min_queue": 1, "share": 0.25},
                {"model": "b", "device": "d1", "min_queue": 3, "share": 0.75},
            ],
            "predicted_p95_ms": 12.5,
            "predicted_accuracy": 0.91,
        },
        {
            "qps_low": 50.0,
            "qps_high": 100.0,
            "models": ["a"],
            "replicas": [
                {"model": "a", "device": "d0", "min_queue": 4, "share": 0.25},
                {"model": "a", "device": "d1", "min_queue": 8, "share": 0.75},
            ],
        },
    ],
    "slo": {"kind": "p95_ms", "value": 200.0},
    "alpha": 4.0,
    "max_wait_ms": 50.0,
    "max_batch": 32,
    "notes": {"by": "hand"},
}


def base() -> dict[str, Any]:
    return copy.deepcopy(BASE)


def base_v1() -> dict[str, Any]:
    """``BASE`` as schema 1 wrote it: each gear's replicas keyed by ``"model@device"``."""
    raw = base()
    raw["schema_version"] = 1
    for g in raw["gears"]:
        g["replicas"] = {f"{r.pop('model')}@{r.pop('device')}": r for r in g["replicas"]}
    return raw


def test_plan_fields_and_derived_views() -> None:
    plan = GearPlan.model_validate(base())
    assert plan.schema_version == SCHEMA_VERSION == 3
    assert plan.devices[0] == Device(name="d0", memory_mb=1000.0, kind="gpu")
    assert plan.devices[1].kind == "cpu"
    assert [r.id for r in plan.replicas] == ["a@d0", "b@d0", "a@d1", "b@d1"]
    assert plan.replica_index == {"a@d0": 0, "b@d0": 1, "a@d1": 2, "b@d1": 3}
    assert plan.device_index == {"d0": 0, "d1": 1}
    assert plan.models() == ("a", "b")
    assert plan.max_qps == 100.0
    g0 = plan.gears[0]
    assert g0.cascade == Cascade(("a", "b"), (0.6,))
    assert g0.replicas[3] == GearReplica(model="b", device="d1", min_queue=3, share=0.75)
    assert g0.replica("b", "d1") is g0.replicas[3]
    assert g0.replicas[3].id == "b@d1"
    assert [r.id for r in g0.replicas_of("a")] == ["a@d0", "a@d1"]
    assert g0.replicas_of("c") == ()
    assert plan.gears[1].replicas_of("b") == ()
    with pytest.raises(KeyError, match="gear 0-50 QPS has no replica of 'b' on 'd7'"):
        g0.replica("b", "d7")
    assert plan.gears[1].thresholds == ()
    assert plan.slo == SLO(kind="p95_ms", value=200.0)
    assert str(plan.slo) == "p95 ≤ 200 ms"
    assert str(SLO(kind="accuracy", value=0.9)) == "accuracy ≥ 0.9"
    assert (plan.alpha, plan.tick_ms, plan.max_wait_ms, plan.max_batch, plan.qps_scale) == (4.0, 100.0, 50.0, 32, 1.0)


def test_json_round_trip_is_equal(tmp_path: Path) -> None:
    plan = GearPlan.model_validate(base())
    _ = plan.replica_index  # a cached view must not spoil equality
    again = GearPlan.from_json(plan.to_json())
    assert again == plan
    assert again.to_json() == plan.to_json()
    assert json.loads(plan.to_json(indent=None)) == json.loads(plan.to_json())
    path = plan.save(tmp_path / "plan.json")
    assert path.read_text(encoding="utf-8").endswith("}\n")
    assert load_plan(path) == plan
    assert load_plan(path, abc_profile()) == plan


def test_save_to_a_missing_folder_is_a_plan_error(tmp_path: Path) -> None:
    plan = GearPlan.model_validate(base())
    target = tmp_path / "no" / "such" / "plan.json"
    with pytest.raises(PlanError) as info:
        plan.save(target)
    assert str(info.value) == f"{target}: cannot write the plan: No such file or directory"


def test_plan_is_frozen() -> None:
    plan = GearPlan.model_validate(base())
    with pytest.raises(Exception, match="frozen"):
        plan.alpha = 1.0  # type: ignore[misc]


def _invalid(mutate: Any) -> str:
    raw = base()
    mutate(raw)
    with pytest.raises(PlanError) as info:
        GearPlan.from_json(json.dumps(raw))
    return info.value.message


def _set(path: list[str | int], value: Any) -> Any:
    def go(raw: Any) -> None:
        node = raw
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return go


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (
            ["gears", 0, "replicas", 3, "share"],
            0.5,
            "gears.0: the shares of model 'b''s replicas sum to 0.75, not 1",
        ),
        (["gears", 1, "qps_low"], 60.0, "plan: gear ranges must be contiguous: 50 is followed by 60"),
        (["gears", 0, "qps_low"], 5.0, "plan: the first gear must start at qps_low = 0"),
        (["gears", 1, "qps_high"], 50.0, "gears.1: qps_high (50.0) must exceed qps_low (50.0)"),
        (["gears", 0, "thresholds"], [0.6, 0.7], "gears.0: a cascade of 2 models needs 1 thresholds, got 2"),
        (["gears", 0, "thresholds"], [1.5], "gears.0: threshold 1.5 is outside [0, 1]"),
        (["gears", 0, "replicas", 0, "min_queue"], 0, "gears.0.replicas.0.min_queue:"),
        (["gears", 0, "replicas", 0, "share"], 1.5, "gears.0.replicas.0.share:"),
        (["gears", 0, "replicas", 0, "model"], "", "gears.0.replicas.0.model:"),
        (["gears", 0, "replicas", 0, "device"], "d1", "gears.0: replica 'a@d1' is listed twice"),
        (["gears", 0, "replicas"], {"a@d0": {"share": 1.0}}, "gears.0.replicas: Input should be a valid tuple"),
        (["devices", 1, "name"], "d0", "plan: device names must be unique"),
        (["devices", 0, "memory_mb"], 0, "devices.0.memory_mb:"),
        (["replicas", 3, "device"], "d9", "plan: replica 'b@d9' is on unknown device 'd9'"),
        (["replicas", 3, "model"], "a", "plan: a model has two replicas on one device"),
        (["slo", "kind"], "latency", "slo.kind:"),
        (["alpha"], -1, "alpha:"),
        (["surprise"], 1, "surprise: Extra inputs are not permitted"),
        (["gears"], [], "gears:"),
    ],
)
def test_invalid_plans_are_rejected_with_the_place_named(path: list[str | int], value: Any, expected: str) -> None:
    assert _invalid(_set(path, value)).startswith(expected)


def test_unknown_replica_in_a_gear() -> None:
    def go(raw: Any) -> None:
        raw["gears"][1]["replicas"][1]["device"] = "d7"

    assert _invalid(go) == "plan: gear 50-100 QPS names unknown replica 'a@d7'"


def test_gear_replica_for_a_model_outside_the_cascade() -> None:
    def go(raw: Any) -> None:
        raw["gears"][1]["replicas"].append({"model": "b", "device": "d0", "share": 1.0})

    assert _invalid(go) == "gears.1: replica 'b@d0' serves a model that is not in this gear's cascade"


def test_bad_schema_version() -> None:
    with pytest.raises(PlanError, match=r"unsupported schema_version 4; this cascadeserve reads versions 1, 2, 3"):
        GearPlan.from_json(json.dumps({**base(), "schema_version": 4}))
    with pytest.raises(PlanError, match=r"unsupported schema_version '1'"):
        GearPlan.from_json(json.dumps({**base(), "schema_version": "1"}))


# -- schema 1 -----------------------------------------------------------------------------------------------
def test_a_schema_1_file_loads_as_the_structured_plan(tmp_path: Path) -> None:
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(base_v1()), encoding="utf-8")
    plan = load_plan(path, abc_profile())
    assert plan == GearPlan.model_validate(base())
    assert plan.schema_version == 3
    assert plan.gears[0].replica("a", "d1") == GearReplica(model="a", device="d1", min_queue=2, share=0.5)
    assert GearPlan.model_validate(base_v1()) == plan  # model validation reads schema 1 too


def test_a_schema_1_plan_is_written_back_as_schema_3(tmp_path: Path) -> None:
    plan = GearPlan.from_json(json.dumps(base_v1()))
    written = json.loads(plan.save(tmp_path / "v3.json").read_text(encoding="utf-8"))
    assert written["schema_version"] == 3
    assert written["gears"][1]["replicas"] == [
        {"model": "a", "device": "d0", "min_queue": 4, "share": 0.25, "max_batch": None},
        {"model": "a", "device": "d1", "min_queue": 8, "share": 0.75, "max_batch": None},
    ]
    assert load_plan(tmp_path / "v3.json") == plan


# -- schema 2 and 3: per-replica batch caps ---------------------------------------------------------------------
def test_a_schema_2_plan_loads_with_no_per_replica_cap(tmp_path: Path) -> None:
    raw = {**base(), "schema_version": 2}
    plan = GearPlan.from_json(json.dumps(raw))
    assert plan.schema_version == 3 and plan == GearPlan.model_validate(base())
    assert all(gr.max_batch is None for g in plan.gears for gr in g.replicas)
    assert plan.gears[0].replicas[0].cap(plan.max_batch) == 32  # only the plan-wide cap applies


def test_a_per_replica_cap_round_trips_and_the_smaller_cap_applies(tmp_path: Path) -> None:
    raw = base()
    raw["gears"][1]["replicas"][0]["max_batch"] = 8
    raw["gears"][1]["replicas"][1]["max_batch"] = 64
    plan = GearPlan.model_validate(raw)
    assert load_plan(plan.save(tmp_path / "p.json")) == plan
    a0, a1 = plan.gears[1].replicas[0], plan.gears[1].replicas[1]
    assert (a0.cap(plan.max_batch), a1.cap(plan.max_batch), a1.cap(None)) == (8, 32, 64)
    raw["gears"][1]["replicas"][0]["max_batch"] = 0
    with pytest.raises(PlanError, match="max_batch"):
        GearPlan.from_json(json.dumps(raw))


def test_a_plan_without_schema_version_is_read_by_its_shape() -> None:
    v1, v2 = base_v1(), base()
    del v1["schema_version"], v2["schema_version"]
    assert GearPlan.from_json(json.dumps(v1)) == GearPlan.from_json(json.dumps(v2)) == GearPlan.model_validate(base())


@pytest.mark.parametrize("key", ["a-d0", "@d0", "a@", ""])
def test_a_malformed_schema_1_key_is_named(tmp_path: Path, key: str) -> None:
    raw = base_v1()
    raw["gears"][1]["replicas"] = {key: {"share": 1.0}}
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(PlanError) as info:
        load_plan(path)
    assert str(info.value) == (
        f"{path}: gears.1.replicas: key {key!r} is not of the form 'model@device' "
        "(schema-1 plans key each gear's replicas by model@device)"
    )


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda raw: raw["gears"][0]["replicas"]["b@d1"].update(share=0.5),
            "gears.0: the shares of model 'b''s replicas sum to 0.75, not 1",
        ),
        (
            lambda raw: raw["gears"][1]["replicas"].update({"a@d7": raw["gears"][1]["replicas"].pop("a@d1")}),
            "plan: gear 50-100 QPS names unknown replica 'a@d7'",
        ),
        (
            lambda raw: raw["gears"][1]["replicas"].update({"b@d0": {"share": 1.0}}),
            "gears.1: replica 'b@d0' serves a model that is not in this gear's cascade",
        ),
        (
            lambda raw: raw["gears"][0]["replicas"]["a@d0"].update(min_queue=0),
            "gears.0.replicas.0.min_queue: Input should be greater than or equal to 1",
        ),
        (
            lambda raw: raw["gears"][0]["replicas"].update({"a@d0": 1}),
            "gears.0.replicas.0: Input should be a valid dictionary or instance of GearReplica",
        ),
    ],
)
def test_schema_1_validation_messages(mutate: Any, expected: str) -> None:
    raw = base_v1()
    mutate(raw)
    with pytest.raises(PlanError) as info:
        GearPlan.from_json(json.dumps(raw))
    assert info.value.message == expected


def test_malformed_json_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text('{\n  "profile": "abc",\n  oops\n}\n', encoding="utf-8")
    with pytest.raises(PlanError) as info:
        load_plan(path)
    e = info.value
    assert (e.path, e.line, e.column) == (str(path), 3, 3)
    assert str(e) == f"{path}, line 3, column 3: invalid JSON: Expecting property name enclosed in double quotes"


def test_missing_plan_file(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="plan file does not exist"):
        load_plan(tmp_path / "none.json")


def test_validation_errors_through_load_plan_name_the_file(tmp_path: Path) -> None:
    raw = base()
    raw["gears"][1]["qps_low"] = 40.0
    path = tmp_path / "p.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(PlanError) as info:
        load_plan(path)
    assert str(info.value) == f"{path}: plan: gear ranges must be contiguous: 50 is followed by 40"


# -- against a profile --------------------------------------------------------------------------------------
def test_unknown_model_against_a_profile(tmp_path: Path) -> None:
    plan = GearPlan.model_validate(base())
    prof = Profile(
        "ac",
        (abc_profile().models[0], abc_profile().models[2]),
        np.arange(2),
        np.array([0, 1]),
        np.zeros((2, 2), dtype=np.int64),
        np.full((2, 2), 0.5),
    )
    with pytest.raises(PlanError) as info:
        plan.check_against(prof)
    assert info.value.message == "replica 'b@d0' names model 'b', which profile 'ac' does not have (it has a, c)"
    path = plan.save(tmp_path / "plan.json")
    with pytest.raises(PlanError, match=r"plan\.json: replica 'b@d0' names model 'b'"):
        load_plan(path, prof)


def test_memory_overfill_names_the_device(tmp_path: Path) -> None:
    raw = base()
    raw["devices"][1]["memory_mb"] = 350.0  # a (100) + b (300) = 400 on d1
    plan = GearPlan.model_validate(raw)
    with pytest.raises(PlanError) as info:
        plan.check_against(abc_profile())
    assert info.value.message == "device 'd1' is overfilled: its replicas (a, b) need 400 MB but it has 350 MB"
    path = plan.save(tmp_path / "plan.json")
    with pytest.raises(PlanError) as info:
        load_plan(path, abc_profile())
    assert str(info.value).startswith(f"{path}: device 'd1' is overfilled")
    raw["devices"][1]["memory_mb"] = 400.0  # exactly full is fine
    GearPlan.model_validate(raw).check_against(abc_profile())


# -- fixed_plan ---------------------------------------------------------------------------------------------
def test_fixed_plan_puts_every_model_on_every_device_with_an_even_split() -> None:
    prof = abc_profile()
    devices = [Device(name=f"g{i}", memory_mb=1000.0) for i in range(3)]
    plan = fixed_plan(prof, Cascade(("a", "b", "c"), (0.7, 0.5)), devices)
    assert [r.id for r in plan.replicas] == ["a@g0", "b@g0", "c@g0", "a@g1", "b@g1", "c@g1", "a@g2", "b@g2", "c@g2"]
    assert len(plan.gears) == 1
    gear = plan.gears[0]
    assert (gear.qps_low, gear.qps_high) == (0.0, 1e9)
    assert gear.cascade == Cascade(("a", "b", "c"), (0.7, 0.5))
    assert [(rg.model, rg.device) for rg in gear.replicas] == [(r.model, r.device) for r in plan.replicas]
    assert all((rg.min_queue, rg.share) == (1, 1 / 3) for rg in gear.replicas)
    assert plan.profile == "abc"
    assert plan.devices == tuple(devices)
    assert (plan.slo, plan.max_wait_ms, plan.max_batch, plan.alpha) == (None, None, None, 8.0)
    plan.check_against(prof)
    assert GearPlan.from_json(plan.to_json()) == plan


def test_fixed_plan_fills_devices_in_cascade_order() -> None:
    prof = abc_profile()
    devices = [Device(name="big", memory_mb=1000.0), Device(name="small", memory_mb=500.0)]
    plan = fixed_plan(prof, Cascade(("a", "b", "c"), (0.7, 0.5)), devices)
    # small takes a (100) and b (300); c (600) no longer fits there
    assert [r.id for r in plan.replicas] == ["a@big", "b@big", "c@big", "a@small", "b@small"]
    shares = {rg.id: rg.share for rg in plan.gears[0].replicas}
    assert shares == {"a@big": 0.5, "b@big": 0.5, "c@big": 1.0, "a@small": 0.5, "b@small": 0.5}
    plan.check_against(prof)


def test_fixed_plan_only_places_cascade_models_and_passes_options() -> None:
    prof = abc_profile()
    slo = SLO(kind="accuracy", value=0.8)
    plan = fixed_plan(
        prof,
        Cascade(("c",)),
        [Device(name="d", memory_mb=600.0)],
        max_qps=250.0,
        min_queue=4,
        slo=slo,
        max_wait_ms=20.0,
        max_batch=16,
    )
    assert plan.replicas == (Replica(model="c", device="d"),)
    assert plan.gears[0].replicas == (GearReplica(model="c", device="d", min_queue=4, share=1.0),)
    assert plan.gears[0].qps_high == 250.0
    assert (plan.slo, plan.max_wait_ms, plan.max_batch) == (slo, 20.0, 16)


def test_fixed_plan_errors() -> None:
    prof = abc_profile()
    with pytest.raises(PlanError, match="model 'c' needs 600 MB and fits on no device"):
        fixed_plan(prof, Cascade(("a", "c"), (0.5,)), [Device(name="d", memory_mb=599.0)])
    with pytest.raises(KeyError, match="unknown model 'z'"):
        fixed_plan(prof, Cascade(("a", "z"), (0.5,)), [Device(name="d", memory_mb=1000.0)])


def test_gear_built_in_python_validates_like_json() -> None:
    with pytest.raises(ValueError, match=r"sum to 0\.5, not 1"):
        Gear(qps_low=0, qps_high=1, models=("a",), replicas=(GearReplica(model="a", device="d", share=0.5),))


def test_a_schema_1_plan_without_gears_says_so() -> None:
    raw = base_v1()
    del raw["gears"]
    with pytest.raises(PlanError) as info:
        GearPlan.from_json(json.dumps(raw))
    assert info.value.message == "gears: Field required"


def test_audit_fraction_is_optional_and_checked() -> None:
    assert GearPlan.model_validate(base()).audit_fraction == 0.0  # a plan written before the field loads as 0
    assert GearPlan.model_validate({**base(), "audit_fraction": 0.05}).audit_fraction == 0.05
    with pytest.raises(PlanError, match="audit_fraction"):
        GearPlan.from_json(json.dumps({**base(), "audit_fraction": 1.5}))
