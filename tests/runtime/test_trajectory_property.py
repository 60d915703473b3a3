"""Property: on any small plan and arrival sequence, the runtime on a fake clock decides exactly as the simulator.

Hypothesis draws plans of 1 to 3 stages on 1 to 3 devices with several gears, minimum queue lengths, max waits
(or none, so the plan default applies), batch caps and thresholds, and arrival sequences with exact ties; with and
without the two policy hooks (an AIMD batch limit, a gear schedule). Both engines apply the same decisions from
``cascadeserve.policy``, so every request must get the same answering model and stage, the same prediction, the
same completion time to the last float and the same gear, and every batch and tick must match
(``tests/runtime/test_trajectory.py::_compare`` asserts all of it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from tests.conftest import make_toy_profile
from tests.property import property_settings
from tests.runtime.test_trajectory import _compare

from cascadeserve.plan import Device, Gear, GearPlan, GearReplica, Replica
from cascadeserve.policy import AimdBatchLimit, GearSchedule

PROFILE = make_toy_profile()
MODELS = ("m0", "m1", "m2")
THRESHOLDS = (0.0, 0.2, 0.4, 0.6, 1.0)


def _gear_replicas(entries: list[tuple[str, str, int, float, int | None]]) -> tuple[GearReplica, ...]:
    """The plan format's per-gear replica settings from ``(model, device, min_queue, share, max_batch)``."""
    return tuple(GearReplica(model=m, device=d, min_queue=q, share=s, max_batch=c) for m, d, q, s, c in entries)


@st.composite
def plans(draw: st.DrawFn) -> GearPlan:
    n_dev = draw(st.integers(1, 3))
    devices = tuple(Device(name=f"d{i}", memory_mb=10_000) for i in range(n_dev))
    # Each model on a non-empty set of devices.
    placement = {m: draw(st.sets(st.integers(0, n_dev - 1), min_size=1)) for m in MODELS}
    replicas = tuple(Replica(model=m, device=f"d{d}") for m in MODELS for d in sorted(placement[m]))
    n_gears = draw(st.integers(1, 3))
    top = draw(st.sampled_from([60.0, 150.0, 400.0]))
    edges = np.linspace(0.0, top, n_gears + 1)
    gears = []
    for g in range(n_gears):
        models = tuple(sorted(draw(st.sets(st.sampled_from(MODELS), min_size=1, max_size=3))))
        thresholds = tuple(draw(st.sampled_from(THRESHOLDS)) for _ in models[:-1])
        entries = []
        for m in models:
            devs = sorted(placement[m])
            weights = [draw(st.integers(0, 3)) for _ in devs]
            if sum(weights) == 0:
                weights[0] = 1
            for d, w in zip(devs, weights, strict=True):
                cap = draw(st.none() | st.integers(1, 5))  # schema 3: a per-replica batch cap
                entries.append((m, f"d{d}", draw(st.integers(1, 4)), w / sum(weights), cap))
        gears.append(
            Gear(
                qps_low=float(edges[g]),
                qps_high=float(edges[g + 1]),
                models=models,
                thresholds=thresholds,
                replicas=_gear_replicas(entries),
            )
        )
    return GearPlan(
        profile=PROFILE.name,
        devices=devices,
        replicas=replicas,
        gears=tuple(gears),
        max_wait_ms=draw(st.none() | st.sampled_from([1.0, 5.0, 12.5, 30.0])),
        max_batch=draw(st.none() | st.integers(1, 6)),
        # the QPS meter's window: one tick (the paper's), or stretched back until it holds a few arrivals
        qps_min_arrivals=draw(st.sampled_from([0, 0, 3, 20])),
    )


@dataclass(frozen=True)
class Hooks:
    aimd_target_s: float | None
    schedule: tuple[int, ...] | None


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[GearPlan, list[float], Hooks]:
    plan = draw(plans())
    # Arrivals on a 0.5 ms grid within 0.6 s, so that ties (two arrivals, an arrival and a batch end) happen.
    slots = draw(st.lists(st.integers(0, 1200), min_size=1, max_size=60))
    arrivals = sorted(s * 0.0005 for s in slots)
    aimd = draw(st.none() | st.sampled_from([0.002, 0.004, 0.008]))
    schedule = None
    if draw(st.booleans()):
        schedule = tuple(draw(st.lists(st.integers(0, len(plan.gears) - 1), min_size=1, max_size=8)))
    return plan, arrivals, Hooks(aimd, schedule)


@property_settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    # The same 60 scenarios every run, so that CI is not a lottery. Hunting with derandomize=False and 1,500
    # examples per seed (2026-11-23) found two disagreements, both pinned in test_trajectory.py: the replay let the
    # producer tick before draining at the drain instant (a harness fault), and the fake clock ran a consumer's
    # re-decision "at now, after the arrivals" at once because it was already due (it now waits its turn by order).
    # Seeds 1-11 x 1,500 examples pass since. To hunt for more: CASCADESERVE_FRESH_EXAMPLES=1500 (tests/property.py).
)
@given(scenarios())
def test_runtime_and_simulator_decide_alike_on_random_plans(scenario: tuple[GearPlan, list[float], Hooks]) -> None:
    plan, arrivals, hooks = scenario
    target = hooks.aimd_target_s

    def make_limit() -> AimdBatchLimit:
        assert target is not None
        return AimdBatchLimit(target, step=1, backoff=0.5)

    _compare(
        PROFILE,
        plan,
        arrivals,
        batch_limit=None if target is None else make_limit,
        gear_schedule=None if hooks.schedule is None else GearSchedule(hooks.schedule),
    )
