"""The HTTP front end: Open Inference Protocol V2 (with Triton's binary tensor extension), Prometheus metrics
and plan hot-swap, as a Starlette app served by uvicorn."""

from __future__ import annotations

from cascadeserve.http.app import ServedModel, ServerOptions, create_app
from cascadeserve.http.metrics import PrometheusObserver
from cascadeserve.http.server import App, Server, build_app
from cascadeserve.http.v2 import ProtocolError, decode_infer_request, encode_infer_response

__all__ = [
    "App",
    "PrometheusObserver",
    "ProtocolError",
    "ServedModel",
    "Server",
    "ServerOptions",
    "build_app",
    "create_app",
    "decode_infer_request",
    "encode_infer_response",
]
