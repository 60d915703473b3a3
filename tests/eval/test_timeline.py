"""The degradation timeline with ``real=True``: every system, MS+ and Cocktail+ included, runs on the asyncio
runtime with its policy hooks, and where its answers cannot depend on timing the real accuracy is the simulated one.

One real replay per system (the trace's length in wall time, 2 s each), shared by the tests through a module
fixture. Latencies are wall-clock measurements on a shared machine, so only their presence is asserted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from tests.baselines.tiny import workload

import cascadeserve.baselines.cocktail as cocktail
from cascadeserve.baselines import CascadeServe, CocktailPlus, Deployment, DynBa, MSPlus, System, Workload
from cascadeserve.eval import degradation
from cascadeserve.policy import GearSchedule
from cascadeserve.simulate import simulate
from cascadeserve.traces import step

SLO_MS = 100.0
# MS+ on one device: the slow model's capacity (~200 QPS in batches within the 50 ms AIMD target, times the
# headroom) is below the 300 QPS of the step, so it switches to the fast model. Cocktail+ on two devices scales
# from one to two at the step (see the interval below).
DEVICES = {"cascadeserve": 2, "dynba": 2, "ms+": 1, "cocktail+": 2}


@pytest.fixture(scope="module")
def run() -> Iterator[tuple[Workload, list[System], dict[str, Any]]]:
    # 50 QPS for 1 s, then 300 QPS for 1 s: 350 requests.
    w = workload(step(50, 300, 1.0, 2.0, arrival="uniform"), lats=(SLO_MS,), accs=(0.6, 0.9))
    systems: list[System] = [CascadeServe(), DynBa(), MSPlus(), CocktailPlus()]
    with pytest.MonkeyPatch.context() as mp:
        # Cocktail+'s shortest autoscaling interval (5 s) spans the whole trace; at 0.5 s its schedule really
        # changes gear mid-run, so the runtime's producer has a switch to follow.
        mp.setattr(cocktail, "INTERVALS_S", (0.5,))
        out = degradation(w, systems, DEVICES, SLO_MS, window_s=1.0, real=True)
        yield w, systems, out


def _deployment(w: Workload, system: System, entry: dict[str, Any]) -> Deployment:
    dep = system.deploy(w, DEVICES[system.name], entry["outcome"]["config"])  # deterministic: the chosen one again
    assert dep is not None
    return dep


def _correct_per_gear(w: Workload, dep: Deployment) -> np.ndarray:
    """Per gear of the plan, which requests would be answered right if that gear admitted every request."""
    arr = w.trace.arrivals
    return np.array(
        [
            simulate(dep.profile, dep.plan, arr, gear_schedule=GearSchedule([g])).correct
            for g in range(len(dep.plan.gears))
        ]
    )


def test_every_system_runs_on_the_runtime(run: tuple[Workload, list[System], dict[str, Any]]) -> None:
    _, systems, out = run
    assert set(out["systems"]) == {s.name for s in systems}
    for name, e in out["systems"].items():
        assert "real_skipped" not in e
        # the same windows as the simulated series (they depend on the arrivals only), each with a value
        assert e["real"]["t"] == e["sim"]["t"] == [1.0, 2.0], name
        assert len(e["real"]["p95_ms"]) == len(e["real"]["accuracy"]) == 2, name
        assert np.isfinite(e["real_p95_ms"]) and e["real_p95_ms"] > 0, name
        assert 0.0 <= e["real_accuracy"] <= 1.0, name


def test_the_hooked_systems_really_use_their_hooks(run: tuple[Workload, list[System], dict[str, Any]]) -> None:
    w, systems, out = run
    by_name = {s.name: s for s in systems}
    ms = _deployment(w, by_name["ms+"], out["systems"]["ms+"])
    assert ms.aimd_target_s is not None
    assert ms.simulate(w.trace.arrivals).gear_switches >= 1  # the slow-to-fast switch happens in this scenario
    ck = _deployment(w, by_name["cocktail+"], out["systems"]["cocktail+"])
    assert ck.schedule is not None and len(set(ck.schedule.gears.tolist())) == 2


def test_real_accuracy_is_the_simulated_one_where_timing_cannot_matter(
    run: tuple[Workload, list[System], dict[str, Any]],
) -> None:
    w, systems, out = run
    n = len(w.trace.arrivals)
    exact = []
    for s in systems:
        e = out["systems"][s.name]
        sim_acc = e["outcome"]["accuracy"]
        per_gear = _correct_per_gear(w, _deployment(w, s, e))
        if (per_gear == per_gear[0]).all():
            # Every gear answers every request alike (one gear; or, as for Cocktail+, gears that differ only in
            # how many replicas share the load; or cascades whose thresholds split the tiny profile the same
            # way): batching, AIMD caps and gear timing change when a request is answered, never by whom.
            exact.append(s.name)
            assert e["real_accuracy"] == sim_acc, s.name
            assert e["real"]["accuracy"] == e["sim"]["accuracy"], s.name
        else:
            # MS+: the gear (slow or fast model) follows the QPS measured on the wall clock, so the switch at the
            # step may land a tick earlier or later than in the simulator. Whatever the timing, each request gets
            # one of its gears' answers; and a tick or two of the 300 QPS phase (60 requests) bounds the shift.
            assert per_gear.min(axis=0).mean() <= e["real_accuracy"] <= per_gear.max(axis=0).mean(), s.name
            assert abs(e["real_accuracy"] - sim_acc) <= 60 / n, s.name
    assert {"dynba", "cocktail+"} <= set(exact)  # the scenario keeps the exact checks in play
    assert "ms+" not in exact


def test_deployment_gives_each_runtime_fresh_hooks(run: tuple[Workload, list[System], dict[str, Any]]) -> None:
    w, systems, out = run
    ms = _deployment(w, next(s for s in systems if s.name == "ms+"), out["systems"]["ms+"])
    a, b = ms.runtime_options(), ms.runtime_options()
    assert a.batch_limit is not None and b.batch_limit is not None
    assert a.batch_limit is not b.batch_limit  # an AIMD limit holds per-replica state
    assert a.batch_limit.target_s == ms.aimd_target_s
    rt = ms.emulated_runtime()
    assert rt.options.batch_limit is not None and rt.options.max_in_flight == a.max_in_flight
