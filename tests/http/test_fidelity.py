"""``cascadeserve eval fidelity``: the simulator against ``serve --emulate`` over real HTTP, with calibration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cascadeserve.cascade import Cascade
from cascadeserve.cli import run
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import Profile, save_profile


def test_fidelity_reports_exact_accuracy_and_calibrated_errors(
    toy_profile: Profile, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prof_dir = save_profile(toy_profile, tmp_path / "toy")
    plan = fixed_plan(toy_profile, Cascade(("m0", "m1"), (0.3,)), [Device(name="d0", memory_mb=1000)], max_wait_ms=5)
    plan_path = plan.save(tmp_path / "plan.json")
    args = ["eval", "fidelity", "--profile", str(prof_dir), "--plans", str(plan_path)]
    rc = run([*args, "--trace", "synthetic:poisson:qps=40,duration=2", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    over = out["overheads_ms"]
    assert over["batch_ms"] >= 0 and over["request_ms"] >= 0
    (row,) = out["plans"]
    assert row["requests"] > 0 and row["errors"] == 0 and row["shed"] == 0
    # The same samples and the same decisions: accuracy is exact, whatever the clock does.
    assert row["accuracy_error_points"] == 0.0
    # The calibrated simulation adds the measured overhead to every batch, so it predicts a higher p95.
    assert row["calibrated_sim_p95_ms"] >= row["sim_p95_ms"]
    assert row["calibrated_server_p95_error"] is not None
