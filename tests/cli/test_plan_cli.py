"""``cascadeserve plan`` / ``plan explain`` / ``eval planner`` through the CLI entry point."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.cli_json import parse_json, stdout_json

from cascadeserve.cli import run
from cascadeserve.plan import load_plan
from cascadeserve.profile import Profile, Vote, load_profile, save_profile

REAL = Path(__file__).resolve().parents[1] / "data" / "profiles" / "tweets-sklearn"


@pytest.fixture(scope="module")
def prof_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if REAL.is_dir():
        return REAL
    from tests.conftest import make_toy_profile

    d = tmp_path_factory.mktemp("prof") / "toy"
    save_profile(make_toy_profile(), d)
    return d


def test_plan_writes_a_plan_that_simulate_accepts(
    prof_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.json"
    args = ["plan", "--profile", str(prof_dir), "--devices", "2", "--device-memory-mb", "4000"]
    code = run([*args, "--slo-p95-ms", "20", "--max-qps", "1000", "--ranges", "3", "--out", str(out), "--json"])
    assert code == 0
    summary = stdout_json(capsys)
    assert summary["feasible"] is True and summary["planner_s"] > 0
    assert len(summary["gears"]) == 3
    for g in summary["gears"]:
        assert {"qps_low", "qps_high", "models", "thresholds", "predicted_p95_ms", "predicted_accuracy"} <= set(g)
        assert g["predicted_p95_ms"] <= 20
    plan = load_plan(out, load_profile(prof_dir))
    assert plan.slo is not None and plan.slo.value == 20
    trace = "synthetic:poisson:qps=1000,duration=3"
    assert run(["simulate", "--profile", str(prof_dir), "--plan", str(out), "--trace", trace, "--json"]) == 0
    sim = stdout_json(capsys)
    assert sim["completed"] == sim["requests"] and sim["p95_ms"] <= 20
    assert run(["plan", "explain", "--plan", str(out)]) == 0
    text = capsys.readouterr().out
    assert "placement" in text and "QPS range" in text


def test_unreachable_slo_exits_2_with_the_reason(
    prof_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["plan", "--profile", str(prof_dir), "--devices", "1", "--device-memory-mb", "4000"]
    code = run([*args, "--slo-p95-ms", "2", "--max-qps", "200000", "--out", str(tmp_path / "p.json")])
    assert code == 2
    err = capsys.readouterr().err
    assert "is unreachable at" in err and "saturates model" in err and "add devices or relax the SLO" in err
    assert not (tmp_path / "p.json").exists()


def test_accuracy_slo_and_bad_input(prof_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prof: Profile = load_profile(prof_dir)
    target = float(max(prof.accuracies)) - 0.01
    args = ["plan", "--profile", str(prof_dir), "--devices", "1", "--device-memory-mb", "4000", "--max-qps", "300"]
    assert run([*args, "--slo-accuracy", f"{target}", "--out", str(tmp_path / "a.json"), "--json"]) == 0
    summary = stdout_json(capsys)
    assert summary["plan_accuracy"] >= target and summary["slo"]["kind"] == "accuracy"
    assert run([*args, "--out", str(tmp_path / "b.json")]) == 2  # no SLO
    assert "exactly one SLO" in capsys.readouterr().err
    assert run([*args, "--slo-accuracy", "1.0", "--out", str(tmp_path / "c.json"), "--json"]) == 2
    assert stdout_json(capsys)["feasible"] is False


def test_plan_fixed_still_works(prof_dir: Path, tmp_path: Path) -> None:
    prof = load_profile(prof_dir)
    first = prof.model_names[0]
    assert (
        run(["plan", "fixed", "--profile", str(prof_dir), "--cascade", first, "--out", str(tmp_path / "f.json")]) == 0
    )
    assert load_plan(tmp_path / "f.json").gears[0].models == (first,)


def test_eval_planner_json_and_plot(prof_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "fig10.png"
    args = ["eval", "planner", "--profile", str(prof_dir), "--max-qps", "300", "--levels", "4", "--slo-count", "6"]
    assert run([*args, "--duration-s", "1", "--json", "--plot", str(png)]) == 0
    res = stdout_json(capsys)
    for key in ("hypervolume_fraction", "planner_s", "exhaustive_s", "random_s"):
        assert key in res
    assert 0 < res["hypervolume_fraction"] <= 1.0 + 1e-9
    assert png.stat().st_size > 1000


def _two_range_plan(prof_dir: Path, out: Path) -> list[str]:
    """``plan`` on two 4 GB devices, two ranges, p95 ≤ 20 ms up to 1,000 QPS, written to ``out``."""
    args = ["plan", "--profile", str(prof_dir), "--devices", "2", "--device-memory-mb", "4000", "--ranges", "2"]
    return [*args, "--slo-p95-ms", "20", "--max-qps", "1000", "--out", str(out)]


def test_plan_with_a_batch_overhead_writes_it_into_the_plan(
    prof_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.json"
    args = _two_range_plan(prof_dir, out)
    assert run([*args, "--batch-overhead-ms", "0.5", "--json"]) == 0
    summary = stdout_json(capsys)
    assert summary["feasible"] is True and summary["batch_overhead_ms"] == 0.5
    assert load_plan(out).batch_overhead_ms == 0.5
    assert run([*args, "--batch-overhead-ms", "-1"]) == 2  # rejected by the option's range
    capsys.readouterr()
    assert run(["plan", "explain", "--plan", str(out)]) == 0
    assert "batch overhead 0.5 ms" in capsys.readouterr().out


def test_plan_with_device_headroom_records_it_and_refuses_a_bad_one(
    prof_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.json"
    args = _two_range_plan(prof_dir, out)
    assert run([*args, "--max-busy", "0.8", "--json"]) == 0
    summary = stdout_json(capsys)
    assert summary["max_busy"] == 0.8 and load_plan(out).max_busy == 0.8
    assert all(0 <= g["predicted_busy"] <= 0.8 for g in summary["gears"])
    assert [g.predicted_busy for g in load_plan(out).gears] == [g["predicted_busy"] for g in summary["gears"]]
    assert run(["plan", "explain", "--plan", str(out)]) == 0
    text = capsys.readouterr().out
    header = next(line for line in text.splitlines() if "QPS range" in line)
    assert "devices at most 80% busy" in text and "busy" in header
    for bad in ("0", "1.5", "x"):
        assert run([*args, "--max-busy", bad]) == 2
        assert "--max-busy" in capsys.readouterr().err


def test_plan_replays_a_trace_distribution_and_reports_the_check(
    prof_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.json"
    dist = "trace:synthetic:zipf:max_qps=2000,duration=10"
    args = ["plan", "--profile", str(prof_dir), "--devices", "2", "--device-memory-mb", "4", "--max-qps", "2000"]
    args += ["--slo-accuracy", "0.556", "--ranges", "4", "--out", str(out), "--json"]
    assert run([*args, "--qps-dist", dist]) == 0
    check = stdout_json(capsys)["report"]["trace_check"]
    assert check["requests"] > 0 and check["met"] is True and check["p95_ms"] > 0
    plan = load_plan(out)
    assert plan.slo is not None and plan.slo.value == 0.556 and "trace check met" in plan.notes["trace_check"]
    assert run([*args, "--qps-dist", dist, "--trace-rounds", "0"]) == 0
    assert stdout_json(capsys)["report"]["trace_check"]["rounds"] == 0
    assert run(args) == 0  # the default Zipf distribution has no trace to replay
    assert stdout_json(capsys)["report"]["trace_check"] is None
    assert run([*args[:-1], "--qps-dist", dist]) == 0  # the table view says how the replay went
    assert "trace check met" in capsys.readouterr().out


def test_models_left_out_for_memory_are_named_on_stderr_and_by_explain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.conftest import make_toy_profile

    prof = tmp_path / "toy"
    save_profile(make_toy_profile(), prof)  # m0, m1, m2 need 100, 200 and 300 MB
    out = tmp_path / "plan.json"
    args = ["plan", "--profile", str(prof), "--devices", "1", "--slo-p95-ms", "100", "--max-qps", "50"]
    expected = {
        "250": "warning: model m2 needs 300 MB and fits on no device (1 device of 250 MB): the plan leaves it out",
        "350": "warning: model m1 (200 MB) was left out of the plan for memory: the cascades that use it could not be "
        "placed on 1 device of 350 MB beside the other models the plan needs",
    }
    for mb, line in expected.items():
        assert run([*args, "--device-memory-mb", mb, "--ranges", "2", "--out", str(out), "--json"]) == 0
        captured = capsys.readouterr()
        assert [ln for ln in captured.err.splitlines() if ln.startswith("warning:")] == [UNCALIBRATED, line]
        assert parse_json(captured.out)["report"]["warnings"] == [line.removeprefix("warning: ")]
        assert run(["plan", "explain", "--plan", str(out)]) == 0
        assert line in capsys.readouterr().out.splitlines()
    assert run([*args, "--device-memory-mb", "1000", "--ranges", "2", "--out", str(out)]) == 0
    assert [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning:")] == [UNCALIBRATED]


UNCALIBRATED = (
    "warning: profile 'toy' was never calibrated to a serving host: plans promise quiet-machine runtimes (profile "
    "calibrate, or up with profile.calibrate_s > 0)"
)


def test_plan_warns_of_an_uncalibrated_profile_and_of_its_measurement_notes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One line each, before planning, from the CLI and from the library's make_plan."""
    import dataclasses

    from tests.conftest import make_toy_profile

    from cascadeserve.api.settings import devices_from, slo_from
    from cascadeserve.api.steps import make_plan

    toy = make_toy_profile()
    d = tmp_path / "toy"
    save_profile(toy, d)
    args = ["plan", "--profile", str(d), "--devices", "1", "--device-memory-mb", "1000", "--slo-p95-ms", "100"]
    args += ["--max-qps", "50", "--ranges", "2", "--out", str(tmp_path / "plan.json")]

    def warned() -> list[str]:
        assert run(args) == 0
        return [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning:")]

    assert warned() == [UNCALIBRATED]
    notes = ("model 'm1': runtime falls from 3.000 ms @ b=8 to 2.000 ms @ b=64, more than the noise", "host busy")
    save_profile(dataclasses.replace(toy, calibration="runtimes m0 x1.2 as measured on this host", notes=notes), d)
    noted = f"warning: profile 'toy' carries 2 measurement notes: {notes[0]} | {notes[1]}"
    assert warned() == [noted]
    said: list[str] = []
    make_plan(load_profile(d), devices_from(1, 1000), slo_from(100, None), 50, ranges=2, say=said.append)
    assert said == [noted]


def _voters(tmp_path: Path) -> Path:
    """Three cheap models, right on 75 % of the samples each, wrong on different ones: their vote gets ~84 %."""
    import numpy as np

    from cascadeserve.profile import ModelProfile, RuntimeCurve

    rng = np.random.default_rng(3)
    labels = rng.integers(0, 2, 400)
    scores = {}
    for m in ("a", "b", "c"):
        pred = np.where(rng.random(400) < 0.75, labels, 1 - labels)
        s = np.full((400, 2), 0.3)
        s[np.arange(400), pred] = 0.7
        scores[m] = s + rng.random((400, 2)) * 0.01
    models = [ModelProfile(m, 100.0, RuntimeCurve((1, 32), (1.0, 4.0))) for m in ("a", "b", "c")]
    d = tmp_path / "voters"
    save_profile(Profile.from_scores("voters", models, labels, scores), d)
    return d


def test_plan_with_votes_reaches_past_the_best_model_and_simulate_serves_the_vote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prof_dir = _voters(tmp_path)
    prof = load_profile(prof_dir)
    target = f"{float(prof.accuracies.max()) + 0.03:.3f}"  # above every model alone
    out = tmp_path / "plan.json"
    args = ["plan", "--profile", str(prof_dir), "--devices", "1", "--device-memory-mb", "1000", "--max-qps", "100"]
    args += ["--slo-accuracy", target, "--ranges", "2", "--out", str(out)]
    assert run(args) == 2  # single models only: unreachable
    assert "accuracy" in capsys.readouterr().err
    assert run([*args, "--votes", "1", "--json"]) == 0
    summary = stdout_json(capsys)
    used = {m for g in summary["gears"] for m in g["models"]}
    assert any(Vote.parse(m, prof.model_names) is not None for m in used)
    plan = load_plan(out, prof)  # the vote is rebuilt from the profile, not stored in it
    assert set(plan.models()) >= used
    trace = "synthetic:poisson:qps=100,duration=5"
    assert run(["simulate", "--profile", str(prof_dir), "--plan", str(out), "--trace", trace, "--json"]) == 0
    sim = stdout_json(capsys)
    assert sim["completed"] == sim["requests"] and sim["accuracy"] >= float(target) - 0.03
