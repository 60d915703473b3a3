"""The gRPC front end: Triton's ``GRPCInferenceService`` (the Open Inference Protocol V2 over gRPC) beside the HTTP
one, on the same event loop and runtime, so that ``tritonclient.grpc`` works unchanged (``serve --grpc-port``)."""

from __future__ import annotations

from cascadeserve.grpc.service import GrpcFrontEnd

__all__ = ["GrpcFrontEnd"]
