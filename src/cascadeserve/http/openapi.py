"""The OpenAPI document, generated from the app's routes: every route is in it, whoever registered it.

:func:`openapi_document` walks the Starlette routes (``Route`` and ``Mount``ed ones) and writes one operation per
path and method: the summary and description from the endpoint's docstring, a string parameter per ``{name}`` in
the path, and the request body and responses that :func:`describe` attached to the endpoint, where it did. A
route registered later (another module's router) is covered without touching this file; :func:`describe` only
makes its entry richer. The request-body schemas of the V2 protocol are pydantic models (:class:`InferRequest`),
so the document, the fuzzers that read it (schemathesis in the tests) and the decoder agree on the shape of a
request; the decoder stays the authority on what is accepted (it names the field of any problem).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from cascadeserve.version import __version__

__all__ = ["InferRequest", "InferTensor", "RequestedOutput", "describe", "openapi_document"]

_F = TypeVar("_F", bound=Callable[..., Any])
_PARAM = re.compile(r"{([^}:]+)(?::[^}]*)?}")

Datatype = Literal[
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64", "BF16",
    "BYTES",
]


class InferTensor(BaseModel):
    """One input tensor of a V2 infer request (``data`` flat or nested, row-major)."""

    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1)
    shape: list[int] = Field(min_length=1)
    datatype: Datatype
    data: list[Any] | None = None
    parameters: dict[str, Any] | None = None


class RequestedOutput(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    parameters: dict[str, Any] | None = None


class InferRequest(BaseModel):
    """A V2 infer request (JSON form; the binary extension puts this header before raw tensor bytes)."""

    model_config = ConfigDict(extra="allow")
    id: str | None = None
    parameters: dict[str, Any] | None = None
    inputs: list[InferTensor] = Field(min_length=1)
    outputs: list[RequestedOutput] | None = None


_ERROR: dict[str, Any] = {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}
"""Every error answer of the V2, plan and Clipper endpoints (and any handler that raised: 500): ``{"error": ...}``."""
_BINARY = "application/octet-stream"
_STATUS_TEXT = {
    200: "OK",
    400: "Bad request: the message names the field",
    401: "No bearer token",
    403: "Wrong token, or the endpoint is off",
    404: "Unknown model, version, application or id",
    413: "Too large: the body, or a call larger than admission can ever hold",
    422: "Invalid plan: the message names the field",
    499: "The client went away",
    500: "A model failed: the message names it",
    503: "Overloaded (Retry-After) or stopping",
    504: "Deadline passed before any stage ran",
}


def describe(
    *,
    body: type[BaseModel] | Mapping[str, Any] | None = None,
    responses: Sequence[int] = (),
    content_type: str = "application/json",
    binary: bool = False,
    secured: bool = False,
    admin: bool = False,
    answers: Sequence[str] = ("application/json",),
    error: Mapping[str, Any] = _ERROR,
) -> Callable[[_F], _F]:
    """Attach what the OpenAPI document should say about an endpoint beyond its path and docstring.

    ``body``: the request body (required), of media type ``content_type``; ``binary``: the body may also be
    Triton's binary tensor extension (``application/octet-stream``, a JSON header of the length the
    ``Inference-Header-Content-Length`` header gives, then raw tensor bytes). ``responses``: every status the
    handler answers besides 200, each with the ``error`` schema. ``secured``: the inference token guards it (when
    the server has one); ``admin``: the admin token does. ``answers``: the media types of its 200 answers.
    """

    def mark(fn: _F) -> _F:
        fn.__openapi__ = {  # type: ignore[attr-defined]
            "body": body,
            "responses": tuple(responses),
            "content_type": content_type,
            "binary": binary,
            "secured": secured,
            "admin": admin,
            "answers": tuple(answers),
            "error": error,
        }
        return fn

    return mark


def _walk(routes: Sequence[BaseRoute], prefix: str = "") -> list[tuple[str, Route]]:
    out: list[tuple[str, Route]] = []
    for r in routes:
        if isinstance(r, Route):
            out.append((prefix + r.path, r))
        elif isinstance(r, Mount):
            out.extend(_walk(r.routes, prefix + r.path))
    return out


def _schema(body: type[BaseModel] | Mapping[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if isinstance(body, Mapping):
        return dict(body)
    schema = body.model_json_schema(ref_template="#/components/schemas/{model}")
    defs.update(schema.pop("$defs", {}))
    defs[body.__name__] = schema
    return {"$ref": f"#/components/schemas/{body.__name__}"}


def _operation(
    path: str,
    method: str,
    route: Route,
    defs: dict[str, Any],
    auth: bool,
    admin: bool,
    enums: Mapping[str, Sequence[str]],
) -> dict[str, Any]:
    endpoint = route.endpoint
    doc = inspect.getdoc(endpoint) or route.name or path
    summary, _, rest = doc.partition("\n")
    meta: dict[str, Any] = getattr(endpoint, "__openapi__", {})
    op: dict[str, Any] = {
        "operationId": f"{method}_{re.sub(r'[^A-Za-z0-9]+', '_', path).strip('_') or 'root'}",
        "summary": summary.strip(),
    }
    if rest.strip():
        op["description"] = rest.strip()
    params = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": {"type": "string", **({"enum": list(enums[name])} if name in enums else {})},
        }
        for name in _PARAM.findall(path)
    ]
    body = meta.get("body")
    if body is not None:
        content = {meta.get("content_type", "application/json"): {"schema": _schema(body, defs)}}
        if meta.get("binary"):
            content[_BINARY] = {"schema": {"type": "string", "format": "binary"}}
            params.append(
                {
                    "name": "Inference-Header-Content-Length",
                    "in": "header",
                    "required": False,
                    "description": "Binary tensor extension: the length of the JSON header that starts the body",
                    "schema": {"type": "integer", "minimum": 0},
                }
            )
        op["requestBody"] = {"required": True, "content": content}
    if params:
        op["parameters"] = params
    error = meta.get("error", _ERROR)
    # 500 is also the shared exception handler's answer (fastpath.server_error), which has the V2 shape
    fault = error if error == _ERROR else {"anyOf": [error, _ERROR]}
    codes = sorted({200, *meta.get("responses", ())})
    op["responses"] = {
        str(c): {
            "description": _STATUS_TEXT.get(c, "Response"),
            "content": (
                {t: {} for t in meta.get("answers", ("application/json",))}
                if c == 200
                else {"application/json": {"schema": fault if c == 500 else error}}
            ),
        }
        for c in codes
    }
    if (auth and meta.get("secured")) or (admin and meta.get("admin")):
        op["security"] = [{"bearer": []}]
    return op


def openapi_document(
    routes: Sequence[BaseRoute],
    *,
    title: str = "cascadeserve",
    auth: bool = False,
    admin: bool = False,
    path_enums: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """OpenAPI 3.1 for every route in ``routes`` (``auth``: the server has an inference token, so the secured
    operations need a bearer token; ``admin``: it has an admin token, so the admin operations need one;
    ``path_enums``: the values a path parameter takes here, such as the served model's name)."""
    paths: dict[str, dict[str, Any]] = {}
    defs: dict[str, Any] = {}
    for path, route in _walk(routes):
        for method in sorted(route.methods or ()):
            if method == "HEAD":
                continue
            paths.setdefault(_PARAM.sub(r"{\1}", path), {})[method.lower()] = _operation(
                path, method.lower(), route, defs, auth, admin, path_enums or {}
            )
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": title, "version": __version__},
        "paths": paths,
        "components": {"schemas": defs},
    }
    if auth or admin:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return doc


def openapi_routes(routes: list[BaseRoute], auth: bool, admin: bool, model: str) -> list[BaseRoute]:
    """``/openapi.json`` and ``/v2/openapi.json``, over every route (themselves included)."""
    doc: dict[str, Any] = {}

    async def openapi(request: Request) -> Response:
        """The OpenAPI document of this server."""
        if not doc:
            enums = {"name": [model], "version": ["1"], "app": [model]}
            doc.update(openapi_document(all_routes, auth=auth, admin=admin, path_enums=enums))
        return JSONResponse(doc)

    own: list[BaseRoute] = [
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/v2/openapi.json", openapi, methods=["GET"]),
    ]
    all_routes = [*routes, *own]
    return own
