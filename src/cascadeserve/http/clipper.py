"""Clipper's serving layer over HTTP: model selection among alternatives, feedback, and Clipper's REST API.

:class:`ClipperLayer` sits between the front end and the runtimes. Without alternatives it passes requests to
the served runtime unchanged. With alternatives (other plans served beside the primary one, e.g. a candidate
version), its :class:`~cascadeserve.store.Selector` decides per request, per ``context`` (a request parameter
or a ``context`` header; a user or session id):

* ``exp3``: one alternative serves the row (the pick and its probability are kept for the feedback);
* ``exp4``: every alternative serves it, and the answer is the weighted vote, with its weight share as the
  ``certainty`` (the confidence) and ``exp4`` as the model. A member that failed or missed its deadline does
  not vote (Clipper's straggler mitigation).

Routes it adds to the app (registered by :func:`~cascadeserve.http.create_app`):

* ``POST /v2/models/{name}/feedback``: :mod:`cascadeserve.http.feedback`;
* ``POST /{app}/predict`` with Clipper's ``{"input": x}`` or ``{"input_batch": [x, ...]}``, answering
  ``{"query_id", "output", "default", "default_explanation"}`` (a batch: ``{"batch_predictions": [...]}``). The
  application is the served model's name; in ``--emulate`` mode ``x`` is a validation sample id. The latency SLO
  (``slo_ms``) is the request's deadline: past it the best earlier-stage (or ensemble-member) prediction answers,
  with ``default_explanation`` saying so, or the application's ``default_output`` with ``default: true`` when
  none ran;
* ``POST /{app}/update`` with Clipper's ``{"uid": ..., "input": x, "label": y}`` (or a ``query_id``): feedback
  for the latest query with that input.

Metrics (in the app's registry): cache hits, misses, evictions and invalidations; feedback accepted and correct;
the global selection weight of each alternative.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from cascadeserve.http.failures import public_error
from cascadeserve.http.feedback import (
    AnsweredLog,
    AnsweredRow,
    FeedbackError,
    StageOutcomes,
    apply_feedback,
    parse_feedback,
)
from cascadeserve.http.limits import loads
from cascadeserve.http.openapi import describe
from cascadeserve.http.v2 import DTYPES, ProtocolError, bf16_bits
from cascadeserve.plan import GearPlan
from cascadeserve.policy.cache import input_key
from cascadeserve.policy.selection import Pick, SelectionPolicy
from cascadeserve.runtime import Answer, DeadlineExceeded, Overloaded, Runtime, ServingError
from cascadeserve.runtime import Request as RuntimeRequest
from cascadeserve.store import MemorySelectionStore, SelectionStore, Selector, SqliteSelectionStore

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["DEADLINE_EXPLANATION", "ClipperLayer", "ClipperOptions", "Selected", "context_of"]

DEADLINE_EXPLANATION = "Failed to retrieve a prediction response within the specified latency SLO"

# The request bodies, for the OpenAPI document: what the handlers accept, no more and no less where JSON Schema can
# say it (whether an input fits the model, or an id was answered, only the handler can tell: 400 and 404)
_ID = {"type": ["string", "integer"]}
_FEEDBACK: dict[str, Any] = {
    "anyOf": [
        {
            "type": "object",
            "required": ["id", "label"],
            "properties": {"id": _ID, "label": {"description": "the true label, or a list of one per row"}},
            "not": {"anyOf": [{"required": ["ids"]}, {"required": ["labels"]}]},
        },
        {
            "type": "object",
            "required": ["ids", "labels"],
            "properties": {
                "ids": {"type": "array", "items": {"type": ["string", "integer", "boolean"]}},
                "labels": {"type": "array", "description": "one label (or list of labels) per id"},
            },
        },
    ]
}
_BATCH = {"required": ["input_batch"], "properties": {"input_batch": {"type": "array", "minItems": 1}}}
_PREDICT: dict[str, Any] = {
    "type": "object",
    "description": "input: one input of the model (in --emulate mode, a validation sample id); else input_batch: a "
    "non-empty list of them; context: the selection context (a user or session id)",
    "anyOf": [{"required": ["input"]}, _BATCH],
}
_UPDATE: dict[str, Any] = {
    "type": "object",
    "description": "label: the true label of the latest query with this input (or of the query query_id)",
    "required": ["label"],
    "anyOf": [{"required": ["query_id"]}, {"required": ["input"]}, _BATCH],
}


def context_of(parameters: Mapping[str, Any], headers: Mapping[str, str]) -> str:
    """The selection context of a request: its ``context`` parameter, else its ``context`` header, else global."""
    ctx = parameters.get("context")
    if ctx is None:
        ctx = headers.get("context")
    return "" if ctx is None else str(ctx)


class Selected:
    """A row served through the selection layer: its future, and what feedback will need."""

    __slots__ = ("future", "members", "pick")

    def __init__(self, future: asyncio.Future[Answer], pick: Pick | None = None) -> None:
        self.future = future
        self.pick = pick
        self.members: tuple[int | None, ...] | None = None


class ClipperLayer:
    """Selection, feedback and Clipper's REST API over a primary runtime and optional alternatives."""

    def __init__(
        self,
        runtime: Runtime,
        app_name: str,
        *,
        alternatives: Sequence[tuple[str, Runtime]] = (),
        primary_name: str = "current",
        selector: Selector | None = None,
        slo_ms: float | None = None,
        default_output: int | None = None,
        window: int = 65_536,
    ) -> None:
        if alternatives and selector is None:
            raise ValueError("alternatives need a selector (exp3 or exp4)")
        if selector is not None and len(selector.alternatives) != len(alternatives) + 1:
            raise ValueError("the selector must name the primary and every alternative, in order")
        self.runtime = runtime
        self.app_name = app_name
        self.runtimes: list[tuple[str, Runtime]] = [(primary_name, runtime), *alternatives]
        self.selector = selector if alternatives else None
        self.slo_ms = slo_ms
        self.default_output = default_output
        self.log = AnsweredLog(window)
        self.outcomes = StageOutcomes()
        self.feedback_accepted = 0
        self.feedback_correct = 0
        self._qid = itertools.count()
        self._by_input: OrderedDict[Hashable, str] = OrderedDict()  # Clipper's update names a query by its input
        self._tasks: set[asyncio.Task[None]] = set()

    # -- lifecycle of the alternatives (the primary runtime is the app's) --------------------------------------
    async def start(self) -> None:
        for _, rt in self.runtimes[1:]:
            await rt.start()

    async def stop(self, grace_s: float) -> None:
        for _, rt in self.runtimes[1:]:
            await rt.stop(grace_s)

    # -- serving ----------------------------------------------------------------------------------------------
    def submit(self, payloads: Sequence[Any], timeout_s: float | None, context: str = "") -> list[Any]:
        """Admit the rows as the selection policy says; each returned item has a ``future`` of an Answer."""
        sel = self.selector
        if sel is None:
            return self.runtime.submit(payloads, timeout_s)
        if sel.policy == "exp3":
            picks = [sel.choose(context) for _ in payloads]
            out: list[Any] = [None] * len(payloads)
            for alt in sorted({p.alternative for p in picks}):
                rows = [i for i, p in enumerate(picks) if p.alternative == alt]
                reqs = self.runtimes[alt][1].submit([payloads[i] for i in rows], timeout_s)
                for i, req in zip(rows, reqs, strict=True):
                    out[i] = Selected(req.future, picks[i])
            return out
        members = [rt.submit(payloads, timeout_s) for _, rt in self.runtimes]  # exp4: everyone answers
        loop = asyncio.get_running_loop()
        result = []
        for i in range(len(payloads)):
            row = Selected(loop.create_future())
            task = loop.create_task(self._combine(row, [m[i].future for m in members], context))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            result.append(row)
        return result

    async def _combine(self, row: Selected, futures: list[asyncio.Future[Answer]], context: str) -> None:
        results = await asyncio.gather(*futures, return_exceptions=True)
        answers = [r if isinstance(r, Answer) else None for r in results]
        row.members = tuple(None if a is None else a.label for a in answers)
        ok = [a for a in answers if a is not None]
        if not ok:
            err = next(r for r in results if isinstance(r, BaseException))
            row.future.set_exception(err)
            return
        assert self.selector is not None
        ens = self.selector.combine(row.members, context)
        row.future.set_result(
            dataclasses.replace(
                ok[0],
                label=ens.label,
                certainty=ens.confidence,
                model="exp4",
                stage=max(a.stage for a in ok),
                queue_s=max(a.queue_s for a in ok),
                compute_s=max(a.compute_s for a in ok),
                finished=max(a.finished for a in ok),
                fallback=any(a.fallback for a in ok) or len(ok) < len(answers),
            )
        )

    def answered(self, rid: str | None, reqs: Sequence[Any], answers: Sequence[Answer], context: str = "") -> None:
        """Keep an answered request for its feedback (only requests with an id can be named by one)."""
        if rid is None:
            return
        self.log.record(
            rid,
            [
                AnsweredRow(
                    a.label,
                    a.model,
                    a.stage,
                    a.certainty,
                    context,
                    getattr(r, "pick", None),
                    getattr(r, "members", None),
                    _request_id(r),
                )
                for r, a in zip(reqs, answers, strict=True)
            ],
        )

    def feedback(self, pairs: Sequence[tuple[str, object]]) -> dict[str, Any]:
        out = apply_feedback(self.log, pairs, self.outcomes, self.selector, self._label_sink())
        self.feedback_accepted += out["accepted"]
        self.feedback_correct += out["correct"]
        return out

    def _label_sink(self) -> Callable[[AnsweredRow, int], bool] | None:
        """Where labels go for online tuning with labels as the reference (the primary runtime alone serves)."""
        tuning = self.runtime.tuning if self.selector is None and self.runtime.generations else None
        if tuning is None or tuning.reference != "label":
            return None

        def sink(row: AnsweredRow, label: int) -> bool:
            return row.request is not None and tuning.label(row.request, label)

        return sink

    # -- routes -----------------------------------------------------------------------------------------------
    def routes(self, api: Any) -> list[Route]:
        """The feedback and Clipper routes, over the app's request handlers ``api`` (payload decoding)."""
        auth: Callable[[Request], Response | None] = api._auth  # the inference token, as on the V2 routes

        @describe(body=_FEEDBACK, responses=(400, 401, 403, 404), secured=True)
        async def v2_feedback(request: Request) -> Response:
            """Feedback: the true label of an answered request, by its V2 request id."""
            if (bad := auth(request)) is not None:
                return bad
            name = request.path_params["name"]
            if name != self.app_name:
                return _error(f"unknown model {name!r}; this server serves {self.app_name!r}", 404)
            try:
                obj = loads(await api._body(request))  # the gate: size, depth, elements (http/limits.py)
                return JSONResponse(self.feedback(parse_feedback(obj)))
            except (ProtocolError, FeedbackError) as e:
                return _error(e.message, e.status)

        @describe(body=_PREDICT, responses=(400, 401, 403, 404, 500, 502, 503, 504), secured=True)
        async def predict(request: Request) -> Response:
            """Clipper's predict: one input, or a batch of them, through the application's cascade."""
            if (bad := auth(request)) is not None:
                return bad
            return await self._predict(request, api)

        @describe(body=_UPDATE, responses=(400, 401, 403, 404), secured=True)
        async def update(request: Request) -> Response:
            """Clipper's update: the true label of the latest query with this input (or query id)."""
            if (bad := auth(request)) is not None:
                return bad
            return await self._update(request, api)

        routes = [
            Route("/v2/models/{name}/feedback", v2_feedback, methods=["POST"]),
            Route("/v2/models/{name}/versions/{version}/feedback", v2_feedback, methods=["POST"]),
            Route("/{app}/predict", predict, methods=["POST"]),
            Route("/{app}/update", update, methods=["POST"]),
        ]
        api.metrics.registry.register(_ClipperCollector(self))
        return routes

    def _inputs(self, obj: Any, api: Any) -> tuple[list[Any], np.ndarray, bool]:
        if not isinstance(obj, dict):
            raise ProtocolError("body: expected a JSON object with 'input' or 'input_batch'")
        if "input" in obj:
            rows, single, field = [obj["input"]], True, "input"
        elif "input_batch" in obj:
            rows, single, field = obj["input_batch"], False, "input_batch"
            if not isinstance(rows, list) or not rows:
                raise ProtocolError("input_batch: expected a non-empty list of inputs")
        else:
            raise ProtocolError("input: missing (send 'input' or 'input_batch')")
        if len(api.model.inputs) > 1:  # Clipper's REST carries one input per query
            names = ", ".join(i.name for i in api.model.inputs)
            raise ProtocolError(
                f"{field}: this model takes several input tensors ({names}); send them to "
                f"POST /v2/models/{api.model.name}/infer"
            )
        spec = api.model.input
        try:
            if spec.datatype == "BF16":  # numbers, rounded to bfloat16 as a V2 JSON tensor's are
                arr = bf16_bits(np.asarray(rows, dtype=np.float64))
            else:
                arr = np.asarray(rows, dtype=DTYPES[spec.datatype])
        except (TypeError, ValueError, OverflowError):
            raise ProtocolError(f"{field}: does not fit the model's input ({spec.datatype})") from None
        try:
            payloads = api.core.payloads({spec.name: arr})
        except ProtocolError as e:
            raise ProtocolError(f"{field}: {e.message}", e.status) from None
        return payloads, arr, single

    async def _predict(self, request: Request, api: Any) -> Response:
        if request.path_params["app"] != self.app_name:
            return _error(f"unknown application {request.path_params['app']!r}; this server has {self.app_name!r}", 404)
        try:
            obj = loads(await api._body(request))
            payloads, arr, single = self._inputs(obj, api)
        except ProtocolError as e:
            return _error(e.message, e.status)
        context = context_of(obj, request.headers)
        timeout = None if self.slo_ms is None else self.slo_ms / 1000.0
        try:
            reqs = self.submit(payloads, timeout, context)
        except Overloaded as e:
            return _error(str(e), 503, {"Retry-After": "1"})
        except ServingError as e:
            return _error(str(e), e.status)
        results = await asyncio.gather(*(r.future for r in reqs), return_exceptions=True)
        names: Mapping[int, str] | None = api.model.labels
        out: list[dict[str, Any]] = []
        for row, req, res in zip(arr, reqs, results, strict=True):
            qid = next(self._qid)
            if isinstance(res, Answer):
                rid = f"clipper:{qid}"
                self.answered(rid, [req], [res], context)
                key = input_key(row)
                self._by_input[key] = rid
                self._by_input.move_to_end(key)
                while len(self._by_input) > self.log.capacity:
                    self._by_input.popitem(last=False)
                why = f"the latency SLO passed: answered by {res.model} (stage {res.stage})" if res.fallback else ""
                one = {"query_id": qid, "output": res.label, "default": False, "default_explanation": why}
                if names is not None:  # the models config names the classes: the label's name too, as V2 answers
                    one["class_name"] = names.get(res.label, "")
                out.append(one)
            elif self.default_output is not None and isinstance(res, ServingError):
                why = DEADLINE_EXPLANATION if isinstance(res, DeadlineExceeded) else public_error(res)[0]
                out.append(
                    {"query_id": qid, "output": self.default_output, "default": True, "default_explanation": why}
                )
            else:
                return _error(*public_error(res))  # a model's own text only in the server log
        return JSONResponse(out[0] if single else {"batch_predictions": out})

    async def _update(self, request: Request, api: Any) -> Response:
        if request.path_params["app"] != self.app_name:
            return _error(f"unknown application {request.path_params['app']!r}; this server has {self.app_name!r}", 404)
        try:
            obj = loads(await api._body(request))
            if not isinstance(obj, dict) or "label" not in obj:
                raise ProtocolError("label: missing (Clipper's update is {'uid', 'input', 'label'})")
            if "query_id" in obj:
                rid = f"clipper:{obj['query_id']}"
            else:
                _, arr, _ = self._inputs({"input": obj.get("input")} if "input" in obj else obj, api)
                found = self._by_input.get(input_key(arr[0]))
                if found is None:
                    return _error("input: no answered query with this input (unknown or expired)", 404)
                rid = found
            result = self.feedback([(rid, obj["label"])])
        except ProtocolError as e:
            return _error(e.message, e.status)
        except FeedbackError as e:
            return _error(e.message, e.status)
        return JSONResponse(result)


def _request_id(r: Any) -> int | None:
    """The runtime request id of a served row (``None`` for a row of the selection layer, or a cache hit)."""
    return r.rid if isinstance(r, RuntimeRequest) and r.rid >= 0 else None


def _error(message: str, status: int, headers: Mapping[str, str] | None = None) -> Response:
    return JSONResponse({"error": message}, status_code=status, headers=dict(headers or {}))


class _ClipperCollector(Collector):
    """Scrape-time metrics: the caches' counters, feedback counts, selection weights."""

    def __init__(self, layer: ClipperLayer) -> None:
        self.layer = layer

    def collect(self) -> Iterator[Metric]:
        lay = self.layer
        names = ("hits", "misses", "evictions", "invalidations")
        fams = {
            n: CounterMetricFamily(f"cascadeserve_cache_{n}", f"Prediction cache {n}.", labels=["alternative"])
            for n in names
        }
        size = GaugeMetricFamily("cascadeserve_cache_entries", "Prediction cache entries.", labels=["alternative"])
        for alt, rt in lay.runtimes:
            cache = rt.cache
            if cache is None:
                continue
            for n in names:
                fams[n].add_metric([alt], float(getattr(cache, n)))
            size.add_metric([alt], float(len(cache)))
        yield from fams.values()
        yield size
        fb = CounterMetricFamily("cascadeserve_feedback", "Feedback rows accepted, by outcome.", labels=["outcome"])
        fb.add_metric(["correct"], float(lay.feedback_correct))
        fb.add_metric(["wrong"], float(lay.feedback_accepted - lay.feedback_correct))
        yield fb
        w = GaugeMetricFamily(
            "cascadeserve_selection_weight", "Global selection weight per alternative.", labels=["alternative"]
        )
        if lay.selector is not None:
            for (alt, _), weight in zip(lay.runtimes, lay.selector.state().weights, strict=True):
                w.add_metric([alt], weight)
        yield w


@dataclass(frozen=True)
class ClipperOptions:
    """A deployment's Clipper settings (``serve`` flags, or a config): alternatives, selection, SLO, default.

    ``alternatives`` are other plans served beside the primary one, each by its own runtime on the same backend
    and profile; ``selection`` picks among them (``exp3``) or combines them (``exp4``) with state in the SQLite file
    ``store_path`` (``None``: kept in memory only). ``slo_ms`` is the Clipper application's latency SLO (the
    deadline of its requests) and ``default_output`` its answer when no stage ran by then.
    """

    alternatives: tuple[tuple[str, GearPlan], ...] = ()
    primary_name: str = "current"
    selection: SelectionPolicy = "exp3"
    store_path: str | Path | None = "cascadeserve-selection.sqlite"
    eta: float = 0.1
    gamma: float = 0.05
    seed: int = 0
    slo_ms: float | None = None
    default_output: int | None = None
    feedback_window: int = 65_536

    def layer(self, runtime: Runtime, app_name: str, make_runtime: Callable[[GearPlan], Runtime]) -> ClipperLayer:
        """The layer over ``runtime``, with a runtime per alternative from ``make_runtime``."""
        names = [self.primary_name, *(n for n, _ in self.alternatives)]
        if len(set(names)) != len(names):
            raise ValueError(f"alternative names must be unique, got {', '.join(names)}")
        alts = [(n, make_runtime(p)) for n, p in self.alternatives]
        selector = None
        if alts:
            store: SelectionStore = (
                MemorySelectionStore() if self.store_path is None else SqliteSelectionStore(self.store_path)
            )
            selector = Selector(app_name, names, self.selection, store, eta=self.eta, gamma=self.gamma, seed=self.seed)
        return ClipperLayer(
            runtime,
            app_name,
            alternatives=alts,
            primary_name=self.primary_name,
            selector=selector,
            slo_ms=self.slo_ms,
            default_output=self.default_output,
            window=self.feedback_window,
        )
