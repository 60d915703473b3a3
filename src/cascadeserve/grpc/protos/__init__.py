"""Triton's ``grpc_service.proto`` and ``model_config.proto`` (BSD-3, NVIDIA; see THIRD_PARTY_LICENSES) and the
Python code grpcio-tools generates from them (``scripts/gen_grpc.py``; do not edit the ``*_pb2*`` files)."""

__all__: list[str] = []
