"""``serve --tune``'s options: checked before anything starts (one line naming the option, exit code 2), and the
audit fraction defaults to the one the plan was sized for; ``serve --replan`` on emulated devices hints at device
headroom."""

from __future__ import annotations

from pathlib import Path

import pytest

from cascadeserve.api.settings import tuning_options
from cascadeserve.cascade import Cascade
from cascadeserve.cli import run
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.policy import PlanTables
from cascadeserve.profile import Profile, save_profile


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--tune", "--tune-reference", "oracle"], "--tune-reference: 'oracle' is not one of audit, label"),
        (["--tune", "--audit-fraction", "0"], "--audit-fraction: must be above 0"),
        (["--audit-fraction", "0.1"], "--audit-fraction needs --tune"),
        (["--tune-target", "0.9"], "--tune-target needs --tune"),
    ],
)
def test_bad_tuning_options_exit_2(
    toy_profile: Profile, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], says: str
) -> None:
    prof_dir = save_profile(toy_profile, tmp_path / "toy")
    plan = fixed_plan(toy_profile, Cascade(("m0", "m1"), (0.2,)), (Device(name="d0", memory_mb=1000),))
    plan_path = plan.save(tmp_path / "plan.json")
    code = run(["serve", "--plan", str(plan_path), "--profile", str(prof_dir), "--emulate", *extra])
    assert code == 2
    assert says in " ".join(capsys.readouterr().err.split())


def test_the_audit_fraction_defaults_to_the_plans(toy_profile: Profile) -> None:
    plan = fixed_plan(toy_profile, Cascade(("m0", "m1"), (0.2,)), (Device(name="d0", memory_mb=1000),))
    rows = {m: toy_profile.index(m) for m in toy_profile.model_names}
    for recorded, given, want in ((0.0, None, 0.02), (0.1, None, 0.1), (0.1, 0.3, 0.3)):
        p = plan.model_copy(update={"audit_fraction": recorded})
        make = tuning_options(True, None, 0.01, given, "audit", p, toy_profile)
        assert make is not None and make(PlanTables(p, rows)).auditor.fraction == want
    assert tuning_options(False, None, 0.01, None, "audit", plan, toy_profile) is None


def test_replanning_emulated_devices_without_headroom_gets_a_hint(toy_profile: Profile) -> None:
    from cascadeserve.api.settings import headroom_note

    plan = fixed_plan(toy_profile, Cascade(("m0", "m1"), (0.2,)), (Device(name="d0", memory_mb=1000),))
    assert plan.max_busy == 1.0
    note = headroom_note(plan, emulate=True, replan="auto")
    assert note is not None and "--max-busy" in note
    assert headroom_note(plan, emulate=True, replan="off") is None
    assert headroom_note(plan, emulate=False, replan="auto") is None
    assert headroom_note(plan.model_copy(update={"max_busy": 0.75}), emulate=True, replan="notify") is None
