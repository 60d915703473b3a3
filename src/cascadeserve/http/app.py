"""The ASGI app: Open Inference Protocol V2 endpoints, ``/metrics`` and the plan endpoints, over a Runtime.

Routes::

    GET  /v2/health/live   /v2/health/ready   /v2
    GET  /v2/models/{name}[/versions/{v}]        model metadata (inputs, outputs, emulated)
    GET  /v2/models/{name}[/versions/{v}]/ready
    POST /v2/models/{name}[/versions/{v}]/infer  a batch of rows in one request; JSON or binary tensors
    GET  /metrics                                Prometheus text format
    GET  /v2/cascade/plan    PUT /v2/cascade/plan   read the plan in force; hot-swap a new one

Every row of an infer request becomes one runtime request with its own path through the cascade; the response
carries ``label``, ``certainty`` and ``model`` per row, and ``gear``, ``fallback``, timings and ``emulated`` in
``parameters``. Errors are ``{"error": "..."}`` with 400 (bad input, naming the field), 404 (unknown model),
413 (body over the limit), 500 (a model raised; named), 503 + Retry-After (admission queue full) or 504 (the
deadline ``parameters.timeout_ms`` passed before any stage ran).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from cascadeserve import __version__
from cascadeserve.errors import CascadeServeError
from cascadeserve.http.clipper import ClipperLayer, context_of
from cascadeserve.http.metrics import CONTENT_TYPE, PrometheusObserver
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

__all__ = ["ServedModel", "ServerOptions", "create_app"]


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
    retry_after_s: int = 1


def _error(message: str, status: int, headers: Mapping[str, str] | None = None) -> Response:
    return JSONResponse({"error": message}, status_code=status, headers=dict(headers or {}))


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

    # -- health and metadata -----------------------------------------------------------------------------------
    async def live(self, request: Request) -> Response:
        return JSONResponse({"live": True})

    async def ready(self, request: Request) -> Response:
        ok = self.runtime.accepting
        return JSONResponse({"ready": ok}, status_code=200 if ok else 503)

    async def server_metadata(self, request: Request) -> Response:
        return JSONResponse(
            {"name": "cascadeserve", "version": __version__, "extensions": ["binary_tensor_data", "cascade_plan"]}
        )

    def _check_name(self, request: Request) -> Response | None:
        name = request.path_params["name"]
        if name != self.model.name:
            return _error(f"unknown model {name!r}; this server serves {self.model.name!r}", 404)
        return None

    async def model_metadata(self, request: Request) -> Response:
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

    async def model_ready(self, request: Request) -> Response:
        if (bad := self._check_name(request)) is not None:
            return bad
        return await self.ready(request)

    # -- inference ---------------------------------------------------------------------------------------------
    async def _body(self, request: Request) -> bytes:
        limit = self.opts.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ProtocolError(f"body: {declared} bytes is over the limit of {limit} bytes", 413)
        chunks = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ProtocolError(f"body: over the limit of {limit} bytes", 413)
            chunks.append(chunk)
        return b"".join(chunks)

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
        return self._lookup(arr)

    def _timeout_s(self, params: Mapping[str, Any]) -> float | None:
        t = params.get("timeout_ms")
        if t is None:
            return None
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t <= 0:
            raise ProtocolError(f"parameters.timeout_ms: expected a positive number of milliseconds, got {t!r}")
        return float(t) / 1000.0

    async def infer(self, request: Request) -> Response:
        if (bad := self._check_name(request)) is not None:
            return bad
        try:
            body = await self._body(request)
            dec = decode_infer_request(body, request.headers.get(HEADER_LENGTH))
            payloads = self._payloads(dec.inputs)
            timeout = self._timeout_s(dec.parameters)
        except ProtocolError as e:
            return _error(e.message, e.status)
        context = context_of(dec.parameters, request.headers)
        try:
            reqs = self.layer.submit(payloads, timeout, context)
        except Overloaded as e:
            return _error(str(e), 503, {"Retry-After": str(self.opts.retry_after_s)})
        except ServingError as e:
            return _error(str(e), e.status)
        if len(reqs) == 1:
            try:
                answers = [await reqs[0].future]
            except ServingError as e:
                return _error(str(e), e.status)
        else:
            results = await asyncio.gather(*(r.future for r in reqs), return_exceptions=True)
            errors = [r for r in results if isinstance(r, BaseException)]
            if errors:
                worst = max(errors, key=lambda e: getattr(e, "status", 500))
                return _error(str(worst), getattr(worst, "status", 500))
            answers = [r for r in results if isinstance(r, Answer)]
        self.layer.answered(dec.id, reqs, answers, context)
        return self._respond(dec, answers)

    def _respond(self, dec: Any, answers: list[Answer]) -> Response:
        first = answers[0]
        params: dict[str, Any] = {
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
        try:
            body, headers = encode_infer_response(self.model.name, dec, outputs, params)
        except ProtocolError as e:
            return _error(e.message, e.status)
        return Response(body, headers=headers)

    # -- metrics and plans -------------------------------------------------------------------------------------
    async def metrics_endpoint(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type=CONTENT_TYPE)

    async def get_plan(self, request: Request) -> Response:
        return Response(self.runtime.plan.to_json(), media_type="application/json")

    async def put_plan(self, request: Request) -> Response:
        try:
            body = await self._body(request)
            plan = GearPlan.from_json(body.decode("utf-8", errors="replace"))
            missing = sorted(set(plan.models()) - set(self.runtime.model_names))
            if missing:
                raise ProtocolError(f"plan: models {', '.join(missing)} are not loaded on this server")
            if self.model.check_plan is not None:
                self.model.check_plan(plan)
        except ProtocolError as e:
            return _error(e.message, e.status)
        except CascadeServeError as e:
            return _error(f"plan: {e}", 400)
        generation = self.runtime.swap_plan(plan)
        return JSONResponse({"generation": generation, "gears": len(plan.gears)})


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _error(exc.detail or "error", exc.status_code)


async def _server_error(request: Request, exc: Exception) -> Response:
    return _error(f"internal error: {type(exc).__name__}: {exc}", 500)


class _InferFastPath:
    """ASGI wrapper: ``POST /v2/models/<served model>[/versions/1]/infer`` skips Starlette's router and middleware.

    Routing and the exception middleware cost ~40% of the server's CPU per request in a profile of the HTTP
    benchmark; inference requests are the hot path, so they go straight to the handler (with the same 500 handling
    for a handler that raises). Everything else, lifespan included, goes to the Starlette app unchanged.
    """

    def __init__(self, app: Starlette, api: _Api) -> None:
        self.app = app
        self.api = api
        base = f"/v2/models/{api.model.name}"
        self.paths = frozenset({base + "/infer", base + "/versions/1/infer"})
        self.state = app.state  # tests and tools reach app.state through the wrapper

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in self.paths:
            scope["path_params"] = {"name": self.api.model.name}
            request = Request(scope, receive)
            try:
                response = await self.api.infer(request)
            except Exception as exc:  # the same answer the app's exception handler gives
                response = await _server_error(request, exc)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def create_app(
    runtime: Runtime,
    model: ServedModel,
    *,
    metrics: PrometheusObserver | None = None,
    options: ServerOptions | None = None,
    clipper: ClipperLayer | None = None,
) -> ASGIApp:
    """The ASGI app over ``runtime`` (started and stopped with the app's lifespan).

    Pass the same ``metrics`` observer that the runtime reports to (as :func:`cascadeserve.http.build_app`
    does), or a fresh one is made that only sees scrape-time gauges.
    """
    opts = options or ServerOptions()
    obs = metrics or PrometheusObserver()
    obs.attach(runtime)
    api = _Api(runtime, model, obs, opts)
    if clipper is not None:
        api.layer = clipper

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await runtime.start()
        await api.layer.start()
        try:
            yield
        finally:
            await api.layer.stop(opts.stop_grace_s)
            await runtime.stop(opts.stop_grace_s)

    routes = [
        Route("/v2/health/live", api.live, methods=["GET"]),
        Route("/v2/health/ready", api.ready, methods=["GET"]),
        Route("/v2", api.server_metadata, methods=["GET"]),
        Route("/metrics", api.metrics_endpoint, methods=["GET"]),
        Route("/v2/cascade/plan", api.get_plan, methods=["GET"]),
        Route("/v2/cascade/plan", api.put_plan, methods=["PUT"]),
    ]
    for base in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
        routes += [
            Route(base, api.model_metadata, methods=["GET"]),
            Route(base + "/ready", api.model_ready, methods=["GET"]),
            Route(base + "/infer", api.infer, methods=["POST"]),
        ]
    routes += api.layer.routes(api)
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error, Exception: _server_error},
    )
    return _InferFastPath(app, api)
