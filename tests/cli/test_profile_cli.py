"""The ``profile`` and ``plan fixed`` commands, driven through ``cascadeserve.cli.run`` with captured output."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tests.cli_json import parse_json, stdout_json

from cascadeserve.cascade import Cascade, enumerate_frontier
from cascadeserve.cli import run
from cascadeserve.plan import GearPlan, GearReplica, load_plan
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve, load_profile, save_profile


def hand_profile() -> Profile:
    models = (
        ModelProfile("small", 100.0, RuntimeCurve((1, 8), (1.0, 4.0))),  # b=64: 4 + 56 * 3/7 = 28
        ModelProfile("large", 250.5, RuntimeCurve((1, 8), (2.0, 9.0))),  # b=64: 9 + 56 = 65
    )
    return Profile(
        "hand",
        models,
        np.array([1, 2, 3, 4]),
        np.array([0, 1, 0, 1]),
        np.array([[0, 1, 1, 0], [0, 1, 0, 0]]),
        np.array([[0.9, 0.4, 0.8, 0.2], [0.5, 0.6, 0.7, 0.9]]),
        device="laptop",
    )


@pytest.fixture
def profile_dir(tmp_path: Path) -> Path:
    return save_profile(hand_profile(), tmp_path / "hand")


def test_profile_show_json(profile_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["profile", "show", "--profile", str(profile_dir), "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert parse_json(out) == {
        "name": "hand",
        "device": "laptop",
        "samples": 4,
        "models": [
            {"model": "small", "accuracy": 0.5, "runtime_ms_b1": 1.0, "runtime_ms_b64": 28.0, "memory_mb": 100.0},
            {"model": "large", "accuracy": 0.75, "runtime_ms_b1": 2.0, "runtime_ms_b64": 65.0, "memory_mb": 250.5},
        ],
    }


def test_profile_show_table(profile_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["profile", "show", "--profile", str(profile_dir)]) == 0
    out, _ = capsys.readouterr()
    assert "hand: 4 validation samples (laptop)" in out
    for cell in ("small", "0.5000", "1.000", "28.000", "100.0", "large", "0.7500", "65.000", "250.5"):
        assert cell in out


def test_profile_frontier_json_matches_enumerate_frontier(
    profile_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["profile", "frontier", "--profile", str(profile_dir), "--json"]) == 0
    doc = stdout_json(capsys)
    prof = load_profile(profile_dir)
    want = enumerate_frontier(prof, levels=np.round(np.linspace(0, 1, 11), 6))
    assert doc["name"] == "hand"
    assert doc["batch_size"] == 1.0
    got = [(Cascade(tuple(p["models"]), tuple(p["thresholds"])), p["accuracy"], p["work_ms"]) for p in doc["frontier"]]
    assert got == want
    assert got[0] == (Cascade(("small",)), 0.5, 1.0)
    assert got[-1][1] == 0.75


def test_profile_frontier_options_and_table(profile_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["profile", "frontier", "--profile", str(profile_dir), "--json"]
    assert run([*argv, "--max-models", "1", "--batch-size", "8"]) == 0
    doc = stdout_json(capsys)
    assert doc["batch_size"] == 8.0
    assert [(p["models"], p["work_ms"]) for p in doc["frontier"]] == [(["small"], 0.5), (["large"], 9.0 / 8)]
    assert run(["profile", "frontier", "--profile", str(profile_dir), "--levels", "3"]) == 0
    out = capsys.readouterr().out
    assert "cascade frontier" in out
    assert "small" in out


def test_usage_errors_exit_2(profile_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["profile", "show", "--profile", str(profile_dir), "--nope"]) == 2
    assert run(["profile", "frontier", "--profile", str(profile_dir), "--levels", "1"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "--nope" in err


def test_profile_show_on_a_bad_profile_exits_2_with_one_line(
    profile_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = profile_dir / "predictions" / "large.csv"
    csv.write_text(csv.read_text(encoding="utf-8").replace("0.6", "2.5"), encoding="utf-8")
    assert run(["profile", "show", "--profile", str(profile_dir)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"error: {csv}, line 3, column certainty: certainty must be a number in [0, 1], got '2.5'\n"
    assert run(["profile", "frontier", "--profile", str(profile_dir / "missing")]) == 2
    assert "profile directory does not exist" in capsys.readouterr().err


# -- plan fixed -------------------------------------------------------------------------------------------------
def _fixed(profile_dir: Path, out: Path, *extra: str) -> int:
    return run(["plan", "fixed", "--profile", str(profile_dir), "--out", str(out), *extra])


def test_plan_fixed_writes_a_loadable_plan(
    profile_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.json"
    args = ["--cascade", "small,large", "--thresholds", "0.7", "--devices", "2", "--device-memory-mb", "16000"]
    assert _fixed(profile_dir, out, *args) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    plan = load_plan(out, load_profile(profile_dir))
    assert isinstance(plan, GearPlan)
    assert [r.id for r in plan.replicas] == ["small@dev0", "large@dev0", "small@dev1", "large@dev1"]
    assert [d.memory_mb for d in plan.devices] == [16000.0, 16000.0]
    gear = plan.gears[0]
    assert gear.cascade == Cascade(("small", "large"), (0.7,))
    assert all((rg.min_queue, rg.share) == (1, 0.5) for rg in gear.replicas)


def test_plan_fixed_options(profile_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    args = ["--cascade", "large", "--min-queue", "4", "--max-wait-ms", "25", "--max-batch", "16"]
    assert _fixed(profile_dir, out, *args, "--no-caps") == 0
    plan = load_plan(out)
    assert plan.gears[0].replicas == (GearReplica(model="large", device="dev0", min_queue=4, share=1.0),)
    assert (plan.max_wait_ms, plan.max_batch) == (25.0, 16)
    # by default each model's batch is capped by the planner's rule: large is cheapest per sample at its largest
    # profiled batch, 8 (never an extrapolation past it)
    assert _fixed(profile_dir, out, *args) == 0
    assert load_plan(out).gears[0].replicas[0].max_batch == 8


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cascade", "small,large", "--thresholds", "0.7,0.5"], "a cascade of 2 models needs 1 thresholds, got 2"),
        (["--cascade", "small,large"], "a cascade of 2 models needs 1 thresholds, got 0"),
        (["--cascade", "small,large", "--thresholds", "high"], "--thresholds: 'high' is not a number"),
        (["--cascade", "small,large", "--thresholds", "1.5"], "threshold 1.5 is outside [0, 1]"),
        (["--cascade", "small,huge", "--thresholds", "0.5"], "unknown model 'huge'"),
        (["--cascade", "small", "--devices", "0"], "--devices must be at least 1"),
        (["--cascade", "large", "--device-memory-mb", "200"], "model 'large' needs 250.5 MB and fits on no device"),
        (["--cascade", "large", "--out", "/nonexistent-dir/plan.json"], "cannot write the plan: No such file"),
    ],
)
def test_plan_fixed_rejects_bad_arguments_with_exit_2(
    profile_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    out = tmp_path / "plan.json"
    assert _fixed(profile_dir, out, *args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert message in err
    assert "Traceback" not in err
    assert not out.exists()
