"""``cascadeserve eval fidelity``: the simulator against ``serve --emulate`` over real HTTP, with calibration."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tests.cli_json import stdout_json

from cascadeserve.cascade import Cascade
from cascadeserve.cli import run
from cascadeserve.eval.fidelity import Overheads
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import Profile, save_profile
from cascadeserve.simulate import SimResult


def test_fidelity_reports_exact_accuracy_and_calibrated_errors(
    toy_profile: Profile, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prof_dir = save_profile(toy_profile, tmp_path / "toy")
    plan = fixed_plan(toy_profile, Cascade(("m0", "m1"), (0.3,)), [Device(name="d0", memory_mb=1000)], max_wait_ms=5)
    plan_path = plan.save(tmp_path / "plan.json")
    args = ["eval", "fidelity", "--profile", str(prof_dir), "--plan", str(plan_path)]
    rc = run([*args, "--trace", "synthetic:poisson:qps=40,duration=2", "--calibration-requests", "100", "--json"])
    assert rc == 0
    out = stdout_json(capsys)
    over = out["overheads_ms"]
    assert over["batch_ms"] >= 0 and over["request_ms"] >= 0
    (row,) = out["plans"]
    assert row["requests"] > 0 and row["errors"] == 0 and row["shed"] == 0
    # The same samples and the same decisions: accuracy is exact, whatever the clock does.
    assert row["accuracy_error_points"] == 0.0
    assert over["batch_p95_ms"] >= over["batch_ms"] and over["samples"] > 0
    assert row["calibrated_sim_p95_ms"] > 0 and row["calibrated_server_p95_error"] is not None


def _sim(latency_ms: list[float], stages: list[int]) -> SimResult:
    n = len(latency_ms)
    z = np.zeros(0)
    return SimResult(
        arrivals=np.zeros(n),
        finish=np.asarray(latency_ms) / 1000.0,
        answer_row=np.zeros(n, dtype=np.int64),
        answer_stage=np.asarray(stages, dtype=np.int64) - 1,
        gear=np.zeros(n, dtype=np.int64),
        correct=np.ones(n, dtype=bool),
        tick_times=z,
        tick_qps=z,
        tick_gear=z,
        tick_q0=z,
        tick_busy=np.zeros((0, 1)),
        wall_s=0.0,
    )


def test_constant_overheads_shift_only_the_client_side() -> None:
    over = Overheads(batch_samples_ms=np.full(50, 0.4), request_samples_ms=np.full(50, 1.5))
    lat = [float(i) for i in range(100)]
    server, client = over.predict_p95_ms(_sim(lat, [1] * 50 + [3] * 50))
    # the median batch overhead is already in the simulation: a constant one adds no deviation
    assert server == pytest.approx(float(np.percentile(lat, 95)))
    assert client == pytest.approx(server + 1.5)


def test_every_stage_a_request_passed_draws_its_own_batch_deviation() -> None:
    over = Overheads(batch_samples_ms=np.array([0.0, 10.0, 5.0]), request_samples_ms=np.zeros(3))
    one, _ = over.predict_p95_ms(_sim([0.0] * 2000, [1] * 2000))
    two, _ = over.predict_p95_ms(_sim([0.0] * 2000, [2] * 2000))
    assert one == pytest.approx(5.0)  # deviations -5, 0, +5: over 5% of requests draw +5
    assert two == pytest.approx(10.0)  # the sum of two draws reaches +10 for 1 in 9


def test_a_calibration_run_that_answered_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="answered no request"):
        Overheads(batch_samples_ms=np.zeros(0), request_samples_ms=np.zeros(0))
