"""The Ray backend: the same runtime, with one inference-server actor per device of the plan (paper §5, Fig. 4).

Topology::

                 HTTP (V2)                     Ray actor calls (streaming answers back)
    clients ───────────────► front end ─────────────► server[d0] ──forward──► server[d1]
                             (producer)  ◄───answers── (consumer)  ◄─answers── (consumer)
                                 │  gear switches (broadcast on switch, and every tick with the Q0 poll)
                                 └───────────────────► every server

* **Front end = producer.** The process serving HTTP runs a :class:`RayRuntime`, a
  :class:`~cascadeserve.runtime.Runtime` whose replicas all live elsewhere. It does what the paper's producer
  does: admission control, the QPS meter and the gear selector (the runtime's own :class:`Producer`), and the
  first-stage split (the generation's SWRR routers). It sends each request straight to the server actor that holds
  the chosen first-stage replica; requests of one event-loop iteration bound for one replica travel in one call.
* **Inference server = consumer.** A Ray actor per device (``num_cpus``/``num_gpus``/custom resources from the
  plan's device) holds its device, the queues of the replicas placed on it and a
  :class:`~cascadeserve.runtime.consumer.Consumer`: the runtime's classes, unchanged, firing batches by the policy
  core's batch trigger and forwarding unsure samples by its certainty rule. It loads the models of its replicas in
  its constructor, exactly as the placement says (a hot-swapped plan's new replicas load when the plan is
  installed, before it serves), never on a request.
* **Forwarding is server to server.** A sample that stage *k* is unsure of goes from the server of stage *k*
  directly to the server of the stage *k+1* replica that the sender's routers pick; the answer streams back along
  the same chain (``accept`` is a streaming generator, so a sample answered early does not wait for its call-mates).
  Nothing funnels through one actor: each server sees only the traffic of its own replicas, and the front end only
  first-stage sends and final answers. The front end is a single producer per HTTP process, as in the paper; more
  HTTP processes would each run their own producer (not built: they would also need to agree on one gear).
* **Gears.** On a switch the producer broadcasts ``set_gear`` to every server (one actor call each, so it lands
  well within one 100 ms tick), and every tick it polls each server with the gears of all live generations (a
  repair path: a restarted server gets its gear back) and reads back the first stage's queue lengths, whose sum is
  the Q0 of the α·Q0 hysteresis (one tick old, the price of not centralising the queues).
* **Hot-swap** works as on the local backend: the new plan becomes a new generation on the front end and on every
  server (servers for new devices are started), the old one drains everywhere, and no request moves between
  generations.
* **Faults.** Servers are started with ``max_restarts``; Ray restarts a dead one (its constructor reloads its
  replicas; the front end's next poll re-installs the plans it lost). A caller whose call to a dead server fails
  re-routes what it sent: a request no stage has answered yet is retried on another replica of the same model
  (or, if there is none, on the restarted server), up to ``retries`` times; a request that an earlier stage
  already ran is answered with that stage's prediction and ``fallback: true``. Deadlines hold on the server that
  holds the request; the front end keeps a safety deadline ``deadline_slack_s`` later, so no request hangs.

Emulated devices (``--emulate``) ask for no CPU, so a 16-device plan fits on a 2-core Ray instance. Clocks:
servers read ``time.monotonic`` in their own process; answers are re-stamped with the receiver's clock, so
latencies are measured on the front end's clock only.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
import yaml
from ray.exceptions import RayError

from cascadeserve.plan import Device as PlanDevice
from cascadeserve.plan import GearPlan
from cascadeserve.profile import Profile
from cascadeserve.runtime import (
    Answer,
    BatchEvent,
    Clock,
    DeadlineExceeded,
    Device,
    EmulatedDevice,
    Generation,
    ModelConfig,
    ModelFailed,
    ModelFn,
    MonotonicClock,
    NullObserver,
    Observer,
    Request,
    Runtime,
    RuntimeOptions,
    RuntimeStopped,
    ServingError,
    ThreadDevice,
    answer_early,
    load_model,
)
from cascadeserve.runtime.consumer import Consumer
from cascadeserve.runtime.transport import LocalTransport

__all__ = [
    "InferenceServer",
    "ModelSource",
    "RayBackend",
    "RayOptions",
    "RayRuntime",
    "ServerLost",
    "model_sources",
    "server_actors",
]

ModelSource = ModelFn | str | tuple[str, Mapping[str, Any]]
"""How a server gets a model: a picklable callable, or ``module:factory`` (with kwargs) that the server imports."""

# What travels per request between processes (plain tuples: they pickle fast):
# (payload, gear, queue_s, compute_s, best, remaining_s)
_Item = tuple[Any, int, float, float, tuple[int, float, int] | None, float]
# An answer, or ("error", exception class name, HTTP status, message, model)
_Result = Answer | tuple[str, str, int, str, str]


class ServerLost(ServingError):
    """The server holding a request died and no retry or earlier stage could answer it (HTTP 503)."""

    status = 503


class _RemoteError(ServingError):
    """A serving error raised in another process, with that error's HTTP status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class RayOptions:
    """How the Ray backend connects and what its server actors ask for."""

    address: str | None = None  # None: this process's Ray (started here if none); "auto"; "ray://host:10001"
    init_kwargs: Mapping[str, Any] = field(default_factory=dict)  # extra ray.init arguments for a new instance
    namespace: str | None = None
    max_restarts: int = 3  # Ray restarts a dead server this many times
    retries: int = 2  # re-sends of a request whose server died before any stage answered it
    deadline_slack_s: float = 1.0  # the front end's safety deadline comes this much after the servers'
    num_cpus: float | None = None  # per server; default 0 for emulated devices, 1 for a CPU device
    num_gpus: float = 1.0  # per server of a device whose kind starts with "gpu"
    resources: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # device name -> custom resources
    max_concurrency: int = 10_000  # concurrent calls per server (each call is one group of requests)
    start_timeout_s: float = 120.0  # how long start() waits for every server to load its replicas


# -- encoding between processes ----------------------------------------------------------------------------------
def _items(reqs: Sequence[Request], now: float) -> list[_Item]:
    return [(r.payload, r.gear, r.queue_s, r.compute_s, r.best, r.deadline - now) for r in reqs]


def _encode(fut: asyncio.Future[Answer]) -> _Result:
    exc = fut.exception()
    if exc is None:
        return fut.result()
    return ("error", type(exc).__name__, int(getattr(exc, "status", 500)), str(exc), str(getattr(exc, "model", "")))


def _decode_error(res: tuple[str, str, int, str, str]) -> ServingError:
    _, kind, status, message, model = res
    if kind == "DeadlineExceeded":
        return DeadlineExceeded(message)
    if kind == "RuntimeStopped":
        return RuntimeStopped(message)
    if kind == "ModelFailed":  # rebuilt without its cause (which may not pickle), message and model kept
        err = ModelFailed.__new__(ModelFailed)
        ServingError.__init__(err, message)
        err.model = model
        return err
    return _RemoteError(message, status)


# -- sending requests to the server of a replica -----------------------------------------------------------------
class _Outbox:
    """Requests of one generation bound for replicas on other servers.

    Requests put in one event-loop iteration go out together, one call per replica (so a burst costs one actor
    call per replica, not one per request). The answers stream back; when the callee dies, the requests it had
    are re-routed (see the module docstring). A request stays live in the sender's generation until answered, so
    the sender's deadline and exactly-once guarantees keep holding while it is away.
    """

    def __init__(self, handle: Callable[[str], Any], options: RayOptions) -> None:
        self.handle = handle
        self.options = options
        self.pending: dict[int, list[Request]] = {}
        self._scheduled = False
        self.tasks: set[asyncio.Task[None]] = set()
        self._gen: Generation | None = None

    @property
    def gen(self) -> Generation:
        assert self._gen is not None, "the outbox's generation is bound right after it is built"
        return self._gen

    def bind(self, gen: Generation) -> None:
        self._gen = gen

    def put(self, req: Request, replica: int) -> None:
        self.pending.setdefault(replica, []).append(req)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        pending, self.pending = self.pending, {}
        for replica, reqs in pending.items():
            self._spawn(self._send(replica, reqs, 0))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _send(self, replica: int, reqs: list[Request], attempt: int) -> None:
        gen = self.gen
        left = dict(enumerate(reqs))
        try:
            handle = self.handle(gen.plan.replicas[replica].device)
            items = _items(reqs, gen.clock.now())
            if len(items) == 1:  # one request cannot wait on call-mates: a plain call is cheaper than a stream
                (res,) = await handle.accept_one.remote(gen.number, replica, items[0])
                self._apply(left.pop(0), res)
            else:
                async for ref in handle.accept.remote(gen.number, replica, items):
                    for i, res in await ref:
                        self._apply(left.pop(i), res)
        except (RayError, KeyError) as e:  # the server died, restarts, or lost the generation
            self._recover(list(left.values()), replica, attempt, e)
            return
        if left:  # the stream ended without answering everything: treat like a lost server
            self._recover(list(left.values()), replica, attempt, RuntimeError("the server's answer stream ended"))

    def _apply(self, req: Request, res: _Result) -> None:
        if isinstance(res, Answer):
            if not req.resolve(dataclasses.replace(res, finished=self.gen.clock.now())):
                self.gen.observer.refused_duplicate()
        else:
            req.fail(_decode_error(res))

    def _recover(self, reqs: list[Request], replica: int, attempt: int, cause: BaseException) -> None:
        gen = self.gen
        now = gen.clock.now()
        rid = gen.plan.replicas[replica].id
        retry: dict[int, list[Request]] = {}
        for req in reqs:
            if req.done:
                continue
            lost = ServerLost(f"the server of replica {rid} failed ({type(cause).__name__}) and retries ran out")
            if req.best is not None:  # an earlier stage ran: answer with it, marked fallback
                answer_early(req, now, lost)
            elif attempt < self.options.retries and now < req.deadline:
                alt = gen.tables.failover(req.gear, replica, gen.replica_device[replica])
                retry.setdefault(alt, []).append(req)
            else:
                req.fail(lost)
        for alt, group in retry.items():
            self._spawn(self._resend(alt, group, attempt + 1, same=alt == replica))

    async def _resend(self, replica: int, reqs: list[Request], attempt: int, *, same: bool) -> None:
        if same:  # only this replica serves the model: give Ray a moment to restart its server
            await asyncio.sleep(0.05 * attempt)
        await self._send(replica, reqs, attempt)

    def cancel(self) -> None:
        for t in list(self.tasks):
            t.cancel()


# -- the inference server (runs inside a Ray actor) --------------------------------------------------------------
class _ServerTransport(LocalTransport):
    """A server's transport: replicas on this server's device queue here; the others go to their servers."""

    __slots__ = ("gear_set_at", "local", "outbox")

    def __init__(self, plan: GearPlan, device: str, handle: Callable[[str], Any], options: RayOptions) -> None:
        super().__init__(len(plan.replicas))
        self.local = [rep.device == device for rep in plan.replicas]
        self.outbox = _Outbox(handle, options)
        self.gear_set_at = 0.0

    def send(self, req: Request, replica: int, now: float) -> None:
        if self.local[replica]:
            super().send(req, replica, now)
        else:
            self.outbox.put(req, replica)

    def on_gear(self, gear: int) -> None:
        self.gear_set_at = time.monotonic()
        super().on_gear(gear)


class _ServerRuntime(Runtime):
    """The runtime's composition on one server: its one device, and the generations it was given."""

    def __init__(
        self,
        device: str,
        order: int,
        plan: GearPlan,
        model_names: Sequence[str],
        make_device: Callable[[str, int], Device],
        ray_options: RayOptions,
        **kwargs: Any,
    ) -> None:
        # A server is never start()ed (it has no producer); the plans it serves, ``plan`` included, arrive with open().
        super().__init__(plan, model_names, make_device, **kwargs)
        self.ray_options = ray_options
        self.device = device
        self.order = order
        self.peers: dict[str, Any] = {}
        self.gens: dict[int, Generation] = {}
        self.opened: dict[int, asyncio.Event] = {}

    def handle(self, device: str) -> Any:
        return self.peers[device]

    def create_generation(self, number: int, plan: GearPlan, initial_qps: float) -> Generation:
        transport = _ServerTransport(plan, self.device, self.handle, self.ray_options)
        gen = Generation(
            number,
            plan,
            self.model_names,
            clock=self.clock,
            admission=self.admission,
            observer=self.observer,
            transport=transport,
        )
        transport.outbox.bind(gen)
        consumer = self.consumers.get(self.device)
        if consumer is None:
            consumer = Consumer(
                self.device_factory(self.device, self.order), self.clock, self.observer, order=self.order
            )
            self.consumers[self.device] = consumer
        for r, local in enumerate(transport.local):
            if local:
                consumer.add_lane(gen, r, transport.attach(r, consumer))
        gen.emulated = consumer.device.emulated
        return gen


class _BatchLog(NullObserver):
    """Keeps the server's batch events until the producer's next poll carries them to the front end's observer."""

    def __init__(self, limit: int = 20_000) -> None:
        self.events: list[BatchEvent] = []
        self.limit = limit

    def batch(self, event: BatchEvent) -> None:
        if len(self.events) < self.limit:  # a front end that stopped polling must not grow this without bound
            self.events.append(event)

    def take(self) -> list[BatchEvent]:
        out, self.events = self.events, []
        return out


class InferenceServer:
    """One device: its replicas' queues, its consumer and its models (the body of a Ray server actor)."""

    def __init__(
        self,
        device: str,
        order: int,
        plan: GearPlan,
        model_names: Sequence[str],
        profile: Profile | None,
        models: Mapping[str, ModelSource],
        certainty: str,
        options: RayOptions,
    ) -> None:
        self.born = time.monotonic()
        self.device = device
        self.model_names = tuple(model_names)
        self.profile = profile
        self.certainty = certainty
        self.clock: Clock = MonotonicClock()
        self.fns: dict[int, ModelFn] = {}
        self._load(models)  # at start-up, exactly the models of this device's replicas
        self.log = _BatchLog()
        self.rt = _ServerRuntime(
            device,
            order,
            plan,
            self.model_names,
            self._make_device,
            options,
            clock=self.clock,
            observer=self.log,
            options=RuntimeOptions(max_in_flight=None, run_producer=False),
        )
        self._rid = 0

    def _load(self, models: Mapping[str, ModelSource]) -> None:
        for name, src in models.items():
            row = self.model_names.index(name)
            if row in self.fns:
                continue
            if isinstance(src, tuple):
                self.fns[row] = load_model(src[0], src[1])
            else:
                self.fns[row] = load_model(src)

    def _make_device(self, name: str, order: int) -> Device:
        if self.profile is not None:
            return EmulatedDevice(name, self.profile, self.clock, order=order)
        # The dict is shared, so models loaded for a later plan reach the device without rebuilding it.
        dev = ThreadDevice(name, {}, self.certainty)
        dev.models = self.fns
        return dev

    async def ping(self) -> float:
        return self.born

    async def open(
        self, number: int, plan: GearPlan, gear: int, peers: Mapping[str, Any], models: Mapping[str, ModelSource]
    ) -> None:
        """Install generation ``number`` (loading any model it places here that is not loaded yet)."""
        self.rt.peers.update(peers)
        if number in self.rt.gens:
            return
        self._load(models)
        gen = self.rt.create_generation(number, plan, 0.0)
        gen.set_gear(gear)
        self.rt.gens[number] = gen
        self.rt.generations.append(gen)
        self.rt.opened.setdefault(number, asyncio.Event()).set()

    async def _generation(self, number: int) -> Generation:
        gen = self.rt.gens.get(number)
        if gen is None:  # a restarted server: the front end's next poll re-installs its plans
            event = self.rt.opened.setdefault(number, asyncio.Event())
            await asyncio.wait_for(event.wait(), timeout=10.0)
            gen = self.rt.gens[number]
        return gen

    def _queue(self, gen: Generation, replica: int, items: Sequence[_Item]) -> list[Request]:
        now = self.clock.now()
        loop = asyncio.get_running_loop()
        out = []
        for payload, gear, queue_s, compute_s, best, remaining in items:
            self.rt.admission.add(1)  # unbounded here: the front end bounds admission; keeps release balanced
            req = Request(self._rid, payload, now, gen, gear, loop.create_future(), now + remaining)
            self._rid += 1
            req.queue_s, req.compute_s, req.best = queue_s, compute_s, best
            gen.admit(req, now, replica)
            if remaining != math.inf:
                self.rt.set_deadline(req, max(0.0, remaining))
            out.append(req)
        return out

    async def accept(
        self, number: int, replica: int, items: Sequence[_Item]
    ) -> AsyncIterator[list[tuple[int, _Result]]]:
        """Queue ``items`` on ``replica`` and stream ``(index, answer)`` groups back as they are answered."""
        gen = await self._generation(number)
        reqs = self._queue(gen, replica, items)
        pending: dict[asyncio.Future[Answer], int] = {req.future: i for i, req in enumerate(reqs)}
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            yield [(pending.pop(f), _encode(f)) for f in done]

    async def accept_one(self, number: int, replica: int, item: _Item) -> tuple[_Result]:
        """:meth:`accept` for a single request: one plain call, answered when the request is."""
        gen = await self._generation(number)
        (req,) = self._queue(gen, replica, [item])
        with contextlib.suppress(ServingError):
            await req.future
        return (_encode(req.future),)

    async def set_gear(self, number: int, gear: int) -> None:
        gen = self.rt.gens.get(number)
        if gen is not None:
            gen.set_gear(gear)

    async def drain(self, number: int | None = None) -> None:
        """Drain one generation (a hot-swap replaced it) or all (the front end is stopping).

        A hot-swapped generation is only drained here, not retired: requests of it may still arrive (sent by the
        front end in the same loop iteration as the swap, or forwarded by another server), so it stays installed
        until the front end, which holds every request until its answer, says :meth:`retire`. A stop retires
        every generation once it is empty.
        """
        for gen in list(self.rt.gens.values()):
            if number is None or gen.number == number:
                if number is None:
                    gen.on_drained = self._retire
                gen.drain()

    async def retire(self, number: int) -> None:
        """Drop generation ``number`` once nothing of it is left here (the front end answered all of it)."""
        gen = self.rt.gens.get(number)
        if gen is not None:
            gen.on_drained = self._retire
            gen.drain()

    def _retire(self, gen: Generation) -> None:
        self.rt.gens.pop(gen.number, None)
        self.rt._retire(gen)

    async def sync(self, gears: Mapping[int, int]) -> dict[str, Any]:
        """The producer's per-tick poll: apply the gears, report Q0 per generation and every queue length."""
        for number, gear in gears.items():
            gen = self.rt.gens.get(number)
            if gen is not None and gen.gear != gear:
                gen.set_gear(gear)
        return {
            "born": self.born,
            "gens": sorted(self.rt.gens),
            "lengths": {n: _local_lengths(g) for n, g in self.rt.gens.items()},
            "queues": self.rt.queue_lengths(),
            "gear_set_at": {n: _server_transport(g).gear_set_at for n, g in self.rt.gens.items()},
            "gears": {n: g.gear for n, g in self.rt.gens.items()},
            "batches": self.log.take(),
        }


def _server_transport(gen: Generation) -> _ServerTransport:
    transport = gen.transport
    assert isinstance(transport, _ServerTransport)
    return transport


def _local_lengths(gen: Generation) -> dict[int, int]:
    """The queue length of each replica of ``gen`` that lives on this server."""
    transport = _server_transport(gen)
    return {r: len(q) for r, (q, local) in enumerate(zip(transport.queues, transport.local, strict=True)) if local}


_ServerActor = ray.remote(InferenceServer)


# -- the front end -----------------------------------------------------------------------------------------------
class _FrontTransport:
    """The front end's transport: it holds no queue; every request goes to the server of its replica, and queue
    lengths are those the servers reported at the producer's last poll (one tick old)."""

    def __init__(self, plan: GearPlan, number: int, fleet: _Fleet, options: RayOptions) -> None:
        self.plan = plan
        self.number = number
        self.fleet = fleet
        self.outbox = _Outbox(fleet.handle, options)
        self.switched_at = 0.0

    def send(self, req: Request, replica: int, now: float) -> None:
        self.outbox.put(req, replica)

    def queue_length(self, replica: int) -> int:
        reported = self.fleet.lengths.get(self.plan.replicas[replica].device, {})
        return reported.get(self.number, {}).get(replica, 0)

    def on_gear(self, gear: int) -> None:
        self.switched_at = time.monotonic()
        self.fleet.broadcast(self.plan, "set_gear", self.number, gear)

    def on_drain(self) -> None:
        self.fleet.broadcast(self.plan, "drain", self.number)


def _front_transport(gen: Generation) -> _FrontTransport:
    transport = gen.transport
    assert isinstance(transport, _FrontTransport)
    return transport


class _Fleet:
    """The server actors, by device name, and what their last poll said."""

    def __init__(self, spawn: Callable[[PlanDevice, int, GearPlan], Any]) -> None:
        self.spawn = spawn
        self.handles: dict[str, Any] = {}
        self.born: dict[str, float] = {}
        self.lengths: dict[str, dict[int, dict[int, int]]] = {}  # device -> generation -> replica -> length
        self.queues: dict[str, dict[str, int]] = {}
        self.gear_set_at: dict[str, dict[int, float]] = {}

    def handle(self, device: str) -> Any:
        return self.handles[device]

    def ensure(self, plan: GearPlan) -> None:
        for d, dev in enumerate(plan.devices):
            if dev.name not in self.handles:
                self.handles[dev.name] = self.spawn(dev, d, plan)

    def broadcast(self, plan: GearPlan, method: str, *args: Any) -> None:
        """Call ``method`` on the server of every device of ``plan`` (fire and forget)."""
        for dev in plan.devices:
            h = self.handles.get(dev.name)
            if h is not None:
                getattr(h, method).remote(*args)


def _device_models(plan: GearPlan, device: str, models: Mapping[str, ModelSource]) -> dict[str, ModelSource]:
    return {r.model: models[r.model] for r in plan.replicas if r.device == device and r.model in models}


class RayRuntime(Runtime):
    """A :class:`Runtime` whose devices are Ray server actors; the HTTP front end serves it unchanged."""

    def __init__(
        self,
        plan: GearPlan,
        model_names: Sequence[str],
        *,
        profile: Profile | None = None,
        models: Mapping[str, ModelSource] | None = None,
        certainty: str = "margin",
        ray_options: RayOptions | None = None,
        observer: Observer | None = None,
        options: RuntimeOptions | None = None,
    ) -> None:
        super().__init__(
            plan, model_names, _no_local_device, clock=MonotonicClock(), observer=observer, options=options
        )
        if (profile is None) == (models is None):
            raise ValueError("give a profile (emulated devices) or models, not both")
        if self.options.batch_limit is not None:  # its state would have to live on every server: not built
            raise ValueError("the Ray backend does not apply RuntimeOptions.batch_limit (AIMD batching); use local")
        self.ray_options = ray_options or RayOptions()
        self.profile = profile
        self.models: Mapping[str, ModelSource] = models or {}
        self.certainty = certainty
        self._profile_ref: Any = None
        self.fleet = _Fleet(self._spawn)
        self._sync_task: asyncio.Task[None] | None = None
        self._syncing: set[str] = set()

    @property
    def emulated(self) -> bool:
        return self.profile is not None

    # -- servers -----------------------------------------------------------------------------------------------
    def _spawn(self, dev: PlanDevice, order: int, plan: GearPlan) -> Any:
        opts = self.ray_options
        gpu = dev.kind.lower().startswith("gpu")
        num_cpus = opts.num_cpus if opts.num_cpus is not None else (0.0 if self.emulated or gpu else 1.0)
        if self.emulated and self._profile_ref is None:
            self._profile_ref = ray.put(self.profile)  # one copy in the object store, shared by every server
        actor = _ServerActor.options(
            num_cpus=num_cpus,
            num_gpus=opts.num_gpus if gpu and not self.emulated else 0,
            resources=dict(opts.resources.get(dev.name, {})),
            max_restarts=opts.max_restarts,
            max_task_retries=0,  # we re-route failed calls ourselves (retry elsewhere or fall back)
            max_concurrency=opts.max_concurrency,
        )
        return actor.remote(
            dev.name,
            order,
            plan,
            self.model_names,
            self._profile_ref,
            _device_models(plan, dev.name, self.models),
            self.certainty,
            opts,
        )

    def _open(self, gen: Generation, device: str) -> None:
        self.fleet.handles[device].open.remote(
            gen.number, gen.plan, gen.gear, self.fleet.handles, _device_models(gen.plan, device, self.models)
        )
        if gen.draining:
            self.fleet.handles[device].drain.remote(gen.number)

    def create_generation(self, number: int, plan: GearPlan, initial_qps: float) -> Generation:
        self.fleet.ensure(plan)  # new devices get a server, which loads its replicas in its constructor
        transport = _FrontTransport(plan, number, self.fleet, self.ray_options)
        gen = Generation(
            number,
            plan,
            self.model_names,
            clock=self.clock,
            admission=self.admission,
            observer=self.observer,
            initial_qps=initial_qps,
            gear_schedule=self.options.gear_schedule,
            transport=transport,
            emulated=self.emulated,
        )
        transport.outbox.bind(gen)
        # Install it on the server of every device of the plan. Calls from this process to one actor start in the
        # order sent, so a server sees the plan before its first request (and waits for it if it does not).
        for dev in plan.devices:
            self._open(gen, dev.name)
        return gen

    # -- lifecycle ---------------------------------------------------------------------------------------------
    async def start(self) -> None:
        await super().start()
        handles = list(self.fleet.handles.values())
        born = await asyncio.wait_for(
            asyncio.gather(*(h.ping.remote() for h in handles)), timeout=self.ray_options.start_timeout_s
        )
        self.fleet.born = dict(zip(self.fleet.handles, born, strict=True))
        self._sync_task = asyncio.get_running_loop().create_task(self._sync_loop())

    async def _sync_loop(self) -> None:
        tick = self.plan.tick_ms / 1000.0
        while True:
            await asyncio.sleep(tick)
            for device, h in list(self.fleet.handles.items()):
                if device not in self._syncing:
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

    def set_deadline(self, req: Request, timeout_s: float) -> None:
        # The server holding the request answers at the deadline (with a fallback when a stage ran); this timer is
        # the safety net for a server that cannot answer at all.
        super().set_deadline(req, timeout_s + self.ray_options.deadline_slack_s)

    def drain(self) -> None:
        super().drain()  # each front generation's drain() tells its servers to drain too

    def _retire(self, gen: Generation) -> None:
        # Every request of a hot-swapped generation is answered here, so none is left on any server: drop it there.
        self.fleet.broadcast(gen.plan, "retire", gen.number)
        super()._retire(gen)

    async def stop(self, grace_s: float = 5.0) -> None:
        if self._sync_task is not None:
            self._sync_task.cancel()
            self._sync_task = None
        await super().stop(grace_s)
        for gen in list(self.generations):
            _front_transport(gen).outbox.cancel()
        for h in self.fleet.handles.values():
            with contextlib.suppress(Exception):
                ray.kill(h, no_restart=True)
        self.fleet.handles.clear()

    def queue_lengths(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for rep in self.fleet.queues.values():
            for rid, n in rep.items():
                out[rid] = out.get(rid, 0) + n
        return out


def _no_local_device(name: str, order: int) -> Device:
    raise RuntimeError("the Ray front end runs no device itself")


def server_actors(runtime: RayRuntime) -> dict[str, Any]:
    """The server actor handle per device name (for tests, benchmarks and fault injection)."""
    return dict(runtime.fleet.handles)


class RayBackend:
    """Builds :class:`RayRuntime` s, connecting to Ray (or starting a local instance) on first use."""

    name = "ray"

    def __init__(self, options: RayOptions | None = None, *, model_sources: Mapping[str, ModelSource] | None = None):
        self.options = options or RayOptions()
        self.model_sources = model_sources  # module:factory refs the servers load themselves (see the CLI)

    def connect(self) -> None:
        if ray.is_initialized():
            return
        kwargs: dict[str, Any] = {"namespace": self.options.namespace, "log_to_driver": False}
        if self.options.address is None:
            kwargs.update(include_dashboard=False)
        kwargs.update(self.options.init_kwargs)
        ray.init(address=self.options.address, **kwargs)

    def emulated_runtime(
        self,
        profile: Profile,
        plan: GearPlan,
        *,
        clock: Clock | None = None,
        observer: Observer | None = None,
        options: RuntimeOptions | None = None,
    ) -> Runtime:
        _real_clock(clock)
        plan.check_against(profile)
        self.connect()
        return RayRuntime(
            plan, profile.model_names, profile=profile, ray_options=self.options, observer=observer, options=options
        )

    def local_runtime(
        self,
        plan: GearPlan,
        models: ModelConfig,
        *,
        clock: Clock | None = None,
        observer: Observer | None = None,
        options: RuntimeOptions | None = None,
    ) -> Runtime:
        _real_clock(clock)
        names = tuple(models.models)
        missing = sorted(set(plan.models()) - set(names))
        if missing:
            raise KeyError(f"the plan needs models {', '.join(missing)}, which the models config does not define")
        self.connect()
        sources: Mapping[str, ModelSource] = self.model_sources or models.models
        return RayRuntime(
            plan,
            names,
            models=sources,
            certainty=models.certainty,
            ray_options=self.options,
            observer=observer,
            options=options,
        )


def model_sources(path: str | Path) -> dict[str, ModelSource] | None:
    """The ``module:factory`` references of a models config (mapping form), for servers to import themselves, so
    each loads only the models placed on it. ``None`` for an adapter config (a ``models:`` list): its models are
    built by the front end and shipped to the servers pickled."""
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or not isinstance(raw.get("models"), dict):
        return None
    out: dict[str, ModelSource] = {}
    for name, entry in raw["models"].items():
        if isinstance(entry, str):
            out[str(name)] = entry
        elif isinstance(entry, dict) and isinstance(entry.get("factory"), str):
            out[str(name)] = (entry["factory"], dict(entry.get("kwargs") or {}))
        else:
            return None
    return out


def _real_clock(clock: Clock | None) -> None:
    if clock is not None and not isinstance(clock, MonotonicClock):
        raise ValueError("the Ray backend runs on real time only (servers live in other processes)")
