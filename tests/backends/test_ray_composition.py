"""The Ray backend reuses the runtime by composition: no subclass of Runtime or Generation anywhere in
``cascadeserve.backends``; the front end is a plain Runtime with a Ray placement, and a server composes the
runtime's LocalPlacement. None of these tests starts Ray (the server runs in-process)."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import math
import pkgutil

import pytest

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import Profile
from cascadeserve.runtime import Answer, Generation, LocalPlacement, Runtime, RuntimeOptions

pytest.importorskip("ray")
import cascadeserve.backends
from cascadeserve.backends.ray import InferenceServer, RayOptions, RayRuntime, server_actors
from cascadeserve.backends.ray.frontend import RayPlacement
from cascadeserve.backends.ray.options import Item


def test_no_backend_class_subclasses_the_runtime_or_a_generation() -> None:
    modules = [cascadeserve.backends]
    for info in pkgutil.walk_packages(cascadeserve.backends.__path__, "cascadeserve.backends."):
        modules.append(importlib.import_module(info.name))
    assert "cascadeserve.backends.ray.frontend" in {m.__name__ for m in modules}
    for module in modules:
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__:
                assert not issubclass(cls, Runtime | Generation), f"{module.__name__}.{name} subclasses the runtime"


def test_ray_front_end_is_a_plain_runtime_with_a_ray_placement(toy_profile: Profile) -> None:
    plan = fixed_plan(toy_profile, Cascade(("m0",), ()), (Device(name="d0", memory_mb=1000),))
    rt = RayRuntime(plan, toy_profile.model_names, profile=toy_profile, ray_options=RayOptions(deadline_slack_s=0.7))
    assert type(rt) is Runtime
    assert isinstance(rt.placement, RayPlacement) and rt.emulated
    assert rt.options.deadline_slack_s == 0.7  # the runtime's own deadline timer is the servers' safety net
    assert server_actors(rt) == {}  # servers start with the runtime, not before
    with pytest.raises(TypeError, match="not on Ray"):
        server_actors(Runtime(plan, toy_profile.model_names, lambda name, order: None))  # type: ignore[arg-type,return-value]


def test_inference_server_composes_a_local_placement_for_its_device(toy_profile: Profile) -> None:
    devices = (Device(name="d0", memory_mb=1000), Device(name="d1", memory_mb=1000))
    plan = fixed_plan(toy_profile, Cascade(("m0",), ()), devices, min_queue=1, max_wait_ms=1.0)
    mine = [r for r, rep in enumerate(plan.replicas) if rep.device == "d0"]

    async def main() -> tuple[tuple[object, object], dict[str, object]]:
        server = InferenceServer("d0", toy_profile.model_names, toy_profile, {}, "margin", RayOptions())
        assert type(server.placement) is LocalPlacement
        await server.open(0, plan, 0, {}, {})
        out = await server.accept_one(0, mine[0], Item(5, 0, 0.0, 0.0, None, math.inf, None, False))
        report = await server.sync({})
        await server.placement.stop()
        return out, report

    (answer, trail), report = asyncio.run(main())
    assert trail is None  # online tuning off: no trail travels
    assert isinstance(answer, Answer) and answer.model == "m0" and answer.label == toy_profile.predictions[0, 5]
    assert report["gens"] == [0] and set(report["lengths"][0]) == set(mine)  # only d0's replicas queue here


def test_ray_runtime_takes_aimd_as_plan_batching_and_wants_one_model_source(toy_profile: Profile) -> None:
    from cascadeserve.policy import AimdBatchLimit
    from cascadeserve.policy.quantile import QuantileBatchLimit

    plan = fixed_plan(toy_profile, Cascade(("m0",), ()), (Device(name="d0", memory_mb=1000),))
    rt = RayRuntime(
        plan, toy_profile.model_names, profile=toy_profile, options=RuntimeOptions(batch_limit=AimdBatchLimit(0.01))
    )
    # the servers build their replicas' AIMD limits from the plan they receive
    assert rt.options.batch_limit is None
    assert rt._initial_plan.batching == "aimd" and rt._initial_plan.batch_target_ms == pytest.approx(10.0)
    with pytest.raises(ValueError, match="batch_limit only as AIMD"):
        RayRuntime(
            plan,
            toy_profile.model_names,
            profile=toy_profile,
            options=RuntimeOptions(batch_limit=QuantileBatchLimit(0.01)),
        )
    with pytest.raises(ValueError, match="not both"):
        RayRuntime(plan, toy_profile.model_names)
