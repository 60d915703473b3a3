"""``--workload FILE``: the workload's values are a command's defaults, and flags given on the command line win."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.cli_json import stdout_json

from cascadeserve.cli import run
from cascadeserve.cli.defaults import workload_values
from cascadeserve.profile import Profile, save_profile
from cascadeserve.workload import StateDir, load_workload

WORKLOAD = """\
name: toy
models: models.yaml
validation: digits
devices: {count: 2, memory_mb: 1000}
slo: {p95_ms: 60}
max_qps: 80
plan: {ranges: 3}
"""


def test_plan_simulate_and_show_take_the_workload_and_flags_win(
    toy_profile: Profile, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = tmp_path / "cascadeserve.yaml"
    w.write_text(WORKLOAD)
    state = StateDir.of(load_workload(w))
    save_profile(toy_profile, state.profile)

    assert run(["profile", "show", "--workload", str(w), "--json"]) == 0
    assert stdout_json(capsys)["name"] == "toy"

    assert run(["plan", "--workload", str(w), "--json"]) == 0
    summary = stdout_json(capsys)
    assert summary["slo"] == {"kind": "p95_ms", "value": 60.0} and len(summary["gears"]) == 3
    assert summary["out"] == str(state.plan) and state.plan.is_file()  # the workload's own state
    assert sorted(summary["placement"]) == ["dev0", "dev1"]

    other = tmp_path / "mine.json"
    flags = ["--slo-p95-ms", "90", "--ranges", "2", "--out", str(other), "--json"]
    assert run(["plan", "--workload", str(w), *flags]) == 0
    summary = stdout_json(capsys)
    assert summary["slo"]["value"] == 90.0 and len(summary["gears"]) == 2 and summary["out"] == str(other)

    trace = "synthetic:constant:qps=40,duration=2"
    assert run(["simulate", "--workload", str(w), "--trace", trace, "--json"]) == 0
    assert stdout_json(capsys)["requests"] == 80  # the workload's profile and plan; the flag's trace at its rate
    w.write_text(WORKLOAD + f"trace: {trace}\n")
    assert run(["simulate", "--workload", str(w), "--json"]) == 0
    assert stdout_json(capsys)["requests"] == 160  # the workload's trace, scaled to its max_qps (80/s for 2 s)


def test_a_bad_workload_stops_any_command_with_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w = tmp_path / "cascadeserve.yaml"
    w.write_text(WORKLOAD.replace("p95_ms: 60", "p95_ms: fast"))
    assert run(["plan", "--workload", str(w)]) == 2
    assert f"{w}:5: slo.p95_ms: Input should be a valid number" in capsys.readouterr().err


def test_a_trace_without_max_qps_plans_up_to_the_traces_busiest_second(tmp_path: Path) -> None:
    w = tmp_path / "cascadeserve.yaml"
    w.write_text(WORKLOAD.replace("max_qps: 80", "trace: synthetic:step:low=20,high=120,at=5,duration=10"))
    values = workload_values(StateDir.of(load_workload(w)))
    assert values["max_qps"] == pytest.approx(120, rel=0.2)  # Poisson arrivals around the step's 120/s
    assert values["qps_dist"] == "trace:synthetic:step:low=20,high=120,at=5,duration=10"


def test_profile_calibrate_with_a_workload_scales_the_measured_profile_into_the_one_plans_use(
    toy_profile: Profile, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = tmp_path / "cascadeserve.yaml"
    w.write_text(WORKLOAD + "profile: {calibrate_s: 3}\n")
    state = StateDir.of(load_workload(w))
    values = workload_values(state)
    assert values["profile"] == str(state.profile) and values["measured_profile"] == str(state.measured)
    # nothing measured yet: the measured profile is what it reads (the option named, exit 2)
    assert run(["profile", "calibrate", "--workload", str(w)]) == 2
    assert "profile-measured" in capsys.readouterr().err
    save_profile(toy_profile, state.measured)
    # --url reads that server (nothing listens on port 1) instead of serving the workload's models here
    assert run(["profile", "calibrate", "--workload", str(w), "--url", "http://127.0.0.1:1"]) == 2
    assert "--url: cannot read http://127.0.0.1:1/v2/cascade/costs" in capsys.readouterr().err
    assert not state.profile.exists()  # nothing written where plans read
