"""The inference hot path past Starlette's router, and the 500 answer every handler shares.

Split from :mod:`cascadeserve.http.app`: it decides nothing, it only routes one path to one handler.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from cascadeserve.http.v2 import ProtocolError

__all__ = ["InferFastPath", "answered_or_gone", "disconnected", "outcome", "read_body", "server_error"]


async def server_error(request: Request, exc: Exception) -> Response:
    """A handler that raised: 500 naming the exception."""
    return JSONResponse({"error": f"internal error: {type(exc).__name__}: {exc}"}, status_code=500)


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

    What ``asyncio.wait((gather(*futures), disconnected-task), FIRST_COMPLETED)`` did, without the gathering future
    and ``wait``'s own future and callbacks: a count of the futures still pending, one future to wake on. The
    disconnect watch is still a task (only a read of ``receive`` tells a disconnect), cancelled once answered.
    """
    left = sum(not f.done() for f in futures)
    if not left:  # answered already (or nothing to wait for): no disconnect watch to start
        return True
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] = loop.create_future()

    def wake(_: object = None) -> None:
        if not woken.done():
            woken.set_result(None)

    def one_done(_: object) -> None:
        nonlocal left
        left -= 1
        if not left:
            wake()

    for f in futures:
        if not f.done():  # a done one is not in `left`: its callback would count it again
            f.add_done_callback(one_done)
    gone = loop.create_task(disconnected(receive))
    gone.add_done_callback(wake)
    try:
        await woken
    finally:
        gone.remove_done_callback(wake)  # its cancellation has nobody to wake: no callback to schedule for it
        gone.cancel()
    return not left


def outcome(future: asyncio.Future[Any]) -> Any:
    """A done future's result, or its exception (as ``gather(..., return_exceptions=True)`` gives them)."""
    if future.cancelled():
        return asyncio.CancelledError()
    return future.exception() or future.result()


async def read_body(receive: Receive, limit: int) -> bytes:
    """The request body; past ``limit`` bytes a :class:`ProtocolError` (413) naming the limit.

    Starlette's ``Request.stream`` reads the same messages, through an async generator whose set-up and three
    resumptions cost more than the one message a small infer request is; a disconnect raises as it does there.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.request":
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise ProtocolError(f"body: over the limit of {limit} bytes", 413)
            if chunk:
                chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        elif message["type"] == "http.disconnect":
            raise ClientDisconnect()
