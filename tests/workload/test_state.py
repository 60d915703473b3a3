"""The state folder's hashes: a step is up to date until its inputs change or its output is rewritten."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from cascadeserve.profile import Profile, save_profile
from cascadeserve.workload import StateDir, load_workload

WORKLOAD = """\
name: toy
models: models.yaml
validation: val.csv
devices: {count: 1, memory_mb: 1000}
slo: {p95_ms: 50}
max_qps: 100
"""
MODELS = "models:\n  - {name: m0, adapter: sklearn, ref: m0.pkl}\n"


def _workload(d: Path, body: str = WORKLOAD) -> StateDir:
    (d / "cascadeserve.yaml").write_text(body)
    return StateDir.of(load_workload(d))


def _touch_later(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_profile_and_plan_go_stale_on_their_inputs_and_outputs(toy_profile: Profile, tmp_path: Path) -> None:
    (tmp_path / "models.yaml").write_text(MODELS)
    (tmp_path / "m0.pkl").write_bytes(b"weights")
    (tmp_path / "val.csv").write_text("sample_id,label,x\n0,1,0.5\n")
    state = _workload(tmp_path)
    assert state.root == tmp_path / ".cascadeserve"
    assert not state.up_to_date("profile") and not state.up_to_date("plan")  # nothing made yet

    save_profile(toy_profile, state.measured)
    state.record("profile")
    state.plan.write_text("{}")
    state.record("plan")
    assert state.up_to_date("profile") and state.up_to_date("plan")

    _touch_later(tmp_path / "m0.pkl")  # a model file the config names changed
    assert not state.up_to_date("profile")
    state.record("profile")
    (tmp_path / "val.csv").write_text("sample_id,label,x\n0,0,0.5\n")  # the validation data changed
    assert not state.up_to_date("profile")
    state.record("profile")
    assert state.up_to_date("profile") and state.up_to_date("plan")  # the profile's output is the same files

    state = _workload(tmp_path, WORKLOAD.replace("p95_ms: 50", "p95_ms: 60"))  # another SLO: plan again
    assert state.up_to_date("profile") and not state.up_to_date("plan")
    state.record("plan")
    state.plan.write_text('{"rewritten": true}')  # something else rewrote the plan
    assert not state.up_to_date("plan")


def test_calibration_goes_stale_on_the_measured_profile_its_seconds_and_the_device_count(
    toy_profile: Profile, tmp_path: Path
) -> None:
    (tmp_path / "models.yaml").write_text(MODELS)
    (tmp_path / "m0.pkl").write_bytes(b"weights")
    (tmp_path / "val.csv").write_text("sample_id,label,x\n0,1,0.5\n")
    state = _workload(tmp_path)
    assert state.calibrating and state.measured == state.root / "profile-measured" != state.profile
    save_profile(toy_profile, state.measured)
    state.record("profile")
    assert not state.up_to_date("calibration")  # no calibrated profile yet
    save_profile(toy_profile, state.profile)
    state.record("calibration")
    state.plan.write_text("{}")
    state.record("plan")
    assert all(state.up_to_date(s) for s in ("profile", "calibration", "plan"))

    # calibrating longer: calibrate again, measure nothing again
    state = _workload(tmp_path, WORKLOAD + "profile: {calibrate_s: 20}\n")
    assert state.up_to_date("profile") and not state.up_to_date("calibration") and state.up_to_date("plan")
    state.record("calibration")
    state = _workload(tmp_path, WORKLOAD.replace("count: 1", "count: 2") + "profile: {calibrate_s: 20}\n")
    assert not state.up_to_date("calibration")  # served on another number of devices: other contention
    state.record("calibration")
    assert not state.up_to_date("plan")  # (the devices are the plan's input too)
    state.record("plan")

    save_profile(dataclasses.replace(toy_profile, name="remeasured"), state.measured)  # measured again
    assert not state.up_to_date("profile") and not state.up_to_date("calibration") and state.up_to_date("plan")
    state.record("profile")
    save_profile(dataclasses.replace(toy_profile, name="recalibrated"), state.profile)  # calibrated again
    state.record("calibration")
    assert not state.up_to_date("plan")  # planned from the old calibration

    off = _workload(tmp_path, WORKLOAD + "profile: {calibrate_s: 0}\n")  # off: measure straight into profile/
    assert not off.calibrating and off.measured == off.profile


def test_an_inline_models_config_is_written_with_absolute_file_refs(tmp_path: Path) -> None:
    inline = "models:\n  models:\n    - {name: m0, adapter: sklearn, ref: w/m0.pkl}"
    body = WORKLOAD.replace("models: models.yaml", inline)
    state = _workload(tmp_path, body)
    written = state.models_config()
    assert written == state.root / "models.yaml"
    assert f"ref: {tmp_path / 'w' / 'm0.pkl'}" in written.read_text()
    mtime = written.stat().st_mtime_ns
    assert state.models_config() == written and written.stat().st_mtime_ns == mtime  # unchanged: not rewritten


FACTORY = """\
from pathlib import Path

from cascadeserve.models.base import reads

WEIGHTS = Path(__file__).parent / "cache"


@reads(lambda file: [WEIGHTS / file])
def load(file):
    return (WEIGHTS / file).read_bytes()
"""


def test_a_factory_that_finds_its_file_elsewhere_is_stale_when_that_file_changes(
    toy_profile: Profile, tmp_path: Path
) -> None:
    """The pattern examples/sentences teaches: ``kwargs: {file: a.pkl}`` names a file the factory finds in a folder of
    its own. Retraining it (the file rewritten) makes the profile stale, through the factory's ``reads``; a kwargs
    value naming a file beside the models config counts too."""
    import sys

    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "a.pkl").write_bytes(b"v1")
    (tmp_path / "beside.bin").write_bytes(b"v1")
    (tmp_path / f"factory_{tmp_path.name}.py").write_text(FACTORY)
    module = f"factory_{tmp_path.name}"
    (tmp_path / "models.yaml").write_text(
        "models:\n"
        f"  - {{name: m0, adapter: sklearn, ref: '{module}:load', kwargs: {{file: a.pkl}}}}\n"
        f"  - {{name: m1, adapter: sklearn, ref: '{module}:load', kwargs: {{file: a.pkl, extra: beside.bin}}}}\n"
    )
    (tmp_path / "val.csv").write_text("sample_id,label,x\n0,1,0.5\n")
    sys.path.insert(0, str(tmp_path))
    try:
        state = _workload(tmp_path)
        save_profile(toy_profile, state.measured)
        state.record("profile")
        assert state.up_to_date("profile")
        assert state.stale_models() == []
        (tmp_path / "cache" / "a.pkl").write_bytes(b"v2, retrained")  # neither the config nor the module changed
        assert not state.up_to_date("profile")
        assert state.stale_models() == ["m0"]  # m1's kwargs (extra) are not its reads' arguments: it declares none
        state.record("profile")
        assert state.up_to_date("profile")
        _touch_later(tmp_path / "beside.bin")
        assert not state.up_to_date("profile")
        assert state.stale_models() == ["m1"]  # only m1 names it: m0 keeps its measurement
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(module, None)


def test_every_model_is_stale_when_what_they_share_changed_or_nothing_was_recorded_per_model(
    toy_profile: Profile, tmp_path: Path
) -> None:
    import json

    (tmp_path / "models.yaml").write_text(MODELS)
    (tmp_path / "m0.pkl").write_bytes(b"weights")
    (tmp_path / "val.csv").write_text("sample_id,label,x\n0,1,0.5\n")
    state = _workload(tmp_path)
    assert state.stale_models() is None  # never profiled
    save_profile(toy_profile, state.measured)
    state.record("profile")
    _touch_later(tmp_path / "m0.pkl")
    assert state.stale_models() == ["m0"]
    (tmp_path / "val.csv").write_text("sample_id,label,x\n0,0,0.5\n")  # the validation data: every model
    assert state.stale_models() is None
    state.record("profile")
    assert _workload(tmp_path, WORKLOAD + "profile: {repeats: 9}\n").stale_models() is None  # the options too
    save_profile(dataclasses.replace(toy_profile, name="rewritten"), state.measured)  # something else rewrote it
    assert state.stale_models() is None
    state.record("profile")
    doc = json.loads(state.state_file.read_text())
    del doc["profile"]["models"]  # recorded before the per-model keys
    state.state_file.write_text(json.dumps(doc))
    assert state.up_to_date("profile") and state.stale_models() is None
