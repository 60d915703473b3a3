"""The runtime's per-batch overhead: measured in-process on the real clock, recorded with the profile, charged."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.cli_json import stdout_json

from cascadeserve.cascade import Cascade
from cascadeserve.cli import run
from cascadeserve.eval.overhead import measure_batch_overhead
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import Profile, load_profile, record_batch_overhead, save_profile


def test_the_overhead_is_measured_and_recorded_with_the_profile(toy_profile: Profile, tmp_path: Path) -> None:
    got = measure_batch_overhead(toy_profile, seconds=0.3)
    assert got.samples > 0 and got.model == "m0" and 0.0 <= got.median_ms <= got.p95_ms < 1000.0
    d = save_profile(toy_profile, tmp_path / "toy")
    record_batch_overhead(d, 0.25)
    again = load_profile(d)
    assert again.batch_overhead_ms == 0.25 and again.model_names == toy_profile.model_names
    record_batch_overhead(d, 0.5)  # recording again replaces the value
    assert load_profile(d).batch_overhead_ms == 0.5


def test_simulate_charges_the_profiles_overhead_when_the_plan_carries_none(
    toy_profile: Profile, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = save_profile(toy_profile, tmp_path / "toy")
    plan = fixed_plan(toy_profile, Cascade(("m0",), ()), [Device(name="d0", memory_mb=1000)])
    path = plan.save(tmp_path / "plan.json")
    args = ["simulate", "--profile", str(d), "--plan", str(path), "--trace", "synthetic:constant:qps=50,duration=2"]
    assert run([*args, "--json"]) == 0
    before = stdout_json(capsys)
    record_batch_overhead(d, 2.0)
    assert run([*args, "--json"]) == 0
    after = stdout_json(capsys)
    assert (before["batch_overhead_ms"], after["batch_overhead_ms"]) == (0.0, 2.0)
    assert after["p50_ms"] > before["p50_ms"] + 1.5
    assert run([*args, "--batch-overhead-ms", "0"]) == 0
