"""Putting it together: a runtime plus the V2 app from a profile, a plan and (optionally) real models, and a
uvicorn server that stops cleanly.

:func:`build_app` makes the runtime report to a :class:`PrometheusObserver` and wraps it in the ASGI app.
:class:`Server` runs uvicorn; on SIGINT/SIGTERM (or :meth:`Server.stop`) it first tells the runtime to drain
(every queue fires as soon as its device is free, since no arrival will fill a batch) and to stop admitting, so
readiness turns false at once; uvicorn then finishes the requests in flight for the grace period, and the app's
lifespan fails whatever is left with 503. The server binds to loopback unless told otherwise; TLS is uvicorn's
(``ssl_certfile``/``ssl_keyfile``). Other front ends (``build_app(front_ends=...)``: the gRPC one) run in the same
lifespan; :attr:`Server.grpc_port` is the gRPC one's port once started. :func:`with_repository` puts an app behind
a :class:`~cascadeserve.http.repository.Repository`, so more cascades load beside it (from a model repository's
folders: :mod:`cascadeserve.workload.repository`), and the shutdown drains them all.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

import numpy as np
import uvicorn
from starlette.types import ASGIApp

from cascadeserve.http.app import FrontEnd, ServedModel, ServerOptions, create_app
from cascadeserve.http.clipper import ClipperOptions
from cascadeserve.http.connections import ConnectionLimits, protocol_class
from cascadeserve.http.control import check_plan
from cascadeserve.http.costs import CostCollector
from cascadeserve.http.events import EventCollector
from cascadeserve.http.metrics import PrometheusObserver
from cascadeserve.http.model_control import ModelControl
from cascadeserve.http.persist import ServerState
from cascadeserve.http.replan import ReplanCollector
from cascadeserve.http.repository import Builder, Repository
from cascadeserve.models.upstream import UpstreamAdapter
from cascadeserve.plan import GearPlan
from cascadeserve.policy.costs import CostSettings
from cascadeserve.policy.episodes import EpisodeSettings
from cascadeserve.profile import Profile
from cascadeserve.runtime import (
    Backend,
    Clock,
    InputSpec,
    LocalBackend,
    ModelConfig,
    Observer,
    Runtime,
    RuntimeOptions,
)
from cascadeserve.runtime.costs import CostMonitor
from cascadeserve.runtime.events import ServingEvents
from cascadeserve.runtime.observer import Fanout
from cascadeserve.runtime.replanner import Replanner, ReplanOptions

__all__ = ["App", "Server", "build_app", "check_labels", "with_repository"]


@dataclass
class App:
    """The ASGI app with the runtime and metrics behind it."""

    asgi: ASGIApp
    runtime: Runtime
    metrics: PrometheusObserver
    model: ServedModel
    replanner: Replanner | None = None
    costs: CostMonitor | None = None
    front_ends: tuple[FrontEnd, ...] = ()
    repository: Repository | None = None  # several cascades behind the app (with_repository)
    events: ServingEvents | None = None  # what it says it is doing: shedding, cost drift, swaps, SLO (http/events.py)

    @property
    def accepting(self) -> bool:
        """Whether a cascade the app serves still admits requests (a shutdown has not begun)."""
        return self.runtime.accepting or (self.repository is not None and self.repository.accepting)

    def begin_shutdown(self) -> None:
        """Not ready, admit nothing, drain: every cascade the app serves."""
        if self.repository is not None:
            self.repository.begin_shutdown()
        elif self.runtime.accepting:
            self.runtime.begin_shutdown()


def with_repository(
    app: App,
    options: ServerOptions | None = None,
    build: Builder | None = None,
    *,
    state: ServerState | None = None,
    available: Callable[[], list[str]] | None = None,
    control: ModelControl | None = None,
) -> App:
    """``app`` as the first cascade of a :class:`~cascadeserve.http.repository.Repository`: the repository API
    loads and unloads others beside it (``build`` makes them, e.g.
    :func:`cascadeserve.workload.repository.repository_builder`; ``None``: the load API is off). With ``state``,
    the loaded cascades are recorded and loaded again on the next start (:mod:`cascadeserve.http.persist`);
    ``available`` lists the repository's folders for the index; ``control`` is the model control mode
    (:mod:`cascadeserve.http.model_control`)."""
    repo = Repository(app, options or ServerOptions(), build, state=state, available=available, control=control)
    for front in app.front_ends:  # the gRPC front end finds every cascade by name, and loads and unloads them
        if hasattr(front, "directory"):
            front.directory = repo
    return dataclasses.replace(app, asgi=repo, repository=repo)


def check_labels(labels: Mapping[int, str], profile: Profile) -> None:
    """Raise ``ValueError`` (``labels: ...``) unless ``labels`` names every class of ``profile``: each label of its
    validation rows and each class its models predicted there (what the served cascade can answer with)."""
    classes = np.unique(np.concatenate([profile.labels.ravel(), profile.predictions.ravel()]))
    classes = classes[classes >= 0]  # a negative prediction is no class (no answer), and has no name to give
    missing = [int(c) for c in classes if int(c) not in labels]
    if missing:
        shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
        raise ValueError(
            f"labels: no class name for label {shown} (the profile's labels and predictions hold "
            f"{len(classes)} classes, {int(classes.min())}..{int(classes.max())}: give a name to each)"
        )


def build_app(
    profile: Profile,
    plan: GearPlan,
    *,
    models: ModelConfig | None = None,
    emulate: bool = False,
    name: str | None = None,
    clock: Clock | None = None,
    runtime_options: RuntimeOptions | None = None,
    server_options: ServerOptions | None = None,
    observer: Observer | None = None,
    backend: Backend | None = None,
    clipper: ClipperOptions | None = None,
    replan: ReplanOptions | None = None,
    costs: CostSettings | None = None,
    front_ends: Sequence[FrontEnd] = (),
    labels: Mapping[int, str] | None = None,
    episodes: EpisodeSettings | None = None,
) -> App:
    """A served cascade: emulated devices (answers from ``profile``) or ``models`` on the ``backend``'s devices
    (default: :class:`~cascadeserve.runtime.LocalBackend`, a worker thread per device in this process); with
    ``front_ends`` (e.g. :class:`cascadeserve.grpc.GrpcFrontEnd`) served beside HTTP. ``labels``: each class's name,
    answered beside its label (default: the models config's; :func:`check_labels` checks them against ``profile``).
    ``episodes``: how its event lines tell shedding and SLO episodes apart (:mod:`cascadeserve.runtime.events`)."""
    engine: Backend = backend or LocalBackend()
    plan.check_against(profile)
    if labels is None and models is not None:
        labels = models.labels
    if labels is not None:
        check_labels(labels, profile)
    metrics = PrometheusObserver(profile=profile)
    # every batch against the profile's costs (GET /v2/cascade/costs, cost metrics, serve --replan on cost drift)
    monitor = CostMonitor(
        profile, costs, overhead_ms=plan.batch_overhead_ms, devices=len(plan.devices), backend=engine.name
    )
    metrics.registry.register(CostCollector(monitor))
    # one log line and a metric per change of state: shedding, cost drift, plan swaps, the SLO (runtime/events.py)
    events = ServingEvents(name or profile.name, episodes)
    metrics.registry.register(EventCollector(events))
    more = () if observer is None else (observer,)
    obs: Observer = Fanout(metrics, monitor, *more, events)

    def check(p: GearPlan) -> None:
        p.check_against(profile)

    if not emulate and models is None:
        raise ValueError("give models (a models config) or emulate=True")

    def make(p: GearPlan) -> Runtime:
        p.check_against(profile)
        if emulate:
            return engine.emulated_runtime(profile, p, clock=clock, observer=obs, options=runtime_options)
        assert models is not None
        return engine.local_runtime(p, models, clock=clock, observer=obs, options=runtime_options)

    runtime = make(plan)
    runtime.tick_listeners.append(monitor.on_tick)
    events.attach(runtime, monitor)
    for m in models.models.values() if models is not None else ():
        if isinstance(m, UpstreamAdapter):  # its requests, errors and latency (cascadeserve_upstream_*)
            m.listeners.append(metrics.upstream_request)
    if emulate:
        index: Mapping[int, int] = {int(s): i for i, s in enumerate(profile.sample_ids.tolist())}
        served = ServedModel(name or profile.name, InputSpec(), True, index, check, labels=labels)
    else:
        assert models is not None
        served = ServedModel(name or profile.name, models.input, False, None, check, models.more_inputs, labels)
    # Clipper's layer: alternatives (one runtime each, same backend), selection, SLO and default output
    layer = None if clipper is None else clipper.layer(runtime, served.name, make)
    replanner = None
    if replan is not None:  # serve --replan: watch the load, re-plan in a child process (http/replan.py's metrics)

        def check_swap(p: GearPlan) -> None:
            policy = runtime.admission_for(p)
            budget = policy.budget
            check_plan(
                p,
                runtime.plan,
                runtime.model_names,
                admission_limit=policy.limit,
                wait_budget_ms=None if budget is None else budget.max_wait_s * 1000.0,
                stall_ms=runtime.options.stall_after_s * 1000.0,
                extra=check,
            )

        replanner = Replanner(runtime, replan, check_swap, costs=monitor)
        metrics.registry.register(ReplanCollector(replanner))
    asgi = create_app(
        runtime,
        served,
        metrics=metrics,
        options=server_options,
        clipper=layer,
        replanner=replanner,
        costs=monitor,
        front_ends=front_ends,
    )
    return App(asgi, runtime, metrics, served, replanner, monitor, tuple(front_ends), events=events)


class _DrainingServer(uvicorn.Server):
    """uvicorn, but a shutdown signal first tells the runtime to drain its queues."""

    def __init__(self, config: uvicorn.Config, app: App) -> None:
        super().__init__(config)
        self.app = app
        self.loop: asyncio.AbstractEventLoop | None = None
        self.on_listening: Callable[[], None] | None = None  # called once the socket is bound (the CLI's banner)
        self.freeze_gc = False

    async def startup(self, sockets: Any = None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().startup(sockets)
        if self.started and not self.should_exit and self.freeze_gc:
            # The models, the profile and the code are loaded and live for the server's life; the collector's full
            # passes scanned them all again and again (a 99 ms pause of the event loop while serving real digits
            # models, which is shed requests at 80 % load). Frozen, they are never scanned; what serving creates
            # from now on still is. Ray Serve's replicas do the same (RAY_SERVE_FREEZE_GC_ON_STARTUP).
            gc.collect()
            gc.freeze()
        if self.started and not self.should_exit and self.on_listening is not None:
            self.on_listening()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.loop is not None and self.app.accepting:
            self.loop.call_soon_threadsafe(self.app.begin_shutdown)  # not ready, admit nothing, drain
        super().handle_exit(sig, frame)


# How long an idle keep-alive connection stays open. uvicorn's own default (5 s) is shorter than the idle timeouts
# of the clients and proxies that pool connections (aiohttp 15 s, AWS ALB and nginx upstreams 60 s): a client then
# reuses a connection in the instant the server closes it, and its request fails before the server reads it
# (benchmarks/bench_keepalive.py provokes it). The server must be the side that waits longer; 75 s is nginx's default.
DEFAULT_KEEP_ALIVE_S = 75.0


class Server:
    """Runs an :class:`App` on uvicorn, in the foreground (:meth:`run`) or on a thread (:meth:`start`), with
    ``limits`` on every connection (default :class:`~cascadeserve.http.connections.ConnectionLimits`: a head within
    10 s, no 30 s pause in a body, at most 1000 connections)."""

    def __init__(
        self,
        app: App,
        host: str = "127.0.0.1",
        port: int = 8000,
        *,
        grace_s: float = 5.0,
        keep_alive_s: float = DEFAULT_KEEP_ALIVE_S,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        limits: ConnectionLimits | None = None,
    ) -> None:
        bounds = limits or ConnectionLimits()  # head and body deadlines, connection cap (http/connections.py)
        config = uvicorn.Config(
            app.asgi,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=max(1, round(grace_s)),
            timeout_keep_alive=max(1, math.ceil(keep_alive_s)),
            ssl_certfile=ssl_certfile,
            ssl_keyfile=ssl_keyfile,
            http=protocol_class(bounds),
            # past the watch's own bound (the head's bytes, counted a read at a time): it refuses first, with 431
            h11_max_incomplete_event_size=2 * bounds.max_head_bytes + (512 << 10),
        )
        self.tls = ssl_certfile is not None
        self.app = app
        self.server = _DrainingServer(config, app)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        servers = getattr(self.server, "servers", [])
        for s in servers:
            for sock in s.sockets:
                return int(sock.getsockname()[1])
        raise RuntimeError("the server is not listening")

    @property
    def grpc_port(self) -> int | None:
        """The port the gRPC front end listens on once started (``None``: none, or not started)."""
        return next((f.port for f in self.app.front_ends if f.name == "grpc"), None)

    @property
    def url(self) -> str:
        host = self.server.config.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    def run(self) -> None:
        """Serve until SIGINT/SIGTERM (uvicorn installs the handlers). The process is the server's own, so what it
        has loaded once listening is frozen out of the garbage collector's passes (``gc.freeze``)."""
        self.server.freeze_gc = True
        self.server.run()

    def start(self, timeout_s: float = 120.0) -> Server:
        """Serve on a background thread (tests, benchmarks); returns once the socket listens, or raises when the
        thread dies or ``timeout_s`` passes first. The bound is generous on purpose: it costs nothing on a quiet
        machine (the wait ends at readiness), and a shared, busy one took more than 10 s to start a Ray backend."""

        def target() -> None:
            # uvicorn installs no signal handlers off the main thread; stop() sets should_exit instead.
            asyncio.run(self.server.serve())

        self._thread = threading.Thread(target=target, name="cascadeserve-uvicorn", daemon=True)
        self._thread.start()
        t0 = time.monotonic()
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the server did not start: its thread exited (see the log above)")
            if time.monotonic() - t0 > timeout_s:
                raise RuntimeError(f"the server did not start within {timeout_s:g} s")
            time.sleep(0.01)
        return self

    def stop(self, timeout_s: float = 15.0) -> None:
        if self.server.loop is not None and self.app.accepting:
            self.server.loop.call_soon_threadsafe(self.app.begin_shutdown)
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
