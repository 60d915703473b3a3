"""``simulate --replan`` / ``--qps-scaling`` and ``serve --replan`` option checks, through the CLI entry point."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.cli_json import stdout_json

from cascadeserve.cli import run
from cascadeserve.plan import SLO, Device
from cascadeserve.planner import Planner
from cascadeserve.profile import load_profile

PROFILE = Path(__file__).resolve().parents[1] / "data" / "profiles" / "tweets-sklearn"


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = Planner(n_ranges=10).fit(
        load_profile(PROFILE), (Device(name="dev0", memory_mb=16000),), SLO(kind="accuracy", value=0.572), 100
    )
    assert p.plan_ is not None
    return p.plan_.save(tmp_path_factory.mktemp("plan") / "plan.json")


def test_simulate_replan_auto_swaps_after_a_step_and_gains_accuracy(
    plan_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["simulate", "--profile", str(PROFILE), "--plan", str(plan_file), "--json"]
    args += ["--trace", "synthetic:step:low=5,high=85,at=1,duration=60"]
    fast = ["--replan-window-s", "5", "--replan-min-s", "5", "--replan-cooldown-s", "100", "--replan-delay-s", "2"]
    assert run(args) == 0
    off = stdout_json(capsys)
    assert run([*args, "--replan", "auto", *fast]) == 0
    auto = stdout_json(capsys)
    assert "replan" not in off and auto["unanswered"] == 0 and auto["requests"] == off["requests"]
    (event,) = auto["replan"]["replans"]
    assert event["verdict"] == "swap" and event["ks_distance"] > 0.25 and auto["replan"]["swap_times_s"]
    assert auto["accuracy"] > off["accuracy"] + 0.005  # the busy ranges get the accurate cascades Zipf denied them
    assert run([*args, "--replan", "notify", *fast]) == 0
    notify = stdout_json(capsys)
    assert notify["replan"]["replans"][0]["verdict"] == "notify" and notify["replan"]["swap_times_s"] == []


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--replan", "sometimes"], "--replan: 'sometimes' is not one of auto, notify, off"),
        (["--qps-scaling", "maybe"], "--qps-scaling: 'maybe'"),
        (["--replan", "auto", "--replan-threshold", "1.5"], "--replan-threshold: 1.5 must be in (0, 1]"),
        (["--replan", "auto", "--replan-window-s", "0"], "--replan-window-s: 0.0 must be a positive number"),
    ],
)
def test_bad_replan_options_are_one_line_and_exit_2(
    plan_file: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    args = [
        "simulate",
        "--profile",
        str(PROFILE),
        "--plan",
        str(plan_file),
        "--trace",
        "synthetic:constant:qps=5,duration=1",
    ]
    assert run([*args, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    serve = ["serve", "--profile", str(PROFILE), "--plan", str(plan_file), "--emulate", "--no-measure-overhead"]
    assert run([*serve, "--port", "0", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_simulate_replan_with_tune_tunes_the_plan_in_force(plan_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "--profile", str(PROFILE), "--plan", str(plan_file), "--json", "--replan", "auto"]
    args += ["--trace", "synthetic:step:low=5,high=85,at=1,duration=60"]
    args += ["--replan-window-s", "5", "--replan-min-s", "5", "--replan-cooldown-s", "100", "--replan-delay-s", "2"]
    assert run([*args, "--tune", "--audit-fraction", "0.5", "--tune-budget", "0.05"]) == 0
    out = stdout_json(capsys)
    assert out["unanswered"] == 0 and out["replan"]["swap_times_s"]
    at = [c["at_s"] for c in out["threshold_changes"]]
    assert at == sorted(at) and at, "the tuner ran"
