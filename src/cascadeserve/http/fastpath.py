"""The inference hot path past Starlette's router, and the 500 answer every handler shares.

Split from :mod:`cascadeserve.http.app`: it decides nothing, it only routes one path to one handler.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

__all__ = ["InferFastPath", "disconnected", "server_error"]


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
