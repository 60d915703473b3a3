"""The logging and trace settings APIs over HTTP (Triton's logging extension and trace settings); the gRPC front end
answers ``LogSettings`` and ``TraceSetting`` from the same objects::

    GET  /v2/logging                          the log settings (:mod:`cascadeserve.http.logsettings`)
    POST /v2/logging                          change some (admin token); answers with every setting
    GET  /v2/trace/setting                    the server's trace settings (:mod:`cascadeserve.http.tracesettings`)
    POST /v2/trace/setting                    change some (admin token)
    GET  /v2/models/{name}/trace/setting      a model's (the server's, with the model's overrides)
    POST /v2/models/{name}/trace/setting      change the model's (admin token)

Reading needs the inference token where the server has one; a change needs the admin token (403 on a server
without one), as the other calls that change the server do. A body that is not a JSON object of settings, or a
setting refused, is a 400 naming it, and changes nothing.
"""

from __future__ import annotations

from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from cascadeserve.http.control import AuthError, check_bearer
from cascadeserve.http.infer import InferCore
from cascadeserve.http.limits import loads
from cascadeserve.http.logsettings import FORMATS, LOG
from cascadeserve.http.openapi import describe
from cascadeserve.http.shared import ServerShared
from cascadeserve.http.v2 import ProtocolError

__all__ = ["check_admin", "settings_body", "settings_routes"]

_LOG_BODY: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "log_file": {"type": "null"},
        "log_info": {"type": ["boolean", "null"]},
        "log_warning": {"type": ["boolean", "null"]},
        "log_error": {"type": ["boolean", "null"]},
        "log_verbose_level": {"type": ["integer", "null"], "minimum": 0, "maximum": 2**32 - 1},
        "log_format": {"enum": [*FORMATS, None]},
    },
}
_NUMBER = {"type": ["string", "integer", "null"], "pattern": "^-?[0-9]{1,10}$"}
_TRACE_BODY: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "trace_level": {
            "type": ["array", "null"],
            "items": {"enum": ["OFF"]},
            "minItems": 1,
            "maxItems": 1,
        },
        "trace_rate": _NUMBER,
        "trace_count": _NUMBER,
        "log_frequency": _NUMBER,
        "trace_file": {"type": "null"},
        "trace_mode": {"type": "null"},
    },
}


class _Api(Protocol):
    """What the routes need of the app's handlers (``http.app``; a Protocol, so no import goes back up there)."""

    core: InferCore

    @property
    def shared(self) -> ServerShared: ...

    def _auth(self, request: Request, *, admin: bool = False) -> Response | None: ...

    async def _body(self, request: Request) -> bytes: ...


def check_admin(admin_token: str | None, authorization: str | None) -> None:
    """Pass when ``authorization`` carries the admin token; raise :class:`~cascadeserve.http.control.AuthError`
    otherwise (403 on a server without one: its settings are read-only). The gRPC front end calls it."""
    if admin_token is None:
        raise AuthError("the control plane is off: start the server with --admin-token to enable it", 403)
    check_bearer(authorization, (admin_token,), what="changing settings")


def settings_body(body: bytes) -> dict[str, Any]:
    """A settings change's body: a JSON object (400 otherwise, an empty body too, as Triton answers it)."""
    obj = loads(body)
    if not isinstance(obj, dict):
        raise ProtocolError("body: expected a JSON object of settings")
    return obj


def _error(e: ProtocolError) -> Response:
    return JSONResponse({"error": e.message}, status_code=e.status)


def settings_routes(api: _Api) -> list[BaseRoute]:
    @describe(responses=(401, 403), secured=True)
    async def get_logging(request: Request) -> Response:
        """The log settings: log_file, log_info, log_warning, log_error, log_verbose_level, log_format."""
        if (bad := api._auth(request)) is not None:
            return bad
        return JSONResponse(LOG.snapshot())

    @describe(body=_LOG_BODY, responses=(400, 401, 403, 413), admin=True)
    async def post_logging(request: Request) -> Response:
        """Change some log settings (admin token); answers with every setting."""
        if (bad := api._auth(request, admin=True)) is not None:
            return bad
        try:
            return JSONResponse(LOG.update(settings_body(await api._body(request))))
        except ProtocolError as e:
            return _error(e)

    def model_of(request: Request) -> str | None:
        name = request.path_params.get("name")
        if name is not None:
            api.core.check_name(name, None)
        return name

    @describe(responses=(401, 403, 404), secured=True)
    async def get_trace(request: Request) -> Response:
        """The trace settings (a model's: the server's, with its overrides). Nothing is traced: trace_level is OFF."""
        if (bad := api._auth(request)) is not None:
            return bad
        try:
            return JSONResponse(api.shared.trace.snapshot(model_of(request)))
        except ProtocolError as e:
            return _error(e)

    @describe(body=_TRACE_BODY, responses=(400, 401, 403, 404, 413), admin=True)
    async def post_trace(request: Request) -> Response:
        """Change some trace settings (admin token); null clears one. trace_level accepts ["OFF"] only."""
        if (bad := api._auth(request, admin=True)) is not None:
            return bad
        try:
            model = model_of(request)
            return JSONResponse(api.shared.trace.update(settings_body(await api._body(request)), model))
        except ProtocolError as e:
            return _error(e)

    return [
        Route("/v2/logging", get_logging, methods=["GET"]),
        Route("/v2/logging", post_logging, methods=["POST"]),
        Route("/v2/trace/setting", get_trace, methods=["GET"]),
        Route("/v2/trace/setting", post_trace, methods=["POST"]),
        Route("/v2/models/{name}/trace/setting", get_trace, methods=["GET"]),
        Route("/v2/models/{name}/trace/setting", post_trace, methods=["POST"]),
    ]
