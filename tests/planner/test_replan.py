"""Re-planning a served plan for measured range weights: in process, and as the child process a server runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cascadeserve.errors import CascadeServeError
from cascadeserve.plan import SLO, Device, load_plan
from cascadeserve.planner import Planner
from cascadeserve.planner.replan import main, replan
from cascadeserve.planner.workload import QpsDistribution
from cascadeserve.policy.replan import planned_weights
from cascadeserve.profile import Profile

PROFILE = Path(__file__).resolve().parents[1] / "data" / "profiles" / "tweets-sklearn"


def _zipf_plan(profile: Profile):  # type: ignore[no-untyped-def]
    p = Planner(n_ranges=10).fit(
        profile, (Device(name="dev0", memory_mb=16000),), SLO(kind="accuracy", value=0.572), 3000
    )
    assert p.plan_ is not None
    return p.plan_


def test_weights_distribution_parses_and_checks() -> None:
    d = QpsDistribution.parse("weights:1,0,3")
    assert d.weights(30.0, 3).tolist() == pytest.approx([0.25, 1e-6, 0.75], abs=1e-5)
    for bad, named in (("weights:1,x", "numbers"), ("weights:0,0", "not all zero"), ("weights:-1,2", "non-negative")):
        with pytest.raises(CascadeServeError, match=named):
            QpsDistribution.parse(bad)
    with pytest.raises(CascadeServeError, match="2 weights given for 3 ranges"):
        QpsDistribution.parse("weights:1,2").weights(30.0, 3)


def test_replan_keeps_the_deployment_and_plans_for_the_weights(real_profile: Profile) -> None:
    old = _zipf_plan(real_profile)
    assert planned_weights(old)[0] > 0.3  # the planner notes the Zipf weights it planned for
    heavy = [0, 0, 0, 0, 0, 0.1, 0.3, 0.3, 0.2, 0.1]
    new = replan(real_profile, old, heavy)
    assert new.devices == old.devices and new.slo == old.slo and new.max_qps == old.max_qps
    assert len(new.gears) == len(old.gears) and new.notes["replanned_from"] == "zipf (exponent 1.1)"
    assert planned_weights(new)[6] == pytest.approx(0.3, abs=1e-5)
    # made for heavy load, the busy ranges get more accurate cascades than Zipf's plan gave them
    assert sum(g.predicted_accuracy or 0 for g in new.gears[5:]) > sum(g.predicted_accuracy or 0 for g in old.gears[5:])


def test_child_process_writes_the_plan_or_fails_with_one_line(real_profile: Profile, tmp_path: Path) -> None:
    src, out = tmp_path / "plan.json", tmp_path / "new.json"
    _zipf_plan(real_profile).save(src)
    assert main([str(PROFILE), str(src), "1,2", str(out)]) == 2 and not out.exists()  # 2 weights for 10 gears
    proc = subprocess.run(
        [sys.executable, "-m", "cascadeserve.planner.replan", str(PROFILE), str(src), ",".join(["1"] * 10), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(load_plan(out, real_profile).gears) == 10
