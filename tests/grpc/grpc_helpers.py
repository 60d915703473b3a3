"""Helpers for gRPC tests: an emulated server on 127.0.0.1 serving HTTP and gRPC (both on ephemeral ports), and
the wait for a condition that replaces fixed sleeps."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import tritonclient.grpc as tg
from tests.http.http_helpers import serving
from tritonclient.grpc import service_pb2_grpc

from cascadeserve.grpc import GrpcFrontEnd
from cascadeserve.http import Server
from cascadeserve.profile import Profile


@contextmanager
def grpc_serving(profile: Profile, plan: Any = None, **kwargs: Any) -> Iterator[Server]:
    """``tests.http.http_helpers.serving`` with the gRPC front end beside HTTP; ``server.grpc_port`` is bound."""
    with serving(profile, plan, front_ends=[GrpcFrontEnd("127.0.0.1", 0)], **kwargs) as server:
        assert server.grpc_port
        yield server


def client(server: Server) -> tg.InferenceServerClient:
    return tg.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")


@contextmanager
def stub(server: Server) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    """tritonclient's own generated stub, for messages tritonclient would refuse to build (and trailing metadata)."""
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    t0 = time.monotonic()
    while not condition():
        assert time.monotonic() - t0 < timeout_s, "condition not met in time"
        time.sleep(0.005)
