"""The ASGI app: Open Inference Protocol V2 endpoints, ``/metrics`` and the plan endpoints, over a Runtime.

Routes::

    GET  /v2/health/live   /v2/health/ready   /v2
    GET  /v2/models/{name}[/versions/{v}]        model metadata (inputs, outputs, emulated)
    GET  /v2/models/{name}[/versions/{v}]/ready
    POST /v2/models/{name}[/versions/{v}]/infer  a batch of rows in one request; JSON or binary tensors
    GET  /v2/models/{name}[/versions/{v}]/stats  Triton's model statistics (tritonclient.get_inference_statistics)
    GET  /v2/models/stats                        the same, for every model
    GET  /metrics                                Prometheus text format
    GET  /v2/cascade/plan    PUT /v2/cascade/plan   read the plan in force; hot-swap a new one (admin token)
    GET  /v2/cascade/costs                          batch costs measured while serving, against the plan's
                             (with serve --tune: the thresholds in force, and a "tuning" report of recent changes)
    GET  /openapi.json  (also /v2/openapi.json)  the OpenAPI document, generated from every registered route

Every row of an infer request becomes one runtime request with its own path through the cascade; the response
carries ``label``, ``certainty`` and ``model`` per row, and ``gear``, ``fallback``, timings and ``emulated`` in
``parameters``. Errors are ``{"error": "..."}`` with 400 (bad input, naming the field: a non-finite value in a
float input included, unless the model accepts them), 401/403 (token missing or wrong), 404 (unknown model or
version), 413 (body over the limit, or a call larger than admission can ever hold), 422 (a plan this deployment
will not serve, naming the field), 500 (a model raised or returned garbage; named), 503 + Retry-After (shed: the
wait would exceed the admission budget; the hint comes from the backlog) or 504 (the deadline, the request's
``parameters.timeout_ms`` or the server's default, passed before any stage ran). A client that disconnects has its
rows that have not started dropped.

Routes come from one function per router (:func:`health_routes`, :func:`model_routes`, :func:`plan_routes`,
:func:`metrics_routes`); a new router is one more function added to :data:`ROUTERS` (or passed as ``routers`` to
:func:`create_app`), and the OpenAPI document (:mod:`cascadeserve.http.openapi`) covers it without more work.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from cascadeserve import __version__
from cascadeserve.http.clipper import ClipperLayer, context_of
from cascadeserve.http.control import AuthError, PlanRejected, check_bearer, check_plan, parse_plan
from cascadeserve.http.costs import cost_routes
from cascadeserve.http.fastpath import InferFastPath, answered_or_gone, outcome, read_body, server_error
from cascadeserve.http.metrics import CONTENT_TYPE, PrometheusObserver
from cascadeserve.http.openai import openai_routes
from cascadeserve.http.openapi import InferRequest, describe, openapi_routes
from cascadeserve.http.tuning import tuned_plan_json
from cascadeserve.http.v2 import (
    DTYPES,
    HEADER_LENGTH,
    OutputTensor,
    ProtocolError,
    decode_infer_request,
    encode_infer_response,
)
from cascadeserve.plan import GearPlan
from cascadeserve.runtime import Answer, InputSpec, Overloaded, Runtime, ServingError
from cascadeserve.runtime.costs import CostMonitor
from cascadeserve.runtime.replanner import Replanner

__all__ = [
    "ROUTERS",
    "Router",
    "ServedModel",
    "ServerOptions",
    "create_app",
    "health_routes",
    "metrics_routes",
    "model_routes",
    "plan_routes",
]


@dataclass(frozen=True)
class ServedModel:
    """What the V2 front end exposes: the model name, its one input, and how rows become payloads."""

    name: str
    input: InputSpec = field(default_factory=InputSpec)
    emulated: bool = False
    sample_index: Mapping[int, int] | None = None  # emulated: validation sample id -> profile row
    check_plan: Callable[[GearPlan], None] | None = None  # extra validation of a PUT plan (e.g. the profile)


@dataclass(frozen=True)
class ServerOptions:
    max_body_bytes: int = 8 * 1024 * 1024
    stop_grace_s: float = 5.0
    admin_token: str | None = None  # enables the mutating endpoints (plan hot-swap), behind this bearer token
    auth_token: str | None = None  # when set, inference and metadata need this bearer token (or the admin one)


def _error(message: str, status: int, headers: Mapping[str, str] | None = None) -> Response:
    return JSONResponse({"error": message}, status_code=status, headers=dict(headers or {}))


def _retry_after(seconds: float) -> str:
    return str(max(1, math.ceil(seconds)))


class _Api:
    """The request handlers, holding the runtime, the model description and the metrics."""

    def __init__(self, runtime: Runtime, model: ServedModel, metrics: PrometheusObserver, opts: ServerOptions):
        self.runtime = runtime
        self.model = model
        self.metrics = metrics
        self.opts = opts
        self._dtype = DTYPES[model.input.datatype]
        self._lookup: Callable[[np.ndarray], list[Any]] = self._sample_rows if model.emulated else self._rows
        self.layer = ClipperLayer(runtime, model.name)  # selection, feedback, Clipper's REST (http/clipper.py)
        self.replanner: Replanner | None = None  # serve --replan: its state goes into GET /v2/cascade/plan's notes
        self.costs: CostMonitor | None = None  # batch costs against the plan's (http/costs.py)

    # -- health and metadata -----------------------------------------------------------------------------------
    def _auth(self, request: Request, *, admin: bool = False) -> Response | None:
        """``None`` when the request may go on; else the 401/403 answer."""
        headers = request.headers
        if admin:
            if self.opts.admin_token is None:
                return _error("the control plane is off: start the server with --admin-token to enable it", 403)
            tokens: tuple[str, ...] = (self.opts.admin_token,)
            what = "this endpoint"
        else:
            if self.opts.auth_token is None:
                return None
            tokens = tuple(t for t in (self.opts.auth_token, self.opts.admin_token) if t is not None)
            what = "inference"
        try:
            check_bearer(headers.get("authorization"), tokens, what=what)
        except AuthError as e:
            return _error(e.message, e.status, {"WWW-Authenticate": "Bearer"} if e.status == 401 else None)
        return None

    @describe(responses=(503,))
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
                "extensions": ["binary_tensor_data", "cascade_plan", "statistics"],
            }
        )

    def _check_name(self, request: Request) -> Response | None:
        if (bad := self._auth(request)) is not None:
            return bad
        name = request.path_params["name"]
        if name != self.model.name:
            return _error(f"unknown model {name!r}; this server serves {self.model.name!r}", 404)
        version = request.path_params.get("version")
        if version is not None and version != "1":
            return _error(f"model {name!r} has no version {version!r}; its only version is '1'", 404)
        return None

    @describe(responses=(401, 403, 404), secured=True)
    async def model_metadata(self, request: Request) -> Response:
        """Model metadata: its one input, the outputs, and the cascade's models."""
        if (bad := self._check_name(request)) is not None:
            return bad
        spec = self.model.input
        plan = self.runtime.plan
        return JSONResponse(
            {
                "name": self.model.name,
                "versions": ["1"],
                "platform": "cascadeserve",
                "inputs": [{"name": spec.name, "datatype": spec.datatype, "shape": list(spec.shape)}],
                "outputs": [
                    {"name": "label", "datatype": "INT64", "shape": [-1]},
                    {"name": "certainty", "datatype": "FP32", "shape": [-1]},
                    {"name": "model", "datatype": "BYTES", "shape": [-1]},
                ],
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

    @describe(responses=(401, 403), secured=True)
    async def all_stats(self, request: Request) -> Response:
        """Triton's model statistics for every model this server serves."""
        if (bad := self._auth(request)) is not None:
            return bad
        return JSONResponse(self.metrics.stats.render(self.model.name))

    # -- inference ---------------------------------------------------------------------------------------------
    async def _body(self, request: Request) -> bytes:
        limit = self.opts.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ProtocolError(f"body: {declared} bytes is over the limit of {limit} bytes", 413)
        return await read_body(request.receive, limit)

    def _sample_rows(self, arr: np.ndarray) -> list[Any]:
        index = self.model.sample_index
        assert index is not None
        rows = []
        for sid in arr.tolist():
            row = index.get(sid)
            if row is None:
                raise ProtocolError(f"input {self.model.input.name!r}: {sid} is not a validation sample id")
            rows.append(row)
        return rows

    def _rows(self, arr: np.ndarray) -> list[Any]:
        return list(arr)

    def _payloads(self, inputs: Mapping[str, np.ndarray]) -> list[Any]:
        spec = self.model.input
        arr = inputs.get(spec.name)
        if arr is None:
            raise ProtocolError(f"input {spec.name!r} is missing (got {', '.join(inputs) or 'none'})")
        for other in inputs:
            if other != spec.name:
                raise ProtocolError(f"input {other!r} is unknown; this model takes only {spec.name!r}")
        if arr.dtype != self._dtype:
            got = next(k for k, v in DTYPES.items() if v == arr.dtype)
            raise ProtocolError(f"input {spec.name!r}: datatype {got}, expected {spec.datatype}")
        if arr.ndim != len(spec.shape) or any(s != -1 and s != a for s, a in zip(spec.shape, arr.shape, strict=True)):
            raise ProtocolError(f"input {spec.name!r}: shape {list(arr.shape)} does not match {list(spec.shape)}")
        if arr.shape[0] == 0:
            raise ProtocolError(f"input {spec.name!r}: the batch has no rows")
        if arr.dtype.kind == "f" and not spec.allow_non_finite:
            finite = np.isfinite(arr).reshape(len(arr), -1).all(axis=1)
            if not finite.all():
                row = int(np.argmin(finite))
                raise ProtocolError(
                    f"input {spec.name!r}: row {row} holds a non-finite value (NaN or Inf; a number past the range "
                    f"of {spec.datatype} is Inf too); this model accepts finite values only"
                )
        return self._lookup(arr)

    def _timeout_s(self, params: Mapping[str, Any]) -> float | None:
        t = params.get("timeout_ms")
        if t is None:
            return None
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t <= 0:
            raise ProtocolError(f"parameters.timeout_ms: expected a positive number of milliseconds, got {t!r}")
        return float(t) / 1000.0

    @describe(body=InferRequest, responses=(400, 401, 403, 404, 413, 500, 503, 504), secured=True)
    async def infer(self, request: Request) -> Response:
        """Infer: each row of the input is one request through the cascade (JSON or binary tensors)."""
        if (bad := self._check_name(request)) is not None:
            return bad
        retry = self.runtime.shed_now()
        if retry is not None:  # full even for one row: refuse before reading and decoding the body
            self.runtime.shed(1)
            return _error("admission queue full", 503, {"Retry-After": _retry_after(retry)})
        try:
            body = await self._body(request)
            dec = decode_infer_request(body, request.headers.get(HEADER_LENGTH))
            payloads = self._payloads(dec.inputs)
            timeout = self._timeout_s(dec.parameters)
        except ProtocolError as e:
            return _error(e.message, e.status)
        context = context_of(dec.parameters, request.headers)
        admitted = self.runtime.clock.now()
        try:
            reqs = self.layer.submit(payloads, timeout, context)
        except Overloaded as e:
            return _error(str(e), 503, {"Retry-After": _retry_after(e.retry_after_s)})
        except ServingError as e:
            return _error(str(e), e.status)
        futures = [r.future for r in reqs]
        if not await answered_or_gone(futures, request.receive):  # the client went away: drop rows not started
            self.runtime.cancel(reqs)
            await asyncio.gather(*futures, return_exceptions=True)
        results = [outcome(f) for f in futures]
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            worst = max(errors, key=lambda e: getattr(e, "status", 500))
            return _error(str(worst), getattr(worst, "status", 500))
        answers = [r for r in results if isinstance(r, Answer)]
        self.layer.answered(dec.id, reqs, answers, context)
        return self._respond(dec, answers, admitted)

    def _respond(self, dec: Any, answers: list[Answer], admitted: float) -> Response:
        first = answers[0]
        params: dict[str, Any] = {
            # admission to the last row's answer: what a client sees beyond it is the front door (bench measures it)
            "server_ms": max(0.0, max(a.finished for a in answers) - admitted) * 1000.0,
            "gear": first.gear,
            "fallback": any(a.fallback for a in answers),
            "queue_ms": max(a.queue_s for a in answers) * 1000.0,
            "compute_ms": max(a.compute_s for a in answers) * 1000.0,
            "emulated": self.model.emulated,
            "cached": any(a.cached for a in answers),
        }
        if len(answers) > 1:
            params["gears"] = ",".join(str(a.gear) for a in answers)
            params["fallbacks"] = ",".join("1" if a.fallback else "0" for a in answers)
        outputs = [
            OutputTensor("label", "INT64", np.array([a.label for a in answers], dtype=np.int64)),
            OutputTensor("certainty", "FP32", np.array([a.certainty for a in answers], dtype=np.float32)),
            OutputTensor("model", "BYTES", [a.model for a in answers]),
        ]
        if any(a.output is not None for a in answers):  # a generative cascade: its answers as text
            outputs.append(OutputTensor("text", "BYTES", [a.output.text if a.output else "" for a in answers]))
        try:
            body, headers = encode_infer_response(self.model.name, dec, outputs, params)
        except ProtocolError as e:
            return _error(e.message, e.status)
        return Response(body, headers=headers)

    # -- metrics and plans -------------------------------------------------------------------------------------
    @describe(responses=(401, 403), secured=True)
    async def metrics_endpoint(self, request: Request) -> Response:
        """Prometheus metrics."""
        if (bad := self._auth(request)) is not None:
            return bad
        return Response(self.metrics.render(), media_type=CONTENT_TYPE)

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

    @describe(body=GearPlan, responses=(401, 403, 413, 422), secured=True)
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
        generation = self.runtime.swap_plan(plan)
        return JSONResponse({"generation": generation, "gears": len(plan.gears)})


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _error(exc.detail or "error", exc.status_code)


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
            Route(base + "/infer", api.infer, methods=["POST"]),
        ]
    return routes


def plan_routes(api: _Api) -> list[BaseRoute]:
    return [
        Route("/v2/cascade/plan", api.get_plan, methods=["GET"]),
        Route("/v2/cascade/plan", api.put_plan, methods=["PUT"]),
    ]


def metrics_routes(api: _Api) -> list[BaseRoute]:
    return [Route("/metrics", api.metrics_endpoint, methods=["GET"])]


ROUTERS: tuple[Router, ...] = (health_routes, model_routes, plan_routes, cost_routes, openai_routes, metrics_routes)


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
) -> ASGIApp:
    """The ASGI app over ``runtime`` (started and stopped with the app's lifespan).

    Pass the same ``metrics`` observer that the runtime reports to (as :func:`cascadeserve.http.build_app`
    does), or a fresh one is made that only sees scrape-time gauges. ``routers`` (default :data:`ROUTERS`) lists
    the route groups; the OpenAPI document covers whatever they register.
    """
    opts = options or ServerOptions()
    obs = metrics or PrometheusObserver()
    obs.attach(runtime)
    api = _Api(runtime, model, obs, opts)
    if clipper is not None:
        api.layer = clipper
    api.replanner = replanner
    api.costs = costs

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await runtime.start()
        await api.layer.start()
        try:
            yield
        finally:
            if replanner is not None:
                await replanner.stop()
            await api.layer.stop(opts.stop_grace_s)
            await runtime.stop(opts.stop_grace_s)

    routes: list[BaseRoute] = [r for router in routers for r in router(api)]
    routes += api.layer.routes(api)
    routes += openapi_routes(routes, opts.auth_token is not None or opts.admin_token is not None, model.name)
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error, Exception: server_error},
    )
    return InferFastPath(app, api.model.name, api.infer, api)
