"""``GET /``: what this server is and where its endpoints are, for someone who knows only its address.

The answer is a small JSON document: the server's name and version (as ``GET /v2`` gives them), each cascade it
serves with the paths of its metadata, readiness and infer endpoints, and the paths of the server-wide endpoints::

    {"name": "cascadeserve", "version": "0.1.0",
     "cascades": [{"name": "toy", "metadata": "/v2/models/toy", "ready": "/v2/models/toy/ready",
                   "infer": "/v2/models/toy/infer"}],
     "links": {"live": "/v2/health/live", "ready": "/v2/health/ready", "server_metadata": "/v2",
               "metrics": "/metrics", "openapi": "/openapi.json", "openai_models": "/v1/models"}}

A link is there only when the app registered its route (an app built with fewer routers lists fewer), so every
link the document gives answers. Behind a :class:`~cascadeserve.http.repository.Repository` the cascades are every
one it serves: the repository names them in the request's scope (:data:`CASCADES`) and sends ``/`` on to the first
cascade's app, which answers as for itself. The route is secured like ``GET /v2``: it names the cascades served.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from cascadeserve.http.openapi import describe
from cascadeserve.version import __version__

if TYPE_CHECKING:
    from cascadeserve.http.infer import ServedModel

__all__ = ["CASCADES", "root_document", "root_routes"]

CASCADES = "cascadeserve.cascades"
"""The scope key under which a repository names every cascade it serves (absent: the app's own cascade alone)."""

# (key, path): the server-wide endpoints the document links to, where the app has them
_LINKS = (
    ("live", "/v2/health/live"),
    ("ready", "/v2/health/ready"),
    ("server_metadata", "/v2"),
    ("metrics", "/metrics"),
    ("openapi", "/openapi.json"),
    ("openai_models", "/v1/models"),
)
# (key, path template): each cascade's endpoints
_PER_CASCADE = (
    ("metadata", "/v2/models/{name}"),
    ("ready", "/v2/models/{name}/ready"),
    ("infer", "/v2/models/{name}/infer"),
)


class _Api(Protocol):
    """What the route needs of the app's handlers (``http.app``; a Protocol, so no import goes back up there)."""

    model: ServedModel

    def _auth(self, request: Request, *, admin: bool = False) -> Response | None: ...


def _paths(routes: Sequence[BaseRoute], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for r in routes:
        if isinstance(r, Route):
            out.add(prefix + r.path)
        elif isinstance(r, Mount):
            out |= _paths(r.routes, prefix + r.path)
    return out


def root_document(routes: Sequence[BaseRoute], cascades: Sequence[str]) -> dict[str, Any]:
    """The root document of an app with ``routes`` serving ``cascades`` (module docstring)."""
    paths = _paths(routes)
    served = []
    for name in cascades:
        # a name is one path segment: quoted, so that a name with a space or a '?' still makes a working link
        entry = {"name": name}
        entry.update({k: p.format(name=quote(name, safe="")) for k, p in _PER_CASCADE if p in paths})
        served.append(entry)
    return {
        "name": "cascadeserve",
        "version": __version__,
        "cascades": served,
        "links": {k: p for k, p in _LINKS if p in paths},
    }


def root_routes(api: _Api) -> list[BaseRoute]:
    @describe(responses=(401, 403), secured=True)
    async def root(request: Request) -> Response:
        """This server: its name and version, the cascades it serves, and links to its endpoints."""
        if (bad := api._auth(request)) is not None:
            return bad
        cascades = request.scope.get(CASCADES) or [api.model.name]
        return JSONResponse(root_document(request.app.routes, cascades))

    return [Route("/", root, methods=["GET"])]
