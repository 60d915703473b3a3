"""The ASGI app: Open Inference Protocol V2 endpoints, ``/metrics`` and the plan endpoints, over a Runtime.

Routes::

    GET  /                                       the server's name, version, cascades and links (http/root.py)
    GET  /v2/health/live   /v2/health/ready   /v2
    GET  /v2/models/{name}[/versions/{v}]        model metadata (inputs, outputs, emulated)
    GET  /v2/models/{name}[/versions/{v}]/ready
    POST /v2/models/{name}[/versions/{v}]/infer  a batch of rows in one request; JSON or binary tensors
    GET  /v2/models/{name}[/versions/{v}]/stats  Triton's model statistics (tritonclient.get_inference_statistics)
    GET  /v2/models/{name}[/versions/{v}]/config Triton's model config (inputs, outputs, max batch, the plan)
    POST /v2/repository/index   .../models/{name}/load   .../unload   the model repository (http/repository.py)
    GET  /v2/models/stats                        the same, for every model
    GET  /metrics                                Prometheus text format (with Triton's nv_inference_* counters)
    GET/POST /v2/logging   /v2/trace/setting   /v2/models/{name}/trace/setting   log and trace settings
                                                 (http/settings.py; a change needs the admin token)
    GET  /v2/systemsharedmemory[/region/{r}]/status   POST .../register   .../unregister   shared memory
                                                 (http/shm_routes.py; registering: admin token or --allow-client-shm)
    GET  /v2/cascade/plan    PUT /v2/cascade/plan   read the plan in force; hot-swap a new one (admin token)
    GET  /v2/cascade/costs                          batch costs measured while serving, against the plan's
                             (with serve --tune: the thresholds in force, and a "tuning" report of recent changes)
    GET  /openapi.json  (also /v2/openapi.json)  the OpenAPI document, generated from every registered route

Every row of an infer request becomes one runtime request with its own path through the cascade; the response
carries ``label``, ``certainty`` and ``model`` per row (and ``class_name`` where the models config names the
classes), and ``gear``, ``fallback``, timings and ``emulated`` in ``parameters``. Errors are ``{"error": "..."}``
with 400 (bad input, naming the field: a non-finite value in a float input included, unless the model accepts them),
401/403 (token missing or wrong), 404 (unknown model or version), 413 (body over the limit, or a call larger than
admission can ever hold), 422 (a plan this deployment will not serve, naming the field), 500 (a model raised or
returned garbage; named), 503 + Retry-After (shed: the wait would exceed the admission budget; the hint comes from
the backlog) or 504 (the deadline, the request's ``parameters.timeout_ms`` or the server's default, passed before
any stage ran); a method a path does not serve is a 405 whose ``Allow`` lists those it does. A client that
disconnects has its rows that have not started dropped. The handler only decodes and encodes: the inference itself
(checks, admission, answers, response parameters) is :class:`~cascadeserve.http.infer.InferCore`, which the gRPC
front end shares.

Other front ends (``front_ends``: the gRPC one, :mod:`cascadeserve.grpc`) start in the app's lifespan once the
runtime has started, on the same event loop, and stop (with the grace period) before it stops.

Routes come from one function per router (:func:`~cascadeserve.http.root.root_routes`, :func:`health_routes`,
:func:`model_routes`, :func:`plan_routes`, :func:`metrics_routes`); a new router is one more function added to
:data:`ROUTERS` (or passed as ``routers`` to :func:`create_app`), and the OpenAPI document
(:mod:`cascadeserve.http.openapi`) covers it without more work.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from cascadeserve.http.clipper import ClipperLayer, context_of
from cascadeserve.http.control import AuthError, PlanRejected, check_bearer, check_plan, parse_plan
from cascadeserve.http.costs import cost_routes
from cascadeserve.http.fastpath import InferAnswer, InferFastPath, answered_or_gone, http_error, server_error
from cascadeserve.http.infer import (
    OUTPUT_SHAPE,
    InferCore,
    InferError,
    ServedModel,
    metadata_shape,
    model_config,
)
from cascadeserve.http.limits import read_body
from cascadeserve.http.logsettings import LOG
from cascadeserve.http.metrics import CONTENT_TYPE, PrometheusObserver
from cascadeserve.http.openai import openai_routes
from cascadeserve.http.openapi import InferRequest, describe, openapi_routes
from cascadeserve.http.root import root_routes
from cascadeserve.http.settings import settings_routes
from cascadeserve.http.shared import EXTENSIONS, ServerShared
from cascadeserve.http.shared_memory import write_outputs
from cascadeserve.http.shm_routes import shm_routes
from cascadeserve.http.triton_metrics import TritonCollector, exposition
from cascadeserve.http.tuning import tuned_plan_json
from cascadeserve.http.v2 import HEADER_LENGTH, ProtocolError, decode_infer_request, encode_infer_response
from cascadeserve.plan import GearPlan
from cascadeserve.runtime import Runtime
from cascadeserve.runtime.costs import CostMonitor
from cascadeserve.runtime.observer import SwapReason
from cascadeserve.runtime.replanner import Replanner
from cascadeserve.version import __version__

__all__ = [
    "ROUTERS",
    "FrontEnd",
    "Router",
    "ServedModel",
    "ServerOptions",
    "create_app",
    "health_routes",
    "metrics_routes",
    "model_routes",
    "plan_routes",
    "repository_routes",
]


# what a repository load request may carry (tritonclient's load_model sends {} or {"parameters": {"config": ...}})
_LOAD_BODY: dict[str, Any] = {
    "type": "object",
    "properties": {"parameters": {"type": "object", "additionalProperties": True}},
}


@dataclass(frozen=True)
class ServerOptions:
    max_body_bytes: int = 8 * 1024 * 1024
    stop_grace_s: float = 5.0
    admin_token: str | None = None  # enables the mutating endpoints (plan hot-swap), behind this bearer token
    auth_token: str | None = None  # when set, inference and metadata need this bearer token (or the admin one)
    allow_client_shm: bool = False  # any client may register shared memory (Triton's flag); else the admin token
    # what the cascades of one server share (trace settings, shared memory): one per options object (http/shared.py)
    shared: ServerShared = field(default_factory=ServerShared, compare=False, repr=False)


def _error(message: str, status: int, headers: Mapping[str, str] | None = None) -> Response:
    return JSONResponse({"error": message}, status_code=status, headers=dict(headers or {}))


def _retry_after(seconds: float) -> str:
    return str(max(1, math.ceil(seconds)))


def _refused(e: ProtocolError) -> Response:
    retry = e.retry_after_s if isinstance(e, InferError) else None
    return _error(e.message, e.status, None if retry is None else {"Retry-After": _retry_after(retry)})


class FrontEnd(Protocol):
    """Another front end over the app's handlers (the gRPC one), started and stopped in the app's lifespan."""

    name: str
    port: int | None  # the port it listens on, once started

    async def start(self, api: _Api) -> None: ...

    async def stop(self, grace_s: float) -> None: ...


class _Api:
    """The request handlers, holding the runtime, the model description and the metrics."""

    def __init__(
        self,
        runtime: Runtime,
        model: ServedModel,
        metrics: PrometheusObserver,
        opts: ServerOptions,
        layer: ClipperLayer | None = None,
    ):
        self.runtime = runtime
        self.model = model
        self.metrics = metrics
        self.opts = opts
        self.shared = opts.shared
        # selection, feedback, Clipper's REST (http/clipper.py); the core submits through it
        self.layer = layer or ClipperLayer(runtime, model.name)
        self.core = InferCore(runtime, model, self.layer)
        self.replanner: Replanner | None = None  # serve --replan: its state goes into GET /v2/cascade/plan's notes
        self.costs: CostMonitor | None = None  # batch costs against the plan's (http/costs.py)

    # -- health and metadata -----------------------------------------------------------------------------------
    def check_token(self, authorization: str | None) -> None:
        """Pass when inference needs no token or ``authorization`` carries the inference (or admin) one; else raise
        :class:`~cascadeserve.http.control.AuthError` (401/403). The gRPC front end calls it with its metadata."""
        if self.opts.auth_token is None:
            return
        tokens = tuple(t for t in (self.opts.auth_token, self.opts.admin_token) if t is not None)
        check_bearer(authorization, tokens, what="inference")

    def _auth(self, request: Request, *, admin: bool = False) -> Response | None:
        """``None`` when the request may go on; else the 401/403 answer."""
        if not admin and self.opts.auth_token is None:  # no token to check: not even the header to read
            return None
        header = request.headers.get("authorization")
        try:
            if not admin:
                self.check_token(header)
            elif self.opts.admin_token is None:
                return _error("the control plane is off: start the server with --admin-token to enable it", 403)
            else:
                check_bearer(header, (self.opts.admin_token,), what="this endpoint")
        except AuthError as e:
            return _error(e.message, e.status, {"WWW-Authenticate": "Bearer"} if e.status == 401 else None)
        return None

    @describe()
    async def live(self, request: Request) -> Response:
        """Liveness: the process answers."""
        return JSONResponse({"live": True})

    @describe(responses=(503,))
    async def ready(self, request: Request) -> Response:
        """Readiness: 503 while stopping, while admission has been full over a tick, or while a device is stalled."""
        state = self.runtime.readiness()
        body: dict[str, Any] = {"ready": state.ready}
        if not state.ready:
            body["reason"] = state.reason
        return JSONResponse(body, status_code=200 if state.ready else 503)

    @describe(responses=(401, 403), secured=True)
    async def server_metadata(self, request: Request) -> Response:
        """Server metadata: name, version and protocol extensions."""
        if (bad := self._auth(request)) is not None:
            return bad
        return JSONResponse(
            {
                "name": "cascadeserve",
                "version": __version__,
                "extensions": list(EXTENSIONS),
            }
        )

    def _check_name(self, request: Request) -> Response | None:
        if (bad := self._auth(request)) is not None:
            return bad
        try:
            self.core.check_name(request.path_params["name"], request.path_params.get("version"))
        except ProtocolError as e:
            return _error(e.message, e.status)
        return None

    @describe(responses=(401, 403, 404), secured=True)
    async def model_metadata(self, request: Request) -> Response:
        """Model metadata: its inputs, the outputs, and the cascade's models."""
        if (bad := self._check_name(request)) is not None:
            return bad
        plan = self.runtime.plan
        return JSONResponse(
            {
                "name": self.model.name,
                "versions": ["1"],
                "platform": "cascadeserve",
                "inputs": [
                    {"name": i.name, "datatype": i.datatype, "shape": metadata_shape(i.shape)}
                    for i in self.model.inputs
                ],
                "outputs": [{"name": n, "datatype": dt, "shape": list(OUTPUT_SHAPE)} for n, dt in self.model.outputs],
                "parameters": {
                    "emulated": self.model.emulated,
                    "models": ",".join(plan.models()),
                    "gears": len(plan.gears),
                },
            }
        )

    @describe(responses=(401, 403, 404, 503), secured=True)
    async def model_ready(self, request: Request) -> Response:
        """Model readiness (the server's)."""
        if (bad := self._check_name(request)) is not None:
            return bad
        return await self.ready(request)

    @describe(responses=(401, 403, 404), secured=True)
    async def model_stats(self, request: Request) -> Response:
        """Triton's model statistics for the served cascade."""
        if (bad := self._check_name(request)) is not None:
            return bad
        return JSONResponse(self.metrics.stats.render(self.model.name))

    @describe(responses=(401, 403, 404), secured=True)
    async def model_config(self, request: Request) -> Response:
        """Triton's model config: inputs, outputs, max batch size, and the gear plan in force summed up."""
        if (bad := self._check_name(request)) is not None:
            return bad
        return JSONResponse(model_config(self.model, self.runtime))

    # -- the model repository (serve's Repository answers these when it serves several cascades) ---------------
    @describe(responses=(401, 403), secured=True)
    async def repository_index(self, request: Request) -> Response:
        """Triton's repository index: each cascade served, with its state (READY, or UNAVAILABLE while stopping)."""
        if (bad := self._auth(request)) is not None:
            return bad
        state = "READY" if self.runtime.accepting else "UNAVAILABLE"
        return JSONResponse([{"name": self.model.name, "version": "1", "state": state}])

    @describe(body=_LOAD_BODY, responses=(400, 401, 403, 409), admin=True)
    async def repository_load(self, request: Request) -> Response:
        """Load a cascade beside those served, by name: ``parameters`` name its ``plan``, ``profile`` and ``models``
        files (or ``emulate``), or a planned ``workload`` (``config``: the same as one JSON string, as tritonclient
        sends it). Needs ``serve`` with ``--admin-token``; a server whose cascades are fixed answers 403."""
        if (bad := self._auth(request, admin=True)) is not None:
            return bad
        return _error("this server's cascades are fixed at start-up", 403)

    @describe(responses=(401, 403, 404, 409), admin=True)
    async def repository_unload(self, request: Request) -> Response:
        """Unload a cascade: it admits nothing more, what it admitted finishes, it stops (not the first one)."""
        if (bad := self._auth(request, admin=True)) is not None:
            return bad
        return _error("this server's cascades are fixed at start-up", 403)

    @describe(responses=(401, 403), secured=True)
    async def all_stats(self, request: Request) -> Response:
        """Triton's model statistics for every model this server serves."""
        if (bad := self._auth(request)) is not None:
            return bad
        return JSONResponse(self.metrics.stats.render(self.model.name))

    # -- inference ---------------------------------------------------------------------------------------------
    async def _body(self, request: Request) -> bytes:
        """The body, within ``max_body_bytes`` (413 past it): every route's body comes through here."""
        return await read_body(request.receive, self.opts.max_body_bytes, request.headers.get("content-length"))

    @describe(
        body=InferRequest,
        binary=True,
        responses=(400, 401, 403, 404, 413, 500, 502, 503, 504),
        secured=True,
        answers=("application/json", "application/octet-stream"),
    )
    async def infer(self, request: Request) -> Response:
        """Infer: each row of the input is one request through the cascade (JSON or binary tensors)."""
        if (bad := self._check_name(request)) is not None:
            return bad
        try:
            self.core.shed_early()  # full even for one row: refuse before reading and decoding the body
            body = await self._body(request)
            dec = decode_infer_request(body, request.headers.get(HEADER_LENGTH), self.shared.shm)
            done = await self.core.infer(
                dec.inputs,
                dec.parameters,
                context_of(dec.parameters, request.headers),
                dec.id,
                lambda futures: answered_or_gone(futures, request.receive),
                dec.datatypes,
                dec.classes,
            )
            if dec.shm_outputs:
                write_outputs(self.shared.shm, done.outputs, dec.shm_outputs)
            body, headers = encode_infer_response(self.model.name, dec, done.outputs, done.parameters)
        except ProtocolError as e:
            return _refused(e)
        return InferAnswer(body, headers)

    # -- metrics and plans -------------------------------------------------------------------------------------
    @describe(responses=(401, 403), secured=True, answers=("text/plain",))
    async def metrics_endpoint(self, request: Request) -> Response:
        """Prometheus metrics."""
        if (bad := self._auth(request)) is not None:
            return bad
        return Response(exposition(self.metrics.registry), media_type=CONTENT_TYPE)

    @describe(responses=(401, 403), secured=True)
    async def get_plan(self, request: Request) -> Response:
        """The gear plan in force. With online tuning (``serve --tune``), its gears carry the thresholds in force
        and ``tuning`` reports the targets, windows and the recent threshold changes (ignored when PUT back)."""
        if (bad := self._auth(request)) is not None:
            return bad
        plan = self.runtime.plan
        if self.replanner is not None:
            plan = plan.model_copy(update={"notes": {**plan.notes, **self.replanner.notes()}})
        tuning = self.runtime.tuning
        if tuning is None:
            return Response(plan.to_json(), media_type="application/json")
        return JSONResponse(tuned_plan_json(plan, tuning))

    @describe(body=GearPlan, responses=(401, 403, 413, 422), admin=True)
    async def put_plan(self, request: Request) -> Response:
        """Hot-swap the plan (needs the admin token); requests in flight finish under the old one."""
        if (bad := self._auth(request, admin=True)) is not None:
            return bad
        try:
            plan = parse_plan(await self._body(request))
            policy = self.runtime.admission_for(plan)
            budget = policy.budget
            check_plan(
                plan,
                self.runtime.plan,
                self.runtime.model_names,
                admission_limit=policy.limit,
                wait_budget_ms=None if budget is None else budget.max_wait_s * 1000.0,
                stall_ms=self.runtime.options.stall_after_s * 1000.0,
                extra=self.model.check_plan,
            )
        except ProtocolError as e:
            return _error(e.message, e.status)
        except PlanRejected as e:
            return _error(str(e), 422)
        generation = self.runtime.swap_plan(plan, SwapReason("manual", "PUT /v2/cascade/plan"))
        return JSONResponse({"generation": generation, "gears": len(plan.gears)})


Router = Callable[["_Api"], list[BaseRoute]]
"""A router: the routes of one concern over the handlers (add one to :data:`ROUTERS`, or pass ``routers``)."""


def health_routes(api: _Api) -> list[BaseRoute]:
    return [
        Route("/v2/health/live", api.live, methods=["GET"]),
        Route("/v2/health/ready", api.ready, methods=["GET"]),
        Route("/v2", api.server_metadata, methods=["GET"]),
    ]


def model_routes(api: _Api) -> list[BaseRoute]:
    routes: list[BaseRoute] = [Route("/v2/models/stats", api.all_stats, methods=["GET"])]
    for base in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
        routes += [
            Route(base, api.model_metadata, methods=["GET"]),
            Route(base + "/ready", api.model_ready, methods=["GET"]),
            Route(base + "/stats", api.model_stats, methods=["GET"]),
            Route(base + "/config", api.model_config, methods=["GET"]),
            Route(base + "/infer", api.infer, methods=["POST"]),
        ]
    return routes


def repository_routes(api: _Api) -> list[BaseRoute]:
    return [
        Route("/v2/repository/index", api.repository_index, methods=["GET", "POST"]),
        Route("/v2/repository/models/{name}/load", api.repository_load, methods=["POST"]),
        Route("/v2/repository/models/{name}/unload", api.repository_unload, methods=["POST"]),
    ]


def plan_routes(api: _Api) -> list[BaseRoute]:
    return [
        Route("/v2/cascade/plan", api.get_plan, methods=["GET"]),
        Route("/v2/cascade/plan", api.put_plan, methods=["PUT"]),
    ]


def metrics_routes(api: _Api) -> list[BaseRoute]:
    return [Route("/metrics", api.metrics_endpoint, methods=["GET"])]


ROUTERS: tuple[Router, ...] = (
    root_routes, health_routes, model_routes, repository_routes, plan_routes, cost_routes, openai_routes,
    metrics_routes, settings_routes, shm_routes,
)  # fmt: skip


def create_app(
    runtime: Runtime,
    model: ServedModel,
    *,
    metrics: PrometheusObserver | None = None,
    options: ServerOptions | None = None,
    clipper: ClipperLayer | None = None,
    routers: Sequence[Router] = ROUTERS,
    replanner: Replanner | None = None,
    costs: CostMonitor | None = None,
    front_ends: Sequence[FrontEnd] = (),
) -> ASGIApp:
    """The ASGI app over ``runtime`` (started and stopped with the app's lifespan, with ``front_ends``).

    Pass the same ``metrics`` observer that the runtime reports to (as :func:`cascadeserve.http.build_app`
    does), or a fresh one is made that only sees scrape-time gauges. ``routers`` (default :data:`ROUTERS`) lists
    the route groups; the OpenAPI document covers whatever they register.
    """
    opts = options or ServerOptions()
    obs = metrics or PrometheusObserver()
    obs.attach(runtime)
    api = _Api(runtime, model, obs, opts, clipper)
    obs.registry.register(TritonCollector(model.name, api.core.counts, obs.stats))  # nv_inference_*
    api.replanner = replanner
    api.costs = costs

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        LOG.install()  # the server writes its loggers' lines (http/logsettings.py)
        with opts.shared.shm.held():  # the last cascade of the server to stop unregisters the shared memory
            await runtime.start()
            await api.layer.start()
            started: list[FrontEnd] = []
            try:
                for front in front_ends:  # after the runtime: their first request may come at once
                    await front.start(api)
                    started.append(front)
                yield
            finally:
                for front in reversed(started):  # before the runtime: their requests in flight finish in the grace
                    await front.stop(opts.stop_grace_s)
                if replanner is not None:
                    await replanner.stop()
                await api.layer.stop(opts.stop_grace_s)
                await runtime.stop(opts.stop_grace_s)

    routes: list[BaseRoute] = [r for router in routers for r in router(api)]
    routes += api.layer.routes(api)
    routes += openapi_routes(routes, opts.auth_token is not None, opts.admin_token is not None, model.name)
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error, Exception: server_error},
    )
    return InferFastPath(app, api.model.name, api.infer, api)
