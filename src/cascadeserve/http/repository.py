"""Several cascades in one server, and Triton's model repository API over them.

A :class:`Repository` is the ASGI app ``serve`` runs: it holds one served cascade per name (each an
:class:`~cascadeserve.http.server.App` with its own plan, runtime, queues, devices and metrics) and sends each
request to the cascade it names:

* ``/v2/models/<name>/...`` (infer, metadata, ready, stats) to that cascade; an unknown name is a 404 listing the
  served ones;
* ``POST /v1/completions`` and ``/v1/chat/completions`` by the body's ``model``; ``GET /v1/models`` lists them all,
  ``GET /v1/models/<name>`` goes to that cascade (an unknown name: the first cascade answers OpenAI's 404);
* ``GET /metrics``: every cascade's metrics, each sample labelled ``cascade="<name>"`` (Triton's
  ``nv_inference_*`` are labelled ``model="<name>"`` instead, as Triton labels them);
* ``/v2/health/ready``: ready while every cascade is (Triton's rule); live while the process is;
* ``GET /v2/models/stats``: Triton's statistics of every cascade;
* ``GET /``: the first cascade's app answers it, listing every cascade served (:mod:`cascadeserve.http.root`);
* ``POST /v2/repository/index``: each cascade with its state (``READY``, or ``UNAVAILABLE`` with a reason while it
  unloads);
* ``POST /v2/repository/models/<name>/load`` (admin token): builds the cascade ``<name>`` with the repository's
  builder (``serve --model-repository DIR``: the folder ``DIR/<name>``, :mod:`cascadeserve.workload.repository`;
  without a builder the load API is off, 403), starts it and serves it under ``<name>``; tritonclient's
  ``load_model(name, config=...)`` sends its parameters as the JSON string ``parameters.config``. The cascades
  already served keep serving meanwhile (the models load on a worker thread). With a state folder the loaded
  cascades are recorded and loaded again on the next start, before the server is ready;
* ``POST /v2/repository/models/<name>/unload`` (admin token): stops admitting to it (its readiness turns false),
  lets what it admitted finish within the server's grace period, stops it and forgets it;
* anything else (the plan and cost endpoints, Clipper's REST, the OpenAPI document) to the first cascade, or to
  the one a ``?model=<name>`` query names.

Loading and unloading change which cascades exist, never a request in flight: a request is routed once, on
arrival, to a cascade that stays until what it admitted has been answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry
from starlette.responses import JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send

from cascadeserve.http.app import ServerOptions
from cascadeserve.http.asgi import Labelled, Lifespan, replaying
from cascadeserve.http.control import AuthError, check_bearer
from cascadeserve.http.limits import loads, read_body
from cascadeserve.http.metrics import CONTENT_TYPE
from cascadeserve.http.root import CASCADES
from cascadeserve.http.triton_metrics import exposition
from cascadeserve.http.v2 import ProtocolError

if TYPE_CHECKING:
    from cascadeserve.http.infer import ServedModel
    from cascadeserve.http.metrics import PrometheusObserver
    from cascadeserve.http.persist import ServerState
    from cascadeserve.runtime import Runtime


class Control(Protocol):
    """What the repository needs of its model control (:class:`~cascadeserve.http.model_control.ModelControl`)."""

    def check_api(self, action: str) -> None: ...

    async def start(self, repo: Repository) -> None: ...

    async def stop(self) -> None: ...


class App(Protocol):
    """What the repository needs of a served cascade (:class:`cascadeserve.http.server.App`)."""

    @property
    def asgi(self) -> Any: ...

    @property
    def runtime(self) -> Runtime: ...

    @property
    def metrics(self) -> PrometheusObserver: ...

    @property
    def model(self) -> ServedModel: ...


__all__ = ["Builder", "Control", "LoadError", "Repository", "RepositoryError"]

Builder = Callable[[str, Mapping[str, Any]], App]
"""Builds a cascade named by its first argument from the load request's ``parameters`` (raises :class:`LoadError`
naming the parameter, or any error, which becomes a 400 naming the cascade)."""

_MODEL = re.compile(r"^/v2/models/([^/]+)(?:/.*)?$")
_CONTROL = re.compile(r"^/v2/repository/models/([^/]+)/(load|unload)$")


class LoadError(Exception):
    """A load request the builder refuses (400), naming the parameter."""


class RepositoryError(Exception):
    """A repository call refused: its HTTP status and a message naming the model or parameter (the gRPC front end
    maps the status to its code)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message, self.status = message, status


def _error(message: str, status: int) -> Response:
    return JSONResponse({"error": message}, status_code=status)


@dataclass
class _Entry:
    app: App
    lifespan: Lifespan | None = None  # None: the first cascade, whose lifespan is the server's own
    unloading: bool = False
    active: int = 0  # HTTP requests routed to it and not yet answered
    drained: asyncio.Event | None = None  # set when ``active`` falls to 0 while it retires


@dataclass
class Repository:
    """The cascades one server serves, by name (module docstring). ``first`` is served from start-up, under its
    own lifespan (the server's); ``build`` makes the cascades that ``load`` requests name (``None``: the
    repository is fixed, and load answers 403)."""

    first: App
    options: ServerOptions = field(default_factory=ServerOptions)
    build: Builder | None = None
    state: ServerState | None = None  # records the loaded cascades; they load again on start
    available: Callable[[], list[str]] | None = None  # the repository's folders, loaded or not (the index lists them)
    control: Control | None = None  # how cascades load besides the API: at start, by polling (model_control.py)
    _entries: dict[str, _Entry] = field(init=False, default_factory=dict)
    _busy: set[str] = field(init=False, default_factory=set)  # names being loaded or unloaded
    _params: dict[str, dict[str, Any]] = field(init=False, default_factory=dict)  # each loaded one's parameters
    _unloaded: set[str] = field(init=False, default_factory=set)  # unloaded since start: UNAVAILABLE in the index

    def __post_init__(self) -> None:
        self._entries[self.first.model.name] = _Entry(self.first)

    # -- what is served ---------------------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return list(self._entries)

    def app(self, name: str) -> App | None:
        entry = self._entries.get(name)
        return None if entry is None or entry.unloading else entry.app

    @property
    def accepting(self) -> bool:
        return any(e.app.runtime.accepting for e in self._entries.values())

    def begin_shutdown(self) -> None:
        """Every cascade: not ready, admit nothing, drain (the server's shutdown signal)."""
        for entry in self._entries.values():
            if entry.app.runtime.accepting:
                entry.app.runtime.begin_shutdown()

    # -- ASGI -------------------------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.first.asgi(scope, receive, send)
            return
        try:
            target, response = await self._route(scope, receive)
        except ProtocolError as e:  # a body over the limit, or JSON nested too deeply (http/limits.py)
            target, response = None, _error(e.message, e.status)
        if response is not None:
            await response(scope, receive, send)
            return
        assert target is not None
        body = scope.pop("_body", None)  # read to route it by its model: given again to the cascade
        # counted from routing on: a cascade that retires (reload, unload) waits for what was routed to it, so a
        # request routed just before still reaches its admission (nothing awaits between routing and here)
        entry = next((e for e in self._entries.values() if e.app.asgi is target), None)
        if entry is not None:
            entry.active += 1
        try:
            await target(scope, receive if body is None else replaying(body, receive), send)
        finally:
            if entry is not None:
                entry.active -= 1
                if entry.active == 0 and entry.drained is not None:
                    entry.drained.set()

    async def _route(self, scope: Scope, receive: Receive) -> tuple[Any, Response | None]:
        """The cascade a request goes to, or the repository's own answer. Only the methods the repository serves
        are answered here; any other goes to the first cascade's app, which answers 405 naming those it allows."""
        path, method = scope["path"], scope["method"]
        several = len(self._entries) > 1
        if method == "GET" and path == "/metrics":
            return None, self._metrics(scope)
        if method == "GET" and path == "/v2/health/ready":
            return None, self._ready()
        if method in ("GET", "POST") and path == "/v2/repository/index":
            return None, self._auth(scope) or await self._index(receive)
        if method == "POST" and (m := _CONTROL.match(path)):
            return None, self._admin(scope) or await self._control(m.group(1), m.group(2), receive)
        if path == "/v2/models/stats":  # Triton's statistics of every model (not a model named "stats")
            if several and method == "GET":
                return None, self._auth(scope) or self._stats()
            return self.first.asgi, None
        if (m := _MODEL.match(path)) and m.group(1) != "stats":
            app = self.app(m.group(1))
            if app is None:
                return None, self._unknown(m.group(1))
            return app.asgi, None
        if several and method == "GET" and path == "/v1/models":
            return None, self._auth(scope) or self._models()
        if several and method == "GET" and path.startswith("/v1/models/"):  # one model object: its cascade answers
            return (self.app(path[len("/v1/models/") :]) or self.first).asgi, None
        if several and method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            body = await _read(receive, self.options.max_body_bytes)
            scope["_body"] = body
            name = _body_model(body)
            app = self.app(name) if name is not None else None
            return (app or self.first).asgi, None  # an unknown model: the first cascade answers OpenAI's 404
        if path == "/":  # the root document: the first cascade's app answers it, naming every cascade served
            scope[CASCADES] = [n for n in self.names if self.app(n) is not None]
            return self.first.asgi, None
        name = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("model", [None])[0]
        if name is not None:
            app = self.app(name)
            return (None, self._unknown(name)) if app is None else (app.asgi, None)
        return self.first.asgi, None

    # -- repository endpoints ----------------------------------------------------------------------------------
    def _unknown_message(self, name: str) -> str:
        return f"unknown model {name!r}; this server serves {', '.join(repr(n) for n in self.names)}"

    def _unknown(self, name: str) -> Response:
        return _error(self._unknown_message(name), 404)

    def _auth(self, scope: Scope) -> Response | None:
        if self.options.auth_token is None:
            return None
        tokens = tuple(t for t in (self.options.auth_token, self.options.admin_token) if t)
        return _refused(lambda: check_bearer(_authorization(scope), tokens, what="this endpoint"))

    def _admin(self, scope: Scope) -> Response | None:
        return _refused(lambda: self.check_admin(_authorization(scope)))

    def index(self, *, ready: bool = False) -> list[dict[str, Any]]:
        """Each cascade with its state, as Triton's index: ``READY``; ``UNAVAILABLE`` with a reason while it stops
        (``unloading``) and once unloaded (``unloaded``); a repository folder never loaded with its name only.
        ``ready``: the ``READY`` ones only."""
        rows = []
        for name, entry in self._entries.items():
            state = "UNAVAILABLE" if entry.unloading or not entry.app.runtime.accepting else "READY"
            row: dict[str, Any] = {"name": name, "version": "1", "state": state}
            if entry.unloading:
                row["reason"] = "unloading"
            rows.append(row)
        for name in sorted(set(self.available() if self.available is not None else ()) | self._unloaded):
            if name not in self._entries:
                reason = {"state": "UNAVAILABLE", "reason": "unloaded"} if name in self._unloaded else {}
                rows.append({"name": name, **({"version": "1"} if reason else {}), **reason})
        return [r for r in rows if r.get("state") == "READY"] if ready else rows

    async def _index(self, receive: Receive) -> Response:
        try:
            body = loads(await _read(receive, self.options.max_body_bytes) or b"{}")
        except (ValueError, ProtocolError):
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("ready", False), bool):
            return _error("body: expected a JSON object, optionally with 'ready': true or false", 400)
        return JSONResponse(self.index(ready=body.get("ready", False)))

    def check_admin(self, authorization: str | None) -> None:
        """Pass when ``authorization`` carries the admin token; raise AuthError (401/403) otherwise, or 403 when
        the server has none (the repository is then read-only)."""
        if self.options.admin_token is None:
            raise AuthError("the repository API is off: start the server with --admin-token", 403)
        check_bearer(authorization, (self.options.admin_token,), what="the repository API")

    def api(self, name: str) -> Any:
        """The request handlers of the cascade ``name`` (the gRPC front end's), or ``None`` when none is served."""
        app = self.app(name)
        return None if app is None else getattr(app.asgi, "api", None)

    def _ready(self) -> Response:
        for name, entry in self._entries.items():
            state = entry.app.runtime.readiness()
            if not entry.unloading and not state.ready:
                return JSONResponse({"ready": False, "reason": f"{name}: {state.reason}"}, status_code=503)
        return JSONResponse({"ready": True})

    def _stats(self) -> Response:
        rows = [row for n, e in self._entries.items() for row in e.app.metrics.stats.render(n)["model_stats"]]
        return JSONResponse({"model_stats": rows})

    def _models(self) -> Response:
        data = [{"id": n, "object": "model", "owned_by": "cascadeserve"} for n in self.names if self.app(n)]
        return JSONResponse({"object": "list", "data": data})

    def _metrics(self, scope: Scope) -> Response:
        if (bad := self._auth(scope)) is not None:
            return bad
        registry = CollectorRegistry(auto_describe=False)
        registry.register(Labelled({n: e.app.metrics.registry for n, e in self._entries.items()}))
        return Response(exposition(registry), media_type=CONTENT_TYPE)

    async def _control(self, name: str, action: str, receive: Receive) -> Response:
        try:
            if action == "unload":
                await self.unload(name)
                return JSONResponse({"unloaded": name})
            try:
                params = loads(await _read(receive, self.options.max_body_bytes) or b"{}").get("parameters", {})
            except (ValueError, AttributeError):
                return _error("body: expected a JSON object, optionally with 'parameters'", 400)
            app = await self.load(name, params)
        except RepositoryError as e:
            return _error(e.message, e.status)
        return JSONResponse({"loaded": name, "models": list(app.runtime.plan.models())})

    async def load(self, name: str, params: Any, *, restoring: bool = False, internal: bool = False) -> App:
        """Build the cascade ``name`` from the load ``params`` (module docstring), start it and serve it; raise
        :class:`RepositoryError` naming what is wrong. The other cascades keep serving meanwhile. A load reads the
        folder's files afresh (a plan recorded for the name is forgotten) unless ``restoring`` it on start.

        A load of a name already served is Triton's reload: the new cascade is built and started beside the old,
        takes every request that arrives from then on, and the old one finishes what it admitted and stops; no
        request is lost, and a reload that fails leaves the old one serving. ``internal``: the server's own load
        (at start, or polling), which the model control mode allows even where it refuses the API's."""
        if self.build is None:
            raise RepositoryError(
                "the load API is off: this server's cascades are fixed at start-up (serve --model-repository DIR "
                "serves its folders by name)",
                403,
            )
        if self.control is not None and not internal:
            self.control.check_api("load")
        if name in self._busy:
            raise RepositoryError(f"model {name!r} is being loaded or unloaded; try again once that is done", 409)
        old = self._entries.get(name)
        if old is not None and old.lifespan is None:
            raise RepositoryError(
                f"model {name!r} is the server's first cascade: swap its plan with PUT /v2/cascade/plan", 409
            )
        if not isinstance(params, dict):
            raise RepositoryError("parameters: expected an object", 400)
        if "config" in params:  # tritonclient's load_model(name, config=JSON): the same parameters, as one string
            try:
                params = loads(params["config"], "parameters.config")
            except (TypeError, ValueError, ProtocolError):
                params = None
            if not isinstance(params, dict):
                raise RepositoryError('parameters.config: expected a JSON object (such as {"emulate": true})', 400)
        self._busy.add(name)
        if self.state is not None and not restoring:
            self.state.forget(name)
        try:  # reading files and loading models blocks: a worker thread, so the other cascades keep serving
            app = await asyncio.to_thread(self.build, name, params)
            lifespan = Lifespan(app.asgi)
            await lifespan.start()
        except LoadError as e:
            self._busy.discard(name)
            raise RepositoryError(f"model {name!r}: {e}", 400) from None
        except Exception as e:  # a bad file, a model that fails to load: the load fails, nothing else does
            self._busy.discard(name)
            raise RepositoryError(f"model {name!r} did not load: {type(e).__name__}: {e}", 400) from None
        try:
            self._entries[name] = _Entry(app, lifespan)  # new requests go to the new cascade from here on
            self._unloaded.discard(name)
            self._params[name] = dict(params)
            self._record()
            if old is not None:  # a reload: the old cascade finishes what it admitted, then stops
                await self._retire(old)
        finally:
            self._busy.discard(name)
        return app

    async def _retire(self, entry: _Entry) -> None:
        """Route nothing more to ``entry``, let the requests routed to it finish (within the grace period), then
        stop it."""
        assert entry.lifespan is not None
        entry.unloading = True
        if entry.active:
            entry.drained = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(entry.drained.wait(), self.options.stop_grace_s)
        entry.app.runtime.begin_shutdown()
        await entry.lifespan.stop()

    def _record(self) -> None:
        if self.state is not None:
            self.state.save_loaded(list(self._params.items()))

    async def restore(self) -> None:
        """Load again the cascades the state folder records as loaded (on start); one that fails is logged and
        forgotten, and the others load."""
        if self.state is None or self.build is None:
            return
        for name, params in self.state.loaded():
            if name in self._entries:
                continue
            try:
                await self.load(name, params, restoring=True)
                self.state.log(f"restored model {name!r} from the model repository (loaded before the restart)")
            except RepositoryError as e:
                self.state.log(f"not restored: {e.message}")
        self._record()

    async def unload(self, name: str, *, internal: bool = False) -> None:
        """Stop admitting to the cascade ``name``, let what it admitted finish (the grace period), stop it and
        forget it (the index keeps it, ``UNAVAILABLE``); raise :class:`RepositoryError` for the first cascade, an
        unknown one or one already stopping."""
        if self.control is not None and not internal:
            self.control.check_api("unload")
        entry = self._entries.get(name)
        if entry is None:
            raise RepositoryError(self._unknown_message(name), 404)
        if entry.lifespan is None:
            raise RepositoryError(f"model {name!r} is the server's first cascade; stop the server to stop it", 409)
        if name in self._busy:
            raise RepositoryError(f"model {name!r} is being loaded or unloaded; try again once that is done", 409)
        self._busy.add(name)
        try:
            await self._retire(entry)  # new requests for it: 404; what it admitted finishes (runtime.stop's grace)
            del self._entries[name]
            self._unloaded.add(name)
            self._params.pop(name, None)
            if self.state is not None:
                self.state.forget(name)
            self._record()
        finally:
            self._busy.discard(name)

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def on_send(message: Message) -> None:
            if message["type"] == "lifespan.startup.complete":  # what was loaded before a restart, before ready
                await self.restore()
                if self.control is not None:
                    await self.control.start(self)
            if message["type"] == "lifespan.shutdown.complete":  # the loaded cascades stop before the first
                if self.control is not None:
                    await self.control.stop()
                for entry in list(self._entries.values()):
                    if entry.lifespan is not None:
                        entry.app.runtime.begin_shutdown()
                        await entry.lifespan.stop()
            await send(message)

        await self.first.asgi(scope, receive, on_send)


def _authorization(scope: Scope) -> str | None:
    """The request's ``Authorization`` header, if any."""
    for key, value in scope.get("headers", []):
        if key.lower() == b"authorization":
            return str(value.decode("latin-1"))
    return None


def _refused(check: Callable[[], None]) -> Response | None:
    """``None`` when ``check`` passes; the 401/403 answer of the AuthError it raises otherwise."""
    try:
        check()
    except AuthError as e:
        return _error(str(e), e.status)
    return None


async def _read(receive: Receive, limit: int) -> bytes:
    """The body, within ``limit`` bytes (the gate every route reads through: http/limits.py)."""
    return await read_body(receive, limit)


def _body_model(body: bytes) -> str | None:
    try:
        model = loads(body).get("model")
    except (ValueError, AttributeError, ProtocolError):
        return None
    return model if isinstance(model, str) else None
