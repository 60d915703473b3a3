"""``serve``'s Clipper options are checked before anything starts: one line naming the option, exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from cascadeserve.cascade import Cascade
from cascadeserve.cli import run
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import Profile, save_profile


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--batching", "fastest"], "--batching: 'fastest' is not one of plan, aimd, quantile"),
        (["--batching", "aimd"], "--batching: batching 'aimd' needs a latency target"),
        (["--cache-size", "-3"], "--cache-size: -3 is negative"),
    ],
)
def test_bad_clipper_options_exit_2(
    toy_profile: Profile, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], says: str
) -> None:
    prof_dir = save_profile(toy_profile, tmp_path / "toy")
    plan = fixed_plan(toy_profile, Cascade(("m0",), ()), (Device(name="d0", memory_mb=1000),))  # no SLO
    plan_path = plan.save(tmp_path / "plan.json")
    code = run(["serve", "--plan", str(plan_path), "--profile", str(prof_dir), "--emulate", *extra])
    assert code == 2
    err = capsys.readouterr().err
    assert says in " ".join(err.split())


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--selection", "exp5"], "--selection: 'exp5' is not one of exp3, exp4"),
        (["--alternative", "noequals"], "--alternative: 'noequals' is not NAME=PLAN.json"),
        (["--slo-p95-ms", "0"], "--slo-p95-ms: 0.0 must be a positive number"),
        (["--keep-alive-s", "0"], "--keep-alive-s: 0.0 must be a positive number of seconds"),
        (["--header-timeout-s", "0"], "'--header-timeout-s': Input should be greater than or equal to 0.1"),
        (["--body-timeout-s", "inf"], "'--body-timeout-s': Input should be less than or equal to 3600"),
        (["--max-connections", "0"], "'--max-connections': Input should be greater than or equal to 1"),
    ],
)
def test_bad_selection_options_exit_2(
    toy_profile: Profile, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], says: str
) -> None:
    prof_dir = save_profile(toy_profile, tmp_path / "toy")
    plan = fixed_plan(toy_profile, Cascade(("m0",), ()), (Device(name="d0", memory_mb=1000),))
    plan_path = plan.save(tmp_path / "plan.json")
    code = run(["serve", "--plan", str(plan_path), "--profile", str(prof_dir), "--emulate", *extra])
    assert code == 2
    assert says in " ".join(capsys.readouterr().err.split())
