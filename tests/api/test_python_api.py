"""The Python API as the README shows it: ``examples/python_api.py`` profiles, plans, simulates and serves the
example workload (real digits models) with ``cascadeserve`` names only, and the server answers V2 metadata; the
names of the steps still reach the packages named alike."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import cascadeserve as cs
import cascadeserve.plan
import cascadeserve.profile
import cascadeserve.simulate
from cascadeserve.api import steps

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "python_api.py"


def test_the_example_script_profiles_plans_simulates_and_serves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    spec = importlib.util.spec_from_file_location("python_api", EXAMPLE)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    meta = script.main(str(tmp_path / "w"))
    assert meta["name"] == "digits"
    assert meta["inputs"] == [{"name": "pixels", "datatype": "FP32", "shape": [-1, 64]}]
    out = capsys.readouterr()
    assert "simulated at 20 QPS: p95 " in out.out and "served digits" in out.out
    assert "profiling digits" in out.err and "planning p95 ≤ 100 ms" in out.err
    # run again: every step is up to date, so nothing is measured or planned
    state = tmp_path / "w" / ".cascadeserve"
    plan_mtime = (state / "plan.json").stat().st_mtime_ns
    script.main(str(tmp_path / "w"))
    assert "profiling" not in capsys.readouterr().err
    assert (state / "plan.json").stat().st_mtime_ns == plan_mtime


def test_the_step_names_are_callable_and_still_reach_their_packages() -> None:
    assert cs.profile is cascadeserve.profile and cs.plan is cascadeserve.plan and cs.simulate is cascadeserve.simulate
    assert callable(cs.profile) and callable(cs.plan) and callable(cs.simulate)
    assert cs.profile.Profile.__name__ == "Profile" and cs.plan.GearPlan.__name__ == "GearPlan"
    assert cs.simulate.simulate.__module__ == "cascadeserve.simulate.engine"
    import cascadeserve.profile.io as io  # a submodule through the name, as `import a.b as c` reads it

    assert io.load_profile is cascadeserve.profile.load_profile
    with pytest.raises(TypeError, match="workload"):  # the call reaches the step: its own signature answers
        cs.profile()
    assert steps.profile.__module__ == "cascadeserve.api.steps"
