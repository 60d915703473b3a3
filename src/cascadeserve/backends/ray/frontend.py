"""The front end: a plain :class:`~cascadeserve.runtime.Runtime` whose placement is the fleet of server actors.

The process that serves HTTP runs the runtime unchanged (admission, the producer's QPS meter and gear selector,
the first-stage routers, deadlines, hot-swap and stop). Only *where the replicas live* differs, and that is the
runtime's injected :class:`~cascadeserve.runtime.Placement`: :class:`RayPlacement` here.

* :meth:`RayPlacement.transport` starts a server for every device of a new plan that has none, and gives the
  generation a :class:`~cascadeserve.backends.ray.transport.FrontTransport` (no queue here: every request goes to
  the server of its replica).
* :meth:`RayPlacement.place` installs the generation on the server of every device of its plan. Calls from one
  process to one actor start in the order sent, so a server sees the plan before its first request.
* :meth:`RayPlacement.start` waits until every server has loaded its replicas, then starts the **sync loop**:
  every producer tick it polls each server with the gears of all live generations (a repair path: a restarted
  server gets its gear back, and any plan it lost is re-installed), and reads back its queue lengths (the Q0 of
  the hysteresis, one tick old), when it applied each gear, and its batch events for the front end's observer.
* :meth:`RayPlacement.retire` tells the servers to drop a drained generation; :meth:`RayPlacement.stop` kills them.

The runtime's deadline timers run ``RayOptions.deadline_slack_s`` late (``RuntimeOptions.deadline_slack_s``): the
server holding a request answers at the deadline itself, and the front end's timer is the safety net for a server
that cannot answer at all. :func:`RayRuntime` builds that composition.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import ray
from ray.exceptions import RayError

from cascadeserve.backends.ray.fleet import Fleet
from cascadeserve.backends.ray.options import ModelSource, RayOptions
from cascadeserve.backends.ray.server import ServerActor
from cascadeserve.backends.ray.transport import FrontTransport
from cascadeserve.plan import Device as PlanDevice
from cascadeserve.plan import GearPlan
from cascadeserve.policy import AimdBatchLimit
from cascadeserve.policy.thresholds import ThresholdDecision
from cascadeserve.profile import Profile
from cascadeserve.runtime import Generation, MonotonicClock, NullObserver, Observer, Runtime, RuntimeOptions

__all__ = ["RayPlacement", "RayRuntime", "server_actors"]


class RayPlacement:
    """The front end's placement: every replica lives on the Ray server actor of its device."""

    def __init__(
        self,
        model_names: Sequence[str],
        *,
        profile: Profile | None,
        models: Mapping[str, ModelSource],
        certainty: str,
        ray_options: RayOptions,
        observer: Observer,
    ) -> None:
        self.model_names = tuple(model_names)
        self.profile = profile
        self.models = models
        self.certainty = certainty
        self.ray_options = ray_options
        self.observer = observer
        self.fleet = Fleet(self._spawn)
        self.generations: list[Generation] = []  # placed and not retired: what the sync loop keeps installed
        self._profile_ref: Any = None
        self._sync_task: asyncio.Task[None] | None = None
        self._syncing: set[str] = set()

    @property
    def emulated(self) -> bool:
        return self.profile is not None

    # -- generations -------------------------------------------------------------------------------------------
    def transport(self, number: int, plan: GearPlan) -> FrontTransport:
        self.fleet.ensure(plan)  # new devices get a server, which loads its replicas in its constructor
        return FrontTransport(plan, number, self.fleet, self.ray_options)

    def place(self, gen: Generation) -> None:
        transport = gen.transport
        assert isinstance(transport, FrontTransport)  # built by transport() just before
        transport.outbox.bind(gen)
        gen.emulated = self.emulated
        self.generations.append(gen)
        for dev in gen.plan.devices:
            self._open(gen, dev.name)

    def retire(self, gen: Generation) -> None:
        # Every request of a hot-swapped generation is answered here, so none is left on any server: drop it there.
        self.generations.remove(gen)
        self.fleet.broadcast(gen.plan, "retire", gen.number)

    def queue_lengths(self, generations: Sequence[Generation]) -> dict[str, int]:
        return self.fleet.queue_lengths()  # the servers hold the queues; their last poll says how long they are

    # -- servers -----------------------------------------------------------------------------------------------
    def _spawn(self, dev: PlanDevice, order: int, plan: GearPlan) -> Any:
        opts = self.ray_options
        gpu = dev.kind.lower().startswith("gpu")
        num_cpus = opts.num_cpus if opts.num_cpus is not None else (0.0 if self.emulated or gpu else 1.0)
        if self.emulated and self._profile_ref is None:
            self._profile_ref = ray.put(self.profile)  # one copy in the object store, shared by every server
        actor = ServerActor.options(
            num_cpus=num_cpus,
            num_gpus=opts.num_gpus if gpu and not self.emulated else 0,
            resources=dict(opts.resources.get(dev.name, {})),
            max_restarts=opts.max_restarts,
            max_task_retries=0,  # we re-route failed calls ourselves (retry elsewhere or fall back)
            max_concurrency=opts.max_concurrency,
        )
        models = _device_models(plan, dev.name, self.models)
        return actor.remote(dev.name, self.model_names, self._profile_ref, models, self.certainty, opts)

    def _open(self, gen: Generation, device: str) -> None:
        handle = self.fleet.handles[device]
        handle.open.remote(
            gen.number,
            gen.plan,
            gen.gear,
            self.fleet.handles,
            _device_models(gen.plan, device, self.models),
            gen.tuning is not None,
        )
        if gen.tuning is not None:  # a (re)started server gets the thresholds in force, not the plan's
            for g in range(gen.tables.n_gears):
                handle.set_thresholds.remote(gen.number, ThresholdDecision.in_force(g, gen.tables.thresholds_of(g)))
        if gen.draining:
            handle.drain.remote(gen.number)

    # -- lifecycle ---------------------------------------------------------------------------------------------
    async def start(self) -> None:
        handles = list(self.fleet.handles.values())
        born = await asyncio.wait_for(
            asyncio.gather(*(h.ping.remote() for h in handles)), timeout=self.ray_options.start_timeout_s
        )
        self.fleet.born = dict(zip(self.fleet.handles, born, strict=True))
        self._sync_task = asyncio.get_running_loop().create_task(self._sync_loop())

    async def _sync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.generations[-1].plan.tick_ms / 1000.0 if self.generations else 0.1)
            for device, h in list(self.fleet.handles.items()):
                if device not in self._syncing:  # a slow server is not polled twice at once
                    self._syncing.add(device)
                    asyncio.get_running_loop().create_task(self._sync_one(device, h))

    async def _sync_one(self, device: str, handle: Any) -> None:
        try:
            gears = {g.number: g.gear for g in self.generations}
            rep = await asyncio.wait_for(handle.sync.remote(gears), timeout=5.0)
        except (RayError, TimeoutError):
            return  # down or restarting: Ray brings it back, and a later poll re-installs its plans
        finally:
            self._syncing.discard(device)
        self.fleet.born[device] = rep["born"]
        self.fleet.lengths[device] = rep["lengths"]
        self.fleet.queues[device] = rep["queues"]
        self.fleet.gear_set_at[device] = rep["gear_set_at"]
        for event in rep["batches"]:  # batch metrics reach the front end's observer one tick late
            self.observer.batch(event)
        known = set(rep["gens"])
        for gen in self.generations:
            lost = gen.number not in known and device in gen.plan.device_index  # a restarted server lost it
            if lost and device in self.fleet.handles:  # (and the runtime is not stopping)
                self._open(gen, device)

    async def stop(self) -> None:
        if self._sync_task is not None:
            self._sync_task.cancel()
            self._sync_task = None
        for gen in self.generations:
            transport = gen.transport
            assert isinstance(transport, FrontTransport)
            transport.outbox.cancel()
        for h in self.fleet.handles.values():
            with contextlib.suppress(Exception):
                ray.kill(h, no_restart=True)
        self.fleet.handles.clear()


def _device_models(plan: GearPlan, device: str, models: Mapping[str, ModelSource]) -> dict[str, ModelSource]:
    """The models of the replicas that ``plan`` puts on ``device`` (what its server loads)."""
    return {r.model: models[r.model] for r in plan.replicas if r.device == device and r.model in models}


def RayRuntime(  # a function with a class's name: callers built a RayRuntime before it was a composition
    plan: GearPlan,
    model_names: Sequence[str],
    *,
    profile: Profile | None = None,
    models: Mapping[str, ModelSource] | None = None,
    certainty: str = "margin",
    ray_options: RayOptions | None = None,
    observer: Observer | None = None,
    options: RuntimeOptions | None = None,
) -> Runtime:
    """A plain :class:`~cascadeserve.runtime.Runtime` whose devices are Ray server actors (a
    :class:`RayPlacement`): emulated from ``profile``, or running ``models``. The HTTP front end serves it
    unchanged. Adaptive batching runs on the servers, each building its replicas' limit from the plan's
    ``batching`` fields (``RuntimeOptions.batching`` sets them); an AIMD ``RuntimeOptions.batch_limit`` becomes
    those fields (its target; the per-replica state lives where the replica does). Any other batch limit object is
    refused: its state cannot follow the replicas to their servers."""
    if (profile is None) == (models is None):
        raise ValueError("give a profile (emulated devices) or models, not both")
    options = options or RuntimeOptions()
    if options.batch_limit is not None:
        limit = options.batch_limit
        if not isinstance(limit, AimdBatchLimit):
            raise ValueError(
                "the Ray backend applies RuntimeOptions.batch_limit only as AIMD; use RuntimeOptions.batching"
            )
        plan = plan.model_copy(update={"batching": "aimd", "batch_target_ms": limit.target_s * 1000.0})
        options = dataclasses.replace(options, batch_limit=None)
    ray_options = ray_options or RayOptions()
    observer = observer or NullObserver()
    placement = RayPlacement(
        model_names,
        profile=profile,
        models=models or {},
        certainty=certainty,
        ray_options=ray_options,
        observer=observer,
    )
    return Runtime(
        plan,
        model_names,
        placement=placement,
        clock=MonotonicClock(),  # servers live in other processes: real time only
        observer=observer,
        options=dataclasses.replace(options, deadline_slack_s=ray_options.deadline_slack_s),
    )


def server_actors(runtime: Runtime) -> dict[str, Any]:
    """The server actor handle per device name (for tests, benchmarks and fault injection)."""
    placement = runtime.placement
    if not isinstance(placement, RayPlacement):
        raise TypeError("the runtime's replicas are not on Ray servers (build it with RayRuntime or RayBackend)")
    return dict(placement.fleet.handles)
