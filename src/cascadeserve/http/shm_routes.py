"""The shared-memory API over HTTP (:mod:`cascadeserve.http.shared_memory` has what it does and why)::

    GET  /v2/systemsharedmemory/status                        every region: name, key, offset, byte_size
    GET  /v2/systemsharedmemory/region/{region}/status        one region (400: unknown)
    POST /v2/systemsharedmemory/region/{region}/register      {"key", "offset", "byte_size"} (admin token)
    POST /v2/systemsharedmemory/region/{region}/unregister    (admin token)
    POST /v2/systemsharedmemory/unregister                    every region (admin token)
    POST /v2/cudasharedmemory/region/{region}/register        400: this server has no GPU
    GET  /v2/cudasharedmemory/status, POST .../unregister     no CUDA region (none to list, none to unregister)

Every call needs the inference token where the server has one. Registering and unregistering need the admin token
too, unless the server lets any client do it (``serve --allow-client-shm``, as Triton's ``--allow-client-shm=true``):
403 on a server with neither.
"""

from __future__ import annotations

from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from cascadeserve.http.control import AuthError, check_bearer
from cascadeserve.http.limits import loads
from cascadeserve.http.openapi import describe
from cascadeserve.http.shared import ServerShared
from cascadeserve.http.shared_memory import NO_CUDA
from cascadeserve.http.v2 import ProtocolError

__all__ = ["check_register", "shm_routes"]

_REGISTER: dict[str, Any] = {
    "type": "object",
    "properties": {
        "key": {"type": "string", "minLength": 1},
        "offset": {"type": "integer", "minimum": 0},
        "byte_size": {"type": "integer", "minimum": 1},
    },
    "required": ["key", "byte_size"],
}


class _Options(Protocol):
    @property
    def admin_token(self) -> str | None: ...

    @property
    def allow_client_shm(self) -> bool: ...


class _Api(Protocol):
    """What the routes need of the app's handlers (``http.app``; a Protocol, so no import goes back up there)."""

    @property
    def shared(self) -> ServerShared: ...

    @property
    def opts(self) -> _Options: ...

    def _auth(self, request: Request, *, admin: bool = False) -> Response | None: ...

    async def _body(self, request: Request) -> bytes: ...


def check_register(admin_token: str | None, allow_client_shm: bool, authorization: str | None) -> None:
    """Pass when the caller may register and unregister regions: anyone (``allow_client_shm``; the inference token
    is checked before), or the holder of the admin token; raise :class:`~cascadeserve.http.control.AuthError`
    otherwise. The gRPC front end calls it too."""
    if allow_client_shm:
        return
    if admin_token is None:
        raise AuthError(
            "registering shared memory is off: start the server with --allow-client-shm (any client may), or with "
            "--admin-token (then with that token)",
            403,
        )
    check_bearer(authorization, (admin_token,), what="registering shared memory")


def _error(e: ProtocolError) -> Response:
    return JSONResponse({"error": e.message}, status_code=e.status)


def _refused(api: _Api, request: Request) -> Response | None:
    """``None`` when the request may register or unregister; else its 401/403."""
    if (bad := api._auth(request)) is not None:
        return bad
    try:
        check_register(api.opts.admin_token, api.opts.allow_client_shm, request.headers.get("authorization"))
    except AuthError as e:
        headers = {"WWW-Authenticate": "Bearer"} if e.status == 401 else None
        return JSONResponse({"error": e.message}, status_code=e.status, headers=headers)
    return None


def shm_routes(api: _Api) -> list[BaseRoute]:
    @describe(responses=(400, 401, 403), secured=True)
    async def status(request: Request) -> Response:
        """The system shared-memory regions registered (one, by name: 400 when unknown)."""
        if (bad := api._auth(request)) is not None:
            return bad
        try:
            return JSONResponse(api.shared.shm.status(request.path_params.get("region")))
        except ProtocolError as e:
            return _error(e)

    @describe(body=_REGISTER, responses=(400, 401, 403, 409, 413), admin=True)
    async def register(request: Request) -> Response:
        """Register a region of an existing shared-memory object in /dev/shm (admin token, unless the server allows
        any client): key, offset, byte_size."""
        if (bad := _refused(api, request)) is not None:
            return bad
        try:
            body = loads(await api._body(request))
            if not isinstance(body, dict):
                raise ProtocolError("body: expected a JSON object with key, offset and byte_size")
            if "key" not in body or "byte_size" not in body:
                raise ProtocolError(f"body: {'key' if 'key' not in body else 'byte_size'} is missing")
            api.shared.shm.register(
                request.path_params["region"], body["key"], body.get("offset", 0), body["byte_size"]
            )
        except ProtocolError as e:
            return _error(e)
        return JSONResponse({})

    @describe(responses=(400, 401, 403), admin=True)
    async def unregister(request: Request) -> Response:
        """Unregister a region (admin token, unless the server allows any client); without a region name, every one."""
        if (bad := _refused(api, request)) is not None:
            return bad
        try:
            api.shared.shm.unregister(request.path_params.get("region"))
        except ProtocolError as e:
            return _error(e)
        return JSONResponse({})

    @describe(responses=(400,))
    async def cuda_register(request: Request) -> Response:
        """CUDA shared memory: refused, this server has no GPU (system shared memory is served)."""
        return JSONResponse({"error": NO_CUDA}, status_code=400)

    @describe(responses=(400,))
    async def cuda_status(request: Request) -> Response:
        """The CUDA shared-memory regions: none (no GPU); one by name: 400."""
        region = request.path_params.get("region")
        if region is not None:
            return JSONResponse({"error": f"unknown CUDA shared memory region {region!r}: {NO_CUDA}"}, status_code=400)
        return JSONResponse([])

    async def cuda_unregister(request: Request) -> Response:
        """Unregister CUDA shared memory: there is none to unregister (no GPU), as Triton answers without one."""
        return JSONResponse({})

    base = "/v2/systemsharedmemory"
    return [
        Route(f"{base}/status", status, methods=["GET"]),
        Route(f"{base}/region/{{region}}/status", status, methods=["GET"]),
        Route(f"{base}/region/{{region}}/register", register, methods=["POST"]),
        Route(f"{base}/region/{{region}}/unregister", unregister, methods=["POST"]),
        Route(f"{base}/unregister", unregister, methods=["POST"]),
        Route("/v2/cudasharedmemory/status", cuda_status, methods=["GET"]),
        Route("/v2/cudasharedmemory/region/{region}/status", cuda_status, methods=["GET"]),
        Route("/v2/cudasharedmemory/region/{region}/register", cuda_register, methods=["POST"]),
        Route("/v2/cudasharedmemory/region/{region}/unregister", cuda_unregister, methods=["POST"]),
        Route("/v2/cudasharedmemory/unregister", cuda_unregister, methods=["POST"]),
    ]
