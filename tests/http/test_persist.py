"""The server's state folder: a plan recorded at a swap or a threshold change comes back on a start from the same
plan file (with the tuned thresholds in its gears), and not from another or an edited one; records are written whole
or not at all; a folder that cannot be written costs a warning, never the serving; ``restore=False`` reads nothing."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.http.http_helpers import toy_plan

from cascadeserve.cascade import Cascade
from cascadeserve.http import build_app
from cascadeserve.http.persist import ServerState, plan_base, write_atomic
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.policy.thresholds import ThresholdDecision
from cascadeserve.profile import Profile
from cascadeserve.runtime import Runtime


def _running(runtime: Runtime, act: Callable[[], object]) -> object:
    """``act()`` on the event loop of ``runtime`` started, as the server's swap and tuning run."""

    async def go() -> object:
        async with runtime:
            return act()

    return asyncio.run(go())


def _state(root: Path, **kw: object) -> tuple[ServerState, list[str]]:
    lines: list[str] = []
    return ServerState(root, log=lines.append, **kw), lines  # type: ignore[arg-type]


def test_a_swap_and_a_threshold_change_are_restored_onto_the_same_plan_file(
    toy_profile: Profile, tmp_path: Path
) -> None:
    plan_file = toy_plan(toy_profile).save(tmp_path / "plan.json")
    base = plan_base(plan_file)
    state, lines = _state(tmp_path / "state")
    watcher = state.watch("toy", base)
    app = build_app(toy_profile, toy_plan(toy_profile), emulate=True, name="toy", observer=watcher)
    watcher.runtime = app.runtime
    devices = (Device(name="d0", memory_mb=1000), Device(name="d1", memory_mb=1000))
    swapped = fixed_plan(toy_profile, Cascade(("m0", "m2"), (0.7,)), devices)

    def swap_then_tune() -> None:
        app.runtime.swap_plan(swapped)
        app.runtime.current.apply_thresholds(ThresholdDecision.in_force(0, (0.9,)))  # what online tuning does

    _running(app.runtime, swap_then_tune)
    assert state.flush()
    doc = json.loads(state.plan_file("toy").read_text())
    assert doc["base"] == base and doc["thresholds"] == [[0.9]] and doc["generation"] == 1

    again, lines = _state(tmp_path / "state")
    plan, saved = again.restored("toy", base, toy_plan(toy_profile), toy_profile.model_names)
    assert saved is not None and [g.cascade.models for g in plan.gears] == [("m0", "m2")]
    assert [tuple(g.thresholds) for g in plan.gears] == [(0.9,)]
    assert len(lines) == 1 and "restored the plan of 'toy'" in lines[0] and "thresholds tuning set" in lines[0]
    served = build_app(toy_profile, plan, emulate=True, name="toy").runtime  # and a runtime built from it serves them
    assert _running(served, lambda: served.current.tables.thresholds_of(0)) == (0.9,)

    # another plan file, or the same one edited: the file wins, and the console says why
    other = toy_plan(toy_profile, min_queue=2).save(tmp_path / "other.json")
    plan, saved = again.restored("toy", plan_base(other), toy_plan(toy_profile), toy_profile.model_names)
    assert saved is None and plan.gears[0].cascade.models == ("m0", "m1")
    assert "not restored: the plan recorded for 'toy'" in lines[-1]
    toy_plan(toy_profile, max_wait_ms=9.0).save(plan_file)
    assert again.restored("toy", plan_base(plan_file), swapped, toy_profile.model_names)[1] is None
    # a record naming models this server does not serve is not restored either
    assert again.restored("toy", base, swapped, ["m0", "m1"])[1] is None and "names models not served" in lines[-1]
    # restore=False reads nothing, and says nothing
    fresh, quiet = _state(tmp_path / "state", restore=False)
    assert fresh.restored("toy", base, swapped, toy_profile.model_names) == (swapped, None) and not quiet


def test_loaded_cascades_are_recorded_forgotten_and_bad_records_are_skipped(tmp_path: Path) -> None:
    state, lines = _state(tmp_path)
    state.save_loaded([("b", {"emulate": True}), ("c", {})])
    assert state.loaded() == [("b", {"emulate": True}), ("c", {})]  # a pending record is the one in force
    assert state.flush()
    assert _state(tmp_path)[0].loaded() == [("b", {"emulate": True}), ("c", {})]
    state.repository_file.write_text('{"version": 1, "loaded": [{"name": 3}, {"name": "d", "parameters": {}}]}')
    assert state.loaded() == [("d", {})]
    state.repository_file.write_text("{not json")
    assert state.loaded() == [] and "not restored: cannot read" in lines[-1]
    state.plan_file("x").parent.mkdir(parents=True, exist_ok=True)
    state.plan_file("x").write_text("{}")
    state.forget("x")
    assert state.flush() and not state.plan_file("x").exists()


def test_a_record_is_written_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "plans" / "a.json"
    write_atomic(target, "old\n")

    def torn(src: str, dst: str) -> None:  # the process dies between writing the new file and renaming it
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", torn)
    with pytest.raises(OSError):
        write_atomic(target, "new\n")
    assert target.read_text() == "old\n" and os.listdir(target.parent) == ["a.json"]  # no temporary file left


def test_a_folder_that_cannot_be_written_costs_a_warning_not_the_serving(toy_profile: Profile, tmp_path: Path) -> None:
    blocked = tmp_path / "state"
    blocked.write_text("a file where the folder should be")
    state, lines = _state(blocked)
    watcher = state.watch("toy", {"path": "p", "sha256": "0"})
    app = build_app(toy_profile, toy_plan(toy_profile), emulate=True, name="toy", observer=watcher)
    watcher.runtime = app.runtime
    swap = app.runtime.swap_plan
    assert _running(app.runtime, lambda: [swap(toy_plan(toy_profile, min_queue=q)) for q in (2, 3)]) == [1, 2]
    assert state.flush()
    assert len(lines) == 1 and lines[0].startswith("warning: cannot write") and "will not survive a restart" in lines[0]
