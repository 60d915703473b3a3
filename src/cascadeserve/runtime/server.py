"""The runtime: producer, consumers and devices wired to one plan generation at a time (paper §5, Fig. 4).

:class:`Runtime` is the composition root and the public face of the package:

* :meth:`Runtime.submit` admits a batch of rows (each row is one request, with its own path through the
  cascade) as the :class:`~cascadeserve.policy.AdmissionPolicy` decides: all of them, or none, shed with
  :class:`~cascadeserve.runtime.request.Overloaded` (and a retry hint) when the bounded admission queue has no
  room, or refused with :class:`~cascadeserve.runtime.request.TooLarge` when the call alone exceeds it; each
  returned :class:`~cascadeserve.runtime.request.Request` has a future that resolves to
  an :class:`~cascadeserve.runtime.request.Answer` exactly once.
* Optional per-request deadlines answer with the last stage's prediction (``fallback``) or fail with
  :class:`~cascadeserve.runtime.request.DeadlineExceeded` when no stage has run.
* :meth:`Runtime.swap_plan` hot-swaps the plan (a new :class:`Generation`; the old one drains).
* :meth:`Runtime.stop` stops admitting, drains what is in flight for a grace period and fails the rest.

Where the replicas live is not the runtime's business but its :class:`~cascadeserve.runtime.placement.Placement`'s,
injected at construction: :class:`~cascadeserve.runtime.placement.LocalPlacement` (a consumer per device in this
process) unless told otherwise. The placement builds each generation's transport and consumers and hears of the
runtime's lifecycle, so another backend (Ray) composes a plain :class:`Runtime` with its own placement instead of
subclassing it. ``RuntimeOptions.deadline_slack_s`` delays the runtime's own deadline timers, for a placement whose
remote servers enforce the deadline themselves (the local timer is then only a safety net).

:class:`RuntimeOptions` may carry the simulator's two optional policy hooks, with the simulator's semantics and
the same policy objects (:mod:`cascadeserve.simulate.engine`): ``batch_limit``
(:class:`~cascadeserve.policy.AimdBatchLimit`; the consumer caps every batch at ``limit(replica)`` and reports
the batch's measured device time to ``observe``) and ``gear_schedule`` (:class:`~cascadeserve.policy.GearSchedule`;
the producer takes ``gear_at(k)`` on its ``k``-th tick in place of the QPS-driven selector). A gear schedule
indexes the initial plan's gears, so a runtime with one refuses :meth:`Runtime.swap_plan`; a batch limit indexes
the initial plan's replicas, so after a swap the new generation gets a fresh AIMD limit with the same target
(through the plan's ``batching`` fields, which is also how a Ray server builds one).

Clipper's serving layer: ``RuntimeOptions.batching`` (``plan``, ``aimd``, ``quantile``) overrides every served
plan's ``batching`` field (the initial and each hot-swapped one), and ``RuntimeOptions.cache_size`` turns on the
prediction cache (:class:`~cascadeserve.policy.cache.PredictionCache`): :meth:`Runtime.submit` answers a payload
the cache holds at once (``Answer.cached``; it never reaches admission or a queue), and a plan swap that changes
the cascades empties it.

Online threshold tuning: ``RuntimeOptions.tuning`` (a factory of :class:`~cascadeserve.policy.tuning.OnlineTuning`
over a generation's tables) turns on audit sampling and Apparate's threshold tuning in every generation served,
with the simulator's semantics (:mod:`cascadeserve.runtime.tuning`); :attr:`Runtime.tuning` is the current one's.

All of it runs on one asyncio event loop; only model code runs on device threads. Everything that *decides*
lives in :mod:`cascadeserve.policy` and is shared with the simulator.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cascadeserve.plan import GearPlan
from cascadeserve.policy import (
    AdmissionPolicy,
    AimdBatchLimit,
    DrainMeter,
    GearSchedule,
    PlanTables,
    Readiness,
    WaitBudget,
    readiness,
)
from cascadeserve.policy.adaptive import Batching, BatchLimit
from cascadeserve.policy.cache import PredictionCache, input_key
from cascadeserve.profile.slowdown import Slowdowns
from cascadeserve.runtime.clock import Clock, MonotonicClock, call_later
from cascadeserve.runtime.device import Device
from cascadeserve.runtime.generation import Generation
from cascadeserve.runtime.lag import LoopLag
from cascadeserve.runtime.observer import NullObserver, Observer, SwapReason
from cascadeserve.runtime.placement import LocalPlacement, Placement
from cascadeserve.runtime.producer import Producer
from cascadeserve.runtime.queue import Admission
from cascadeserve.runtime.request import (
    Answer,
    ClientGone,
    DeadlineExceeded,
    Overloaded,
    Request,
    RuntimeStopped,
    ServingError,
    TooLarge,
)
from cascadeserve.runtime.tuning import ServingTuning, TuningFactory

__all__ = ["Runtime", "RuntimeOptions", "answer_early", "arm_deadline"]


@dataclass(frozen=True)
class RuntimeOptions:
    """Knobs of the runtime itself (the plan carries the serving policy), and the optional policy hooks.

    ``batch_limit`` holds per-replica state: give every runtime a fresh one (an options value with a batch limit
    must not be shared between runtimes, nor with a simulation).
    """

    max_in_flight: int | None = 4096  # admission bound: requests admitted and not yet answered
    retry_after_s: float = 1.0  # what a shed request is told to wait (count bound; by time it comes from the backlog)
    # Admission by time (policy.WaitBudget): shed a request that would wait over this many SLOs behind the backlog,
    # which drains at the plan's capacity (its highest gear's QPS, or capacity_qps). None: the count bound only.
    max_wait_slos: float | None = None
    capacity_qps: float | None = None
    slo_ms: float | None = None  # the latency objective (default: the plan's p95 SLO, else policy.DEFAULT_SLO_MS)
    default_timeout_s: float | None = None  # deadline of a request that names none (None: no deadline)
    stall_after_s: float = 10.0  # readiness: a batch running, or a request waiting on a free device, this long
    run_producer: bool = True  # tests that drive ticks by hand turn the tick loop off
    batch_limit: BatchLimit | None = None  # adaptive cap on each replica's batches (MS+); None: the plan's batching
    gear_schedule: GearSchedule | None = None  # gear per producer tick (Cocktail+); None: the QPS-driven selector
    deadline_slack_s: float = 0.0  # deadline timers fire this much late (a remote server answers at the deadline)
    batching: Batching | None = None  # overrides each served plan's batching field (serve --batching)
    cache_size: int | None = None  # prediction cache entries (serve --cache-size); None or 0: no cache
    cache: PredictionCache[Any] | None = None  # the cache itself (the simulator's hook), in place of cache_size's
    admission: AdmissionPolicy | None = None  # the admission policy itself (the simulator's), in place of the bounds
    # online threshold tuning (serve --tune): builds each served plan's OnlineTuning from its generation's tables
    tuning: TuningFactory | None = None
    # labels known in advance (a replay: payload -> label): tuning against labels takes each whole record's label
    # at once, as a client giving feedback the moment the record is complete; None: the clients' feedback
    tuning_labels: Callable[[Any], int] | None = None
    # fault hook (serve --slowdown): device/model slowdowns from a time on, on emulated and real devices alike
    slowdowns: Slowdowns | None = None


class Runtime:
    """Serves a gear plan on a set of devices: built by ``device_factory(name, order)`` in this process, or wherever
    ``placement`` puts them (give one or the other; a placement must share the runtime's clock and observer)."""

    def __init__(
        self,
        plan: GearPlan,
        model_names: Sequence[str],
        device_factory: Callable[[str, int], Device] | None = None,
        *,
        placement: Placement | None = None,
        clock: Clock | None = None,
        observer: Observer | None = None,
        options: RuntimeOptions | None = None,
    ) -> None:
        self.model_names = tuple(model_names)
        self.clock: Clock = clock or MonotonicClock()
        self.observer: Observer = observer or NullObserver()
        self.options = options or RuntimeOptions()
        if (device_factory is None) == (placement is None):
            raise ValueError("give a runtime a device_factory (local devices) or a placement, not both")
        if placement is None:
            assert device_factory is not None  # checked just above
            placement = LocalPlacement(device_factory, self.clock, self.observer)
        self.placement: Placement = placement
        if self.options.gear_schedule is not None:  # refuse a schedule naming a gear the plan lacks, now
            PlanTables(plan, {m: i for i, m in enumerate(self.model_names)}).gear_policy(self.options.gear_schedule)
        self.admission_policy = self.admission_for(plan)
        self.admission = Admission()
        size, cache = self.options.cache_size, self.options.cache
        if cache is None and size:
            cache = PredictionCache(size)
        self.cache: PredictionCache[Answer] | None = cache
        self._full_since: float | None = None  # when admission was last seen full (readiness)
        self._lag = LoopLag()  # how late the event loop runs: admission sheds while it lags (policy/admission.py)
        self.drain_meter = DrainMeter()  # the measured drain rate, for admission by time
        self.generations: list[Generation] = []
        self._generation_count = 0
        self._initial_plan = plan
        self._producer: Producer | None = None
        self._producer_task: asyncio.Task[None] | None = None
        self.accepting = False
        self.tick_listeners: list[Callable[[float, float], None]] = []  # (t, qps) after every producer tick
        self.shed_total = 0  # rows refused with 503 for overload since the start (not those too large ever to admit)

    # -- lifecycle ---------------------------------------------------------------------------------------------
    async def start(self) -> None:
        gen = self._new_generation(self._initial_plan, 0.0)
        self._producer = Producer(gen, self.clock, self.observer)
        self._producer.listeners = self.tick_listeners
        await self.placement.start()
        if self.options.run_producer:
            self._producer_task = asyncio.get_running_loop().create_task(self._producer.run())
        if isinstance(self.clock, MonotonicClock):  # real time only: a virtual clock's loop never runs late
            self._lag.start()
        self.accepting = True

    def admission_for(self, plan: GearPlan) -> AdmissionPolicy:
        """The admission policy serving ``plan``: the count bound, and the bound by time when configured."""
        o = self.options
        if o.admission is not None:
            return o.admission
        budget = None
        if o.max_wait_slos is not None:
            slo = o.slo_ms
            if slo is None and plan.slo is not None and plan.slo.kind == "p95_ms":
                slo = plan.slo.value
            budget = WaitBudget.from_plan(plan.max_qps, slo, max_wait_slos=o.max_wait_slos, capacity_qps=o.capacity_qps)
        return AdmissionPolicy(o.max_in_flight, o.retry_after_s, budget)

    def begin_shutdown(self) -> None:
        """The first step of a graceful stop (SIGTERM): not ready, admit nothing more, fire every queue at once.
        Requests in flight carry on; :meth:`stop` then bounds how long they may take."""
        self.accepting = False
        self.drain()

    def readiness(self) -> Readiness:
        """Whether to take traffic now (policy: :func:`~cascadeserve.policy.readiness`)."""
        now = self.clock.now()
        full_for = self._note_full(now)
        stalled_fn = getattr(self.placement, "stalled", None)  # a placement that cannot tell is never "stalled"
        stalled = stalled_fn(now, self.options.stall_after_s) if stalled_fn is not None and self.accepting else None
        tick_s = self.current.plan.tick_ms / 1000.0 if self._producer is not None else 0.1
        return readiness(self.accepting, full_for, tick_s, stalled)

    def _note_full(self, now: float) -> float | None:
        """Track since when admission is full; how long it has been, or ``None`` when it has room."""
        if not self.admission_policy.full(self.admission.in_flight, self.drain_meter.qps):
            self._full_since = None
            return None
        if self._full_since is None:
            self._full_since = now
        return now - self._full_since

    async def __aenter__(self) -> Runtime:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop(grace_s=0.0)

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            raise RuntimeError("the runtime has not been started")
        return self._producer

    @property
    def current(self) -> Generation:
        return self.producer.gen

    @property
    def plan(self) -> GearPlan:
        return self.current.plan

    @property
    def gear(self) -> int:
        return self.current.gear

    @property
    def tuning(self) -> ServingTuning | None:
        """The serving generation's online threshold tuning (``None`` unless ``RuntimeOptions.tuning``)."""
        return self.current.tuning

    @property
    def slo_ms(self) -> float | None:
        """The latency objective in force (p95, ms): the options', else the plan's p95 SLO, else ``None``."""
        if self.options.slo_ms is not None:
            return self.options.slo_ms
        slo = (self._initial_plan if self._producer is None else self.plan).slo
        return slo.value if slo is not None and slo.kind == "p95_ms" else None

    @property
    def in_flight(self) -> int:
        return self.admission.in_flight

    @property
    def emulated(self) -> bool:
        return self.placement.emulated

    # -- requests ----------------------------------------------------------------------------------------------
    def submit(self, payloads: Sequence[Any], timeout_s: float | None = None) -> list[Request]:
        """Admit one request per payload, all or none, as the admission policy decides: raise :class:`Overloaded`
        (shed, retry later) when there is no room now, :class:`TooLarge` when the call exceeds the capacity."""
        if not self.accepting:
            raise RuntimeStopped("the server is shutting down")
        if self.cache is not None:
            return self._submit_cached(payloads, timeout_s)
        return self._admit(payloads, timeout_s)

    def _submit_cached(self, payloads: Sequence[Any], timeout_s: float | None) -> list[Request]:
        """The cache's decision per payload: a hit is answered now (flagged ``cached``), the misses are admitted."""
        cache = self.cache
        assert cache is not None
        keys = [input_key(p) for p in payloads]
        hits = [cache.lookup(k) for k in keys]
        misses = [i for i, h in enumerate(hits) if h is None]
        admitted = self._admit([payloads[i] for i in misses], timeout_s) if misses else []
        epoch = cache.epoch
        for i, req in zip(misses, admitted, strict=True):
            req.cache_key, req.cache_epoch = keys[i], epoch
        if len(admitted) < len(payloads):
            now = self.clock.now()
            loop = asyncio.get_running_loop()
            out: list[Request] = []
            it = iter(admitted)
            for p, hit in zip(payloads, hits, strict=True):
                if hit is None:
                    out.append(next(it))
                    continue
                req = Request(-1, p, now, self.current, hit.gear, loop.create_future())
                # resolved here, not through Request.resolve: a hit was never admitted, so nothing is released
                req.future.set_result(
                    dataclasses.replace(hit, cached=True, queue_s=0.0, compute_s=0.0, finished=now, fallback=False)
                )
                out.append(req)
            return out
        return admitted

    def _admit(self, payloads: Sequence[Any], timeout_s: float | None) -> list[Request]:
        n = len(payloads)
        adm = self.admission
        decision = self.admission_policy.decide(n, adm.in_flight, self._drain(), self._lag.lag_s())
        if not decision.accepted:
            if decision.verdict == "too_large":  # a call no load could admit: a client's error, not offered load
                self.observer.shed(n)
                raise TooLarge(decision.reason())
            self.shed(n)
            if self._full_since is None:
                self._full_since = self.clock.now()
            raise Overloaded(decision.reason(), decision.retry_after_s or self.options.retry_after_s)
        if timeout_s is None:
            timeout_s = self.options.default_timeout_s
        self.admission.add(n)
        self.observer.admitted(n)
        deadline = math.inf if timeout_s is None else self.clock.now() + timeout_s
        reqs = self.producer.admit(payloads, deadline)
        if timeout_s is not None:
            for req in reqs:
                self.set_deadline(req, timeout_s)
        return reqs

    def shed(self, n: int) -> None:
        """Count ``n`` refused rows: in the metrics, and in the QPS meter, whose gear follows the *offered* load (an
        overload that admission sheds must still read as an overload, or the costlier gear stays and sheds more)."""
        self.observer.shed(n)
        self.shed_total += n
        if self._producer is not None:
            self._producer.meter.record(n)

    def shed_now(self) -> Overloaded | None:
        """If even one row would be shed now, the refusal (its reason and Retry-After); else ``None``. Lets the front
        end refuse a request before paying to read and decode its body when admission is full anyway (the same
        decision as :meth:`submit` makes for a one-row call, nothing counted: the call is counted when refused)."""
        if not self.accepting:
            return None
        decision = self.admission_policy.decide(1, self.admission.in_flight, self._drain(), self._lag.lag_s())
        if decision.accepted:
            return None
        return Overloaded(decision.reason(), decision.retry_after_s or self.options.retry_after_s)

    def _drain(self) -> float | None:
        """The measured drain rate admission plans with (``None`` without admission by time, or before a window
        near the bound closed)."""
        policy = self.admission_policy
        if policy.budget is None:
            return None
        adm, meter = self.admission, self.drain_meter
        now = self.clock.now()
        return meter.observe(now, adm.answered, adm.in_flight, policy.bound(meter.qps), policy.budget.capacity_qps)

    def set_deadline(self, req: Request, timeout_s: float) -> None:
        """Arm ``req``'s deadline timer: in ``timeout_s`` it falls back to the last stage that ran, or fails (504)."""
        arm_deadline(req, self.clock, timeout_s + self.options.deadline_slack_s)

    def cancel(self, reqs: Sequence[Request]) -> int:
        """Drop the requests of a client that went away: those still waiting in a queue (no batch holds them) fail
        with :class:`~cascadeserve.runtime.request.ClientGone` at once, freeing their admission slots; those in a
        running batch finish as usual. Returns how many were dropped."""
        dropped = 0
        err = ClientGone("the client disconnected before this request started")
        for req in reqs:
            q = req.queue
            if q is not None and not req.done:
                q.discard(req)
                req.fail(err)
                dropped += 1
        return dropped

    async def infer(self, payload: Any, timeout_s: float | None = None) -> Answer:
        """Submit one request and wait for its answer (raises the request's ServingError)."""
        (req,) = self.submit([payload], timeout_s)
        return await req.future

    # -- plans -------------------------------------------------------------------------------------------------
    def swap_plan(self, plan: GearPlan, reason: SwapReason | None = None) -> int:
        """Serve new requests with ``plan``; requests in flight finish under the plan that admitted them (each request
        holds its generation from admission on: :func:`~cascadeserve.policy.replan.plan_in_force`'s rule, which the
        simulator applies by time). ``reason`` (default: manual) says why; the new generation keeps it."""
        if self.options.gear_schedule is not None:
            raise ValueError(
                "this runtime has a gear schedule, whose gear indices are those of its initial plan: it cannot "
                "swap plans"
            )
        old = self.current
        if self.cache is not None:
            self.cache.on_swap(old.plan, plan)
        self.admission_policy = self.admission_for(plan)
        gen = self._new_generation(plan, self.producer.last_qps)
        gen.reason = reason or SwapReason("manual")
        self.producer.gen = gen
        old.on_drained = self._retire
        old.drain()
        self.observer.plan_swapped(gen.number)
        return gen.number

    def drain(self) -> None:
        """Stop waiting for fuller batches: every queue fires as soon as its device is free."""
        for gen in self.generations:
            gen.drain()

    async def stop(self, grace_s: float = 5.0) -> None:
        """Refuse new requests, let in-flight ones finish for ``grace_s`` (real time), fail the rest."""
        self.accepting = False
        self._lag.stop()
        if self._producer_task is not None:
            self._producer_task.cancel()
            self._producer_task = None
        self.drain()
        loop = asyncio.get_running_loop()
        end = loop.time() + grace_s
        while self.admission.in_flight > 0 and loop.time() < end:
            await asyncio.sleep(0.005)
        err = RuntimeStopped("the server stopped before this request was answered")
        for gen in list(self.generations):
            for req in list(gen.live):
                req.fail(err)
        await self.placement.stop()

    # -- internals ---------------------------------------------------------------------------------------------
    def _served_plan(self, plan: GearPlan, number: int) -> tuple[GearPlan, BatchLimit | None]:
        """``plan`` with the deployment's batching applied, and the batch limit object its generation starts with
        (the options' own for the first generation; after a swap, the plan's fields build a fresh one)."""
        limit = self.options.batch_limit
        if limit is not None and number > 0:
            if not isinstance(limit, AimdBatchLimit):
                raise ValueError(
                    "a runtime whose batch limit is not AIMD cannot swap plans; use RuntimeOptions.batching"
                )
            plan = plan.model_copy(update={"batching": "aimd", "batch_target_ms": limit.target_s * 1000.0})
            return plan, None
        batching = self.options.batching
        if batching is not None and batching != plan.batching:
            plan = plan.model_copy(update={"batching": batching})
        return plan, limit

    def _new_generation(self, plan: GearPlan, initial_qps: float) -> Generation:
        number = self._generation_count
        plan, limit = self._served_plan(plan, number)
        self._generation_count += 1
        gen = Generation(
            number,
            plan,
            self.model_names,
            clock=self.clock,
            admission=self.admission,
            observer=self.observer,
            initial_qps=initial_qps,
            batch_limit=limit,
            gear_schedule=self.options.gear_schedule,
            transport=self.placement.transport(number, plan),
            cache=self.cache,
            tuning=self.options.tuning,
            tuning_labels=self.options.tuning_labels,
        )
        self.placement.place(gen)
        self.generations.append(gen)
        return gen

    def _retire(self, gen: Generation) -> None:
        self.generations.remove(gen)
        self.placement.retire(gen)

    def queue_lengths(self) -> dict[str, int]:
        """Queue length per replica id of the current plan (plus draining plans' leftovers)."""
        return self.placement.queue_lengths(self.generations)


def arm_deadline(req: Request, clock: Clock, timeout_s: float) -> None:
    """Arm ``req``'s deadline timer on ``clock``: in ``timeout_s`` it falls back to the last stage that ran, or fails
    (504). Used by :meth:`Runtime.set_deadline`, and by a Ray server for the requests it holds."""
    req.timer = call_later(clock, timeout_s, _expiry(req, clock))


def _expiry(req: Request, clock: Clock) -> Callable[[], None]:
    """The deadline callback: fall back to the last stage's answer, or fail with 504 if none ran."""

    def expire() -> None:
        req.timer = None
        answer_early(req, clock.now(), DeadlineExceeded("the deadline passed before any cascade stage ran"))

    return expire


def answer_early(req: Request, now: float, error: ServingError) -> bool:
    """Answer ``req`` now with the prediction of the last stage that ran (``fallback``), or fail it with ``error``
    when no stage has run (the deadline rule, :func:`~cascadeserve.policy.on_deadline`). Used by deadlines, and by
    the Ray backend when the server holding a request dies. Returns ``False`` when the request was already
    answered."""
    return req.gen.answer_early(req, now, error)
