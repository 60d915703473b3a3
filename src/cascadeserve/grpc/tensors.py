"""Triton's gRPC messages to and from numpy: the tensors of a ``ModelInferRequest``, the ``ModelInferResponse``.

An input's data comes either in ``raw_input_contents`` (one entry per input, little-endian bytes; ``BYTES``
elements each behind a 4-byte little-endian length), which is what ``tritonclient.grpc`` sends, or in the typed
``contents`` field of its datatype (``int_contents`` for INT8/16/32, ``uint_contents`` for UINT8/16/32, ...).
FP16 and BF16 have no typed field: they come in raw form only, BF16 as 16-bit bfloat16 patterns that stay
``np.uint16`` (see :mod:`cascadeserve.http.v2`). Both forms go through the HTTP decoder's checks
(:mod:`cascadeserve.http.v2`: datatype, shape against the element count, integer ranges, BOOL as 0/1, UTF-8
text), so a tensor is refused over gRPC exactly when it would be over HTTP, with the same message naming the
input. Outputs go back in ``raw_output_contents``, as Triton sends them; a requested output's ``classification``
parameter asks for Triton's classification of it (:mod:`cascadeserve.http.classification`). A tensor whose
parameters name a shared-memory region is read from it or written into it (:mod:`cascadeserve.http.shared_memory`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from cascadeserve.grpc.protos import grpc_service_pb2 as pb
from cascadeserve.http.infer import Inferred
from cascadeserve.http.v2 import (
    ProtocolError,
    TensorMemory,
    binary_tensor,
    check_requested,
    class_count,
    listed_tensor,
    tensor_bytes,
    tensor_header,
)

__all__ = ["decode_classes", "decode_inputs", "decode_parameters", "decode_shm_outputs", "encode_response"]

# The typed field of InferTensorContents that holds each datatype (FP16 has none: raw_input_contents only)
_CONTENTS: dict[str, str] = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def _shm_params(parameters: Mapping[str, pb.InferParameter]) -> dict[str, Any] | None:
    """A tensor's parameters where they name shared memory (``None`` otherwise)."""
    if "shared_memory_region" in parameters or "shared_memory_byte_size" in parameters:
        return decode_parameters(parameters)
    return None


def decode_inputs(
    request: pb.ModelInferRequest, memory: TensorMemory | None = None
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The request's input tensors by name and the V2 datatype of each (UINT16 and BF16 share ``np.uint16``);
    :class:`ProtocolError` (400) naming the input or field otherwise. An input whose parameters name a
    shared-memory region is read from ``memory`` (and has no entry in ``raw_input_contents``, as with Triton)."""
    raw = request.raw_input_contents
    if not request.inputs:
        raise ProtocolError("inputs: expected a non-empty list of tensors")
    shm = [_shm_params(t.parameters) if memory is not None else None for t in request.inputs]
    plain = sum(p is None for p in shm)
    if raw and len(raw) != plain:
        if plain == len(request.inputs):
            raise ProtocolError(
                f"raw_input_contents: {len(raw)} entries for {len(request.inputs)} inputs (one per input, or none)"
            )
        raise ProtocolError(
            f"raw_input_contents: {len(raw)} entries for {plain} inputs not in shared memory (one per such input, "
            "or none)"
        )
    inputs: dict[str, np.ndarray] = {}
    datatypes: dict[str, str] = {}
    k = 0  # the next raw_input_contents entry: one per input not in shared memory
    for i, t in enumerate(request.inputs):
        if not t.name:
            raise ProtocolError(f"inputs[{i}].name: expected a non-empty string")
        where = f"input {t.name!r}"
        dt, shape, count = tensor_header(where, t.datatype, list(t.shape))
        given = [f.name for f, _ in t.contents.ListFields()]
        params = shm[i]
        if params is not None:
            assert memory is not None
            if given:
                raise ProtocolError(f"{where}: data both in contents.{given[0]} and in shared memory")
            blob = memory.read(f"inputs[{i}].parameters", params)
            assert blob is not None
            arr = binary_tensor(where, blob, dt, shape, count, "shared_memory_byte_size")
        elif raw:
            if given:
                raise ProtocolError(f"{where}: data both in contents.{given[0]} and in raw_input_contents")
            arr = binary_tensor(where, raw[k], dt, shape, count, f"raw_input_contents[{k}] size")
            k += 1
        else:
            arr = listed_tensor(where, _contents(where, t.contents, dt, given), dt, shape, count)
        if t.name in inputs:
            raise ProtocolError(f"{where}: given twice")
        inputs[t.name] = arr
        datatypes[t.name] = dt
    return inputs, datatypes


def _contents(where: str, contents: pb.InferTensorContents, dt: str, given: list[str]) -> Sequence[Any]:
    want = _CONTENTS.get(dt)
    if want is None:
        raise ProtocolError(f"{where}: {dt} data goes in raw_input_contents (contents has no field for it)")
    if given and given != [want]:
        raise ProtocolError(f"{where}: datatype {dt} takes its data in contents.{want}, not {', '.join(given)}")
    values: Sequence[Any] = getattr(contents, want)
    return values


def decode_parameters(parameters: Mapping[str, pb.InferParameter]) -> dict[str, Any]:
    """The request's parameters as plain values (``timeout_ms``, ``context``, ... as the HTTP form gives them)."""
    out: dict[str, Any] = {}
    for key, p in parameters.items():
        kind = p.WhichOneof("parameter_choice")
        out[key] = None if kind is None else getattr(p, kind)
    return out


def decode_classes(request: pb.ModelInferRequest) -> dict[str, int]:
    """The requested outputs asked as Triton's classification (``parameters["classification"]``, an
    ``int64_param`` as tritonclient's ``class_count`` sends it), and how many classes of each; 400 naming the
    parameter otherwise."""
    classes: dict[str, int] = {}
    for j, o in enumerate(request.outputs):
        if "classification" not in o.parameters:
            continue
        where = f"outputs[{j}].parameters.classification"
        p = o.parameters["classification"]
        kind = p.WhichOneof("parameter_choice")
        if kind not in ("int64_param", "uint64_param"):
            raise ProtocolError(f"{where}: expected an int64_param, got {kind or 'no value'}")
        k = class_count(where, getattr(p, kind))
        if k:
            classes[o.name] = k
    return classes


def decode_shm_outputs(
    request: pb.ModelInferRequest, memory: TensorMemory, classes: Mapping[str, int]
) -> dict[str, Any]:
    """The requested outputs to write into shared memory, and where (400 naming the parameter otherwise, or where
    one is also classified: Triton refuses both at once)."""
    targets: dict[str, Any] = {}
    for j, o in enumerate(request.outputs):
        params = _shm_params(o.parameters)
        if params is None:
            continue
        where = f"outputs[{j}].parameters"
        if o.name in classes:
            raise ProtocolError(f"{where}: classification and shared_memory_region cannot go together")
        targets[o.name] = memory.target(where, params)
    return targets


def _parameter(value: Any) -> pb.InferParameter:
    if isinstance(value, bool):  # before int: a bool is an int to Python
        return pb.InferParameter(bool_param=value)
    if isinstance(value, int):
        return pb.InferParameter(int64_param=value)
    if isinstance(value, float):
        return pb.InferParameter(double_param=value)
    return pb.InferParameter(string_param=str(value))


def encode_response(
    model: str, request_id: str, done: Inferred, requested: Sequence[str] = (), in_memory: Collection[str] = ()
) -> pb.ModelInferResponse:
    """The response to an infer call: every output (or the ``requested`` ones) in ``raw_output_contents``; those
    ``in_memory`` (written into shared memory) with an empty entry there, so that each output keeps its index."""
    outputs = done.outputs
    if requested:
        check_requested(outputs, requested)
        outputs = [o for o in outputs if o.name in requested]
    response = pb.ModelInferResponse(model_name=model, model_version="1", id=request_id)
    for key, value in done.parameters.items():
        response.parameters[key].CopyFrom(_parameter(value))
    for o in outputs:
        response.outputs.add(name=o.name, datatype=o.datatype, shape=o.wire_shape)
        response.raw_output_contents.append(b"" if o.name in in_memory else tensor_bytes(o))
    return response
