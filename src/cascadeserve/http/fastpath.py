"""The inference hot path past Starlette's router, and the error answers every handler shares (500; Starlette's
HTTP errors, 405 with every method of the path in ``Allow``).

Split from :mod:`cascadeserve.http.app`: it decides nothing, it only routes one path to one handler.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match, Mount, Route
from starlette.types import Receive, Scope, Send

from cascadeserve.http.failures import public_error

__all__ = [
    "InferAnswer",
    "InferFastPath",
    "answered_or_gone",
    "disconnected",
    "http_error",
    "outcome",
    "server_error",
]


async def server_error(request: Request, exc: Exception) -> Response:
    """A handler that raised: 500 with a request id; the exception goes to the server log under it."""
    message, status = public_error(exc)
    return JSONResponse({"error": message}, status_code=status)


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's HTTP errors as ``{"error": ...}``; a 405's ``Allow`` names every method of the path."""
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # every method of the path: Starlette names only those of the first route matched
        headers["Allow"] = ", ".join(_allowed_methods(request.app.routes, request.scope))
    return JSONResponse({"error": exc.detail or "error"}, status_code=exc.status_code, headers=headers)


def _allowed_methods(routes: Sequence[BaseRoute], scope: Scope) -> list[str]:
    """The methods the routes serve at ``scope``'s path (HEAD with GET, as Starlette serves it), sorted."""
    methods: set[str] = set()
    for route in routes:
        match, child = route.matches(scope)  # PARTIAL: the path matches, the method does not
        if match == Match.NONE:
            continue
        if isinstance(route, Route) and route.methods:
            methods |= route.methods
        elif isinstance(route, Mount):
            methods.update(_allowed_methods(route.routes, {**scope, **child}))
    return sorted(methods)


class InferAnswer(Response):
    """A 200 with an infer answer's body and headers: the headers Starlette's ``Response(body, headers=headers)``
    sends, in the same order (the given ones lowercased, then Content-Length), without its general header set-up
    (the key scans for Content-Length and Content-Type, the media type): one of these per request."""

    def __init__(self, body: bytes, headers: Mapping[str, str]) -> None:
        self.status_code = 200
        self.background = None
        self.body = body
        raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        raw.append((b"content-length", b"%d" % len(body)))
        self.raw_headers = raw


class InferFastPath:
    """ASGI wrapper: ``POST /v2/models/<served model>[/versions/1]/infer`` skips Starlette's router and middleware.

    Routing and the exception middleware cost ~40% of the server's CPU per request in a profile of the HTTP
    benchmark; inference requests are the hot path, so they go straight to the handler (with the same 500 handling
    for a handler that raises). Everything else, lifespan included, goes to the Starlette app unchanged.
    """

    def __init__(
        self, app: Starlette, model: str, infer: Callable[[Request], Awaitable[Response]], api: object = None
    ) -> None:
        self.app = app
        self.api = api  # the handlers' owner (tests and tools reach the serving layer through it)
        self.model = model
        self.infer = infer
        base = f"/v2/models/{model}"
        self.paths = frozenset({base + "/infer", base + "/versions/1/infer"})
        self.state = app.state  # tests and tools reach app.state through the wrapper

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in self.paths:
            scope["path_params"] = {"name": self.model}
            request = Request(scope, receive)
            try:
                response = await self.infer(request)
            except Exception as exc:  # the same answer the app's exception handler gives
                response = await server_error(request, exc)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def disconnected(receive: Receive) -> None:
    """Return when the client disconnects (the body has been read; the next message is the disconnect)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def answered_or_gone(futures: Sequence[asyncio.Future[Any]], receive: Receive) -> bool:
    """Wait until every future is done (``True``) or the client disconnects first (``False``).

    Only a read of ``receive`` tells a disconnect, so the handler's own task reads it, and the last future to finish
    wakes it by cancelling that read: no watch task to start, schedule and cancel, no future to wake on, per request
    (the task, its future and its cancellation were ~8 µs of the loop's time per request at 32 connections). The
    cancellation is asyncio.timeout's: counted on the task and taken back with ``uncancel``, so a cancellation from
    outside (a shutdown) that comes at the same time still propagates.
    """
    left = sum(not f.done() for f in futures)
    if not left:  # answered already (or nothing to wait for): nothing to read
        return True
    task = asyncio.current_task()
    assert task is not None  # an ASGI handler runs in a task
    waiting = True  # the task sits in receive(): the only place a cancel of ours may land
    woke = False

    def one_done(_: object) -> None:
        nonlocal left, woke
        left -= 1
        if not left and waiting:
            woke = True
            task.cancel()

    for f in futures:
        if not f.done():  # a done one is not in `left`: its callback would count it again
            f.add_done_callback(one_done)
    try:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
    except asyncio.CancelledError:
        waiting = False
        if not woke or task.uncancel() > 0:  # not ours, or another cancellation came with ours
            raise
        return True
    # a cancel of ours that came after receive() had its message but before this task ran on is thrown at that
    # await all the same (the task's pending cancel), and handled above: here none of ours is pending
    waiting = False
    # from the futures, not `left`: the last one may be done with its callback still queued behind this task's turn
    return all(f.done() for f in futures)


def outcome(future: asyncio.Future[Any]) -> Any:
    """A done future's result, or its exception (as ``gather(..., return_exceptions=True)`` gives them)."""
    if future.cancelled():
        return asyncio.CancelledError()
    return future.exception() or future.result()
