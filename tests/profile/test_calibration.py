"""Calibration: runtimes scaled by measured factors, recorded in profile.yaml and in the plans made from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from cascadeserve.plan import SLO, Device
from cascadeserve.planner import Planner
from cascadeserve.profile import calibrate, costs_note, load_profile, save_profile
from cascadeserve.profile.slowdown import Slowdown, Slowdowns

PROFILE = Path(__file__).resolve().parents[1] / "data" / "profiles" / "tweets-sklearn"


def test_calibrate_scales_named_models_and_round_trips(tmp_path: Path) -> None:
    prof = load_profile(PROFILE)
    assert prof.calibration == ""
    cal = calibrate(prof, {"lr-chars": 2.0, "nb-words": 1.5}, source="http://127.0.0.1:1 (99 batches)")
    for m, f in (("lr-chars", 2.0), ("nb-words", 1.5), ("lr-words", 1.0)):
        before, after = prof.model(m).runtime, cal.model(m).runtime
        assert after.batch_sizes == before.batch_sizes
        assert after.ms == pytest.approx(tuple(v * f for v in before.ms))
    assert cal.calibration == "runtimes lr-chars x2, nb-words x1.5 as measured on http://127.0.0.1:1 (99 batches)"
    back = load_profile(save_profile(cal, tmp_path / "cal"))
    assert back.calibration == cal.calibration
    assert back.model("lr-chars").runtime.ms == pytest.approx(cal.model("lr-chars").runtime.ms)
    again = calibrate(back, {"lr-chars": 1.1}, source="later")
    assert again.calibration.endswith("; before that: " + cal.calibration)


def test_busy_factors_are_set_afresh_and_round_trip(tmp_path: Path) -> None:
    prof = load_profile(PROFILE)
    cal = calibrate(prof, {"lr-chars": 1.5}, source="here", busy={"lr-chars": 1.8, "nb-words": 1.2})
    assert cal.model("lr-chars").busy_factor == 1.8 and cal.model("lr-words").busy_factor == 1.0
    assert cal.calibration == (
        "runtimes lr-chars x1.5; busy factors lr-chars x1.8, nb-words x1.2 (slower with every other device busy)"
        " as measured on here"
    )
    back = load_profile(save_profile(cal, tmp_path / "cal"))
    assert [m.busy_factor for m in back.models] == [m.busy_factor for m in cal.models]
    again = calibrate(back, {}, source="later", busy={"lr-chars": 1.3})  # measured afresh, not multiplied
    assert again.model("lr-chars").busy_factor == 1.3 and again.model("nb-words").busy_factor == 1.2
    with pytest.raises(ValueError, match="busy factor of model 'lr-chars' must be a number >= 1"):
        calibrate(prof, {}, source="x", busy={"lr-chars": 0.5})


def test_calibrate_refuses_unknown_models_and_bad_factors() -> None:
    prof = load_profile(PROFILE)
    with pytest.raises(ValueError, match="not in profile"):
        calibrate(prof, {"nope": 2.0}, source="x")
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="lr-chars"):
            calibrate(prof, {"lr-chars": bad}, source="x")


def test_plans_say_which_costs_they_were_made_with() -> None:
    prof = load_profile(PROFILE)
    devices = (Device(name="dev0", memory_mb=1000),)
    plain = Planner(n_ranges=2, sim_requests=300).fit(prof, devices, SLO(kind="p95_ms", value=50), 100).plan_
    assert plain is not None
    assert plain.notes["costs"] == costs_note(prof)
    assert "not calibrated" in plain.notes["costs"]
    cal = calibrate(prof, {"lr-chars": 3.0}, source="a bench run")
    plan = Planner(n_ranges=2, sim_requests=300).fit(cal, devices, SLO(kind="p95_ms", value=50), 100).plan_
    assert plan is not None
    assert plan.notes["costs"] == "profile 'tweets-sklearn' calibrated: runtimes lr-chars x3 as measured on a bench run"


def test_slowdown_specs_and_per_model_factors() -> None:
    s = Slowdown.parse("model=lr-chars,at=30,factor=2")
    assert s == Slowdown("*", 30.0, 2.0, "lr-chars")
    assert Slowdown.parse("device=dev1, at=0, factor=1.5") == Slowdown("dev1", 0.0, 1.5, None)
    sched = Slowdowns.of(s, Slowdown("dev1", 10.0, 3.0))
    assert sched.factor("dev0", 29.0, "lr-chars") == 1.0
    assert sched.factor("dev0", 30.0, "lr-chars") == 2.0
    assert sched.factor("dev0", 30.0, "nb-words") == 1.0
    assert sched.factor("dev1", 30.0, "nb-words") == 3.0
    assert sched.factor("dev1", 30.0, "lr-chars") == 2.0  # the latest step that applies wins
    assert sched.shifted(100.0).factor("dev0", 130.0, "lr-chars") == 2.0
    for bad in ("at=1", "factor=2", "at=x,factor=2", "at=1,factor=0", "speed=1,at=1,factor=2", "at=1,at=2,factor=2"):
        with pytest.raises(ValueError, match="at"):
            Slowdown.parse(bad)


def test_factors_per_batch_size_scale_each_point_of_the_curve(tmp_path: Path) -> None:
    """Measured at batches of 1 and 4: the points between are interpolated, the ones past 4 keep 4's factor, and a
    model given sizes ignores its single factor."""
    prof = load_profile(PROFILE)
    before = prof.model("lr-chars").runtime
    cal = calibrate(prof, {"lr-chars": 9.0, "nb-words": 1.5}, source="here", sizes={"lr-chars": {1: 1.2, 4: 1.8}})
    after = cal.model("lr-chars").runtime
    want = {1: 1.2, 2: 1.4, 4: 1.8, 8: 1.8, 64: 1.8}
    for b, f in want.items():
        i = before.batch_sizes.index(b)
        assert after.ms[i] == pytest.approx(before.ms[i] * f)
    assert cal.model("nb-words").runtime.ms == pytest.approx(tuple(v * 1.5 for v in prof.model("nb-words").runtime.ms))
    line = "runtimes lr-chars by batch size 1:x1.2 4:x1.8, nb-words x1.5 as measured on here"
    assert cal.calibration == line
    back = load_profile(save_profile(cal, tmp_path / "cal"))
    assert back.model("lr-chars").runtime.ms == pytest.approx(after.ms)
    with pytest.raises(ValueError, match="batch size factors of model 'lr-chars'"):
        calibrate(prof, {}, source="here", sizes={"lr-chars": {0: 1.2}})
    with pytest.raises(ValueError, match="not in profile"):
        calibrate(prof, {}, source="here", sizes={"nope": {1: 1.2}})
