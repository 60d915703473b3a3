"""The Open Inference Protocol V2 wire format: decoding infer requests, encoding responses.

Both the JSON form and Triton's *binary tensor extension* are supported, so that ``tritonclient.http`` works
with its defaults. In the binary form the body starts with a JSON header whose length is given by the
``Inference-Header-Content-Length`` header; each input with ``parameters.binary_data_size`` takes that many raw
little-endian bytes, in order, from the rest of the body. Outputs go back in binary when the request sets
``parameters.binary_data_output`` (tritonclient does when it names no outputs) or asks for an output with
``parameters.binary_data``. ``BYTES`` elements are length-prefixed (4-byte little-endian) in binary form.
Two more of Triton's extensions ride on a tensor's parameters: a requested output's ``classification`` (its count,
:func:`class_count`; :mod:`cascadeserve.http.classification` answers it) and a tensor's ``shared_memory_region``,
``_byte_size`` and ``_offset`` (an input read from, an output written into, the server's shared memory: the
``memory`` given to :func:`decode_infer_request`, :mod:`cascadeserve.http.shared_memory`).

Every V2 datatype is accepted: BOOL, INT8/16/32/64, UINT8/16/32/64, FP16/32/64, BF16 and BYTES. In JSON each element
must fit its datatype: an integer datatype takes integers within its range (``1.5``, ``true`` or ``256`` in UINT8
is refused), BOOL takes ``true``/``false`` only, a float datatype takes numbers (not booleans) and BYTES takes
strings. In binary form a BOOL element must be the byte 0 or 1. A float past its datatype's range (``1e39`` in
FP32, ``70000`` in FP16) becomes Inf, which the inference core refuses unless the model accepts non-finite values.

**BF16** has no numpy dtype, so a BF16 tensor is carried as ``np.uint16`` holding the bfloat16 bit patterns (the
upper 16 bits of the float32 of the same value): that is what :func:`binary_tensor` returns for the raw bytes, and
what the model adapter receives (``(x.astype(np.uint32) << 16).view(np.float32)`` or
``x.view(ml_dtypes.bfloat16)`` gives the values). In JSON, a BF16 tensor's data are numbers: each is converted to
float32 (as numpy does: round to nearest, past float32's range to Inf), then to the nearest bfloat16 by rounding
the float32 bits to nearest even on the 16 bits dropped (:func:`bf16_bits`; a NaN stays a quiet NaN of the same
sign). Since UINT16 and BF16 share a numpy dtype, :class:`DecodedRequest` names each input's datatype.

Every decoding problem raises :class:`ProtocolError` with the HTTP status and a message naming the field. The
per-tensor checks (:func:`tensor_header`, :func:`binary_tensor`, :func:`listed_tensor`) and the output encoding
(:func:`tensor_bytes`, :func:`check_requested`) are public: the gRPC front end (:mod:`cascadeserve.grpc`) decodes
its tensors with them, so both protocols refuse the same inputs with the same messages.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from cascadeserve.http.jsonshape import MAX_ELEMENTS, shape_error

__all__ = [
    "DTYPES",
    "HEADER_LENGTH",
    "DecodedRequest",
    "OutputTensor",
    "ProtocolError",
    "TensorMemory",
    "bf16_bits",
    "binary_tensor",
    "check_requested",
    "class_count",
    "decode_infer_request",
    "encode_infer_response",
    "listed_tensor",
    "tensor_bytes",
    "tensor_header",
]

HEADER_LENGTH = "Inference-Header-Content-Length"

DTYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype("<u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BF16": np.dtype("<u2"),  # no numpy bfloat16: the bit patterns (see the module docstring)
    "BYTES": np.dtype(object),  # each element a UTF-8 string (Python str); length-prefixed in binary form
}

# The range of each integer datatype (np.iinfo builds an object per call: ~2 µs on every integer input)
_INT_RANGE: dict[str, tuple[int, int]] = {
    dt: (int(np.iinfo(d).min), int(np.iinfo(d).max)) for dt, d in DTYPES.items() if d.kind in "iu" and dt != "BF16"
}
# json.dumps with separators builds an encoder per call; one, built once, gives the same text. No circular check:
# an answer is dicts and lists built fresh per request, never a cycle, and the check's bookkeeping costs ~1/4 of it
_COMPACT = json.JSONEncoder(separators=(",", ":"), check_circular=False)


class ProtocolError(Exception):
    """A request the server cannot accept; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(frozen=True)
class DecodedRequest:
    id: str | None
    inputs: dict[str, np.ndarray]
    parameters: dict[str, Any]
    outputs: list[tuple[str, bool]] | None  # requested outputs and whether each goes binary; None = all
    binary_output: bool
    # each input's V2 datatype: the dtype alone does not tell UINT16 from BF16 (both np.uint16)
    datatypes: dict[str, str] = field(default_factory=dict)
    # the outputs asked as Triton's classification, and how many classes of each (http/classification.py)
    classes: dict[str, int] = field(default_factory=dict)
    # the outputs to write into shared memory, and where (http/shared_memory.py): answered without their data
    shm_outputs: dict[str, Any] = field(default_factory=dict)


class TensorMemory(Protocol):
    """Where tensors may live besides the request (the server's shared-memory regions, http/shared_memory.py)."""

    def read(self, where: str, params: Mapping[str, Any]) -> bytes | None:
        """An input's bytes from the region its ``params`` name; ``None`` when they name none."""
        ...

    def target(self, where: str, params: Mapping[str, Any]) -> Any:
        """Where an output goes, as its ``params`` name it; ``None`` when they name no region."""
        ...


_SHM_KEYS = ("shared_memory_region", "shared_memory_byte_size")


def _in_memory(params: Any) -> bool:
    """Whether a tensor's parameters name shared memory."""
    return isinstance(params, dict) and any(k in params for k in _SHM_KEYS)


@dataclass(frozen=True)
class OutputTensor:
    """One output: ``data`` flat, one element per row; ``shape`` the one to send (``None``: ``[len(data)]``)."""

    name: str
    datatype: str
    data: np.ndarray | Sequence[str]
    parameters: dict[str, Any] = field(default_factory=dict)
    shape: tuple[int, ...] | None = None

    @property
    def wire_shape(self) -> list[int]:
        """The shape the response gives: ``shape``, or ``[len(data)]``."""
        return [len(self.data)] if self.shape is None else list(self.shape)


def _json_header(body: bytes, header_length: str | None) -> tuple[dict[str, Any], bytes]:
    if header_length is not None:
        try:
            n = int(header_length)
        except ValueError:
            raise ProtocolError(f"header {HEADER_LENGTH}: {header_length!r} is not an integer") from None
        if n < 0 or n > len(body):
            raise ProtocolError(f"header {HEADER_LENGTH}: {n} is outside the body of {len(body)} bytes")
        head, rest = body[:n], body[n:]
    else:
        head, rest = body, b""
    problem = shape_error(head, max_depth=None)  # the elements only: the depth is the RecursionError's, below
    if problem is not None:
        raise ProtocolError(f"body: {problem}")
    try:
        # a body that opens with '{' and no NUL byte is UTF-8 to json.loads(bytes) too (its detect_encoding): decoded
        # here as it decodes it, without the detection per request
        obj = json.loads(head.decode("utf-8", "surrogatepass") if head[:1] == b"{" and head[1:2] != b"\0" else head)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        msg = e.msg if isinstance(e, json.JSONDecodeError) else "not UTF-8"
        raise ProtocolError(f"body: malformed JSON ({msg})") from None
    except RecursionError:  # a body of 100k nested '[': the decoder runs out of stack, which is the client's fault
        raise ProtocolError("body: JSON nested too deeply") from None
    except ValueError as e:  # an integer of more than 4300 digits: Python refuses to parse it
        raise ProtocolError(f"body: malformed JSON ({e})") from None
    if not isinstance(obj, dict):
        raise ProtocolError("body: expected a JSON object with an 'inputs' list")
    return obj, rest


def decode_infer_request(
    body: bytes, header_length: str | None = None, memory: TensorMemory | None = None
) -> DecodedRequest:
    """Parse an infer request body (JSON or binary extension) into numpy inputs; ``memory``: the server's shared
    memory, where tensors whose parameters name a region are read from (inputs) or go (outputs)."""
    obj, rest = _json_header(body, header_length)
    params = obj.get("parameters") or {}
    if not isinstance(params, dict):
        raise ProtocolError("parameters: expected an object")
    raw_inputs = obj.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise ProtocolError("inputs: expected a non-empty list of tensors")
    inputs: dict[str, np.ndarray] = {}
    datatypes: dict[str, str] = {}
    offset = 0
    for i, t in enumerate(raw_inputs):
        where = f"inputs[{i}]"
        if not isinstance(t, dict):
            raise ProtocolError(f"{where}: expected an object with name, shape, datatype")
        name = t.get("name")
        if not isinstance(name, str) or not name:
            raise ProtocolError(f"{where}.name: expected a non-empty string")
        where = f"input {name!r}"
        dt, shape, count = tensor_header(where, t.get("datatype"), t.get("shape"))
        tparams = t.get("parameters") or {}
        size = tparams.get("binary_data_size") if isinstance(tparams, dict) else None
        if memory is not None and _in_memory(tparams):
            if size is not None:
                raise ProtocolError(f"{where}: binary_data_size and shared_memory_region cannot go together")
            blob = memory.read(f"inputs[{i}].parameters", tparams)
            assert blob is not None
            arr = binary_tensor(where, blob, dt, shape, count, "shared_memory_byte_size")
        elif size is not None:
            if type(size) is not int or size < 0 or offset + size > len(rest):
                raise ProtocolError(f"{where}: binary_data_size {size!r} runs past the end of the body")
            arr = binary_tensor(where, rest[offset : offset + size], dt, shape, count)
            offset += size
        else:
            if "data" not in t:
                raise ProtocolError(f"{where}: no 'data' and no binary_data_size")
            arr = listed_tensor(where, _flatten(t["data"]), dt, shape, count)
        if name in inputs:
            raise ProtocolError(f"{where}: given twice")
        inputs[name] = arr
        datatypes[name] = dt
    if offset != len(rest):
        raise ProtocolError(
            f"body: {len(rest) - offset} bytes after the last binary tensor (the binary_data_size values add up "
            f"to {offset})"
        )
    outputs: list[tuple[str, bool]] | None = None
    classes: dict[str, int] = {}
    shm_outputs: dict[str, Any] = {}
    binary_all = bool(params.get("binary_data_output", False))
    raw_outputs = obj.get("outputs")
    if raw_outputs is not None:
        if not isinstance(raw_outputs, list):
            raise ProtocolError("outputs: expected a list")
        outputs = []
        for j, o in enumerate(raw_outputs):
            if not isinstance(o, dict) or not isinstance(o.get("name"), str):
                raise ProtocolError(f"outputs[{j}]: expected an object with a name")
            op = o.get("parameters") or {}
            outputs.append((o["name"], bool(op.get("binary_data", binary_all)) if isinstance(op, dict) else False))
            if isinstance(op, dict) and "classification" in op:
                k = class_count(f"outputs[{j}].parameters.classification", op["classification"])
                if k:
                    classes[o["name"]] = k
            if memory is not None and _in_memory(op):
                shm_outputs[o["name"]] = _output_target(memory, f"outputs[{j}].parameters", op, o["name"] in classes)
    rid = obj.get("id")
    return DecodedRequest(
        str(rid) if rid is not None else None, inputs, params, outputs, binary_all, datatypes, classes, shm_outputs
    )


def _output_target(memory: TensorMemory, where: str, params: Mapping[str, Any], classified: bool) -> Any:
    """Where an output requested into shared memory goes; 400 where it also asks for binary data or
    classification (Triton refuses both)."""
    if params.get("binary_data") is True:
        raise ProtocolError(f"{where}: binary_data and shared_memory_region cannot go together")
    if classified:
        raise ProtocolError(f"{where}: classification and shared_memory_region cannot go together")
    return memory.target(where, params)


def class_count(where: str, value: Any) -> int:
    """A requested output's ``classification`` parameter (Triton's classification extension): a non-negative
    integer, 0 asking for the plain output; else 400 naming ``where``."""
    if type(value) is not int or value < 0:
        raise ProtocolError(f"{where}: expected a non-negative integer (how many classes to return), got {value!r}")
    return value


def tensor_header(where: str, datatype: Any, shape: Any) -> tuple[str, list[int], int]:
    """A tensor's datatype and shape, checked (a known datatype; non-negative integer dims), and its element count."""
    if datatype not in DTYPES:
        raise ProtocolError(f"{where}: datatype {datatype!r} is not one of {', '.join(DTYPES)}")
    if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
        raise ProtocolError(f"{where}: shape must be a list of non-negative integers")
    count = math.prod(shape)
    if datatype == "BYTES" and count > MAX_ELEMENTS:  # each one a Python string: bounded as JSON's elements are
        raise ProtocolError(f"{where}: {count} BYTES elements, over this server's limit of {MAX_ELEMENTS}")
    return datatype, shape, count


def binary_tensor(
    where: str, blob: bytes, dt: str, shape: list[int], count: int, size_of: str = "binary_data_size"
) -> np.ndarray:
    """One input's raw bytes: little-endian elements, or for BYTES a 4-byte little-endian length before each
    (``size_of``: what the messages call the blob's size, the parameter over HTTP or the field over gRPC)."""
    if dt == "BYTES":
        values: list[str] = []
        pos = 0
        while pos < len(blob):
            if len(values) == count or pos + 4 > len(blob):
                raise ProtocolError(f"{where}: the BYTES data holds more than the {count} elements of shape {shape}")
            (n,) = struct.unpack_from("<I", blob, pos)
            pos += 4
            if pos + n > len(blob):
                raise ProtocolError(f"{where}: BYTES element {len(values)} runs past {size_of}")
            values.append(_utf8(where, blob[pos : pos + n], len(values)))
            pos += n
        if len(values) != count:
            raise ProtocolError(f"{where}: the BYTES data holds {len(values)} elements but shape {shape} needs {count}")
        return _object_array(values, shape)
    dtype = DTYPES[dt]
    if len(blob) != count * dtype.itemsize:
        raise ProtocolError(
            f"{where}: {size_of} {len(blob)} does not match shape {shape} of {dt} ({count * dtype.itemsize} bytes)"
        )
    if dt == "BOOL" and blob and max(blob) > 1:  # numpy would take any byte as a bool that is neither True nor False
        raise ProtocolError(f"{where}: data does not fit datatype BOOL (a byte other than 0 or 1)")
    return np.frombuffer(blob, dtype=dtype).reshape(shape)


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """The nearest bfloat16 of each value, as ``np.uint16`` bit patterns: the value as float32, then its 32 bits
    rounded to nearest even on the lower 16 (float32 past bfloat16's largest finite value rounds to Inf); a NaN stays
    a quiet NaN with its sign (rounding its bits could carry it into Inf)."""
    with np.errstate(over="ignore"):  # past float32's range is Inf, as for FP32
        f32 = np.ascontiguousarray(values, dtype=np.float32)
    bits = f32.view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    quiet_nan = (bits >> np.uint32(16)).astype(np.uint16) | np.uint16(0x0040)
    out: np.ndarray = np.where(np.isnan(f32), quiet_nan, rounded)
    return out


def _utf8(where: str, b: bytes, i: int) -> str:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(f"{where}: BYTES element {i} is not UTF-8 text") from None


def _object_array(values: list[str], shape: list[int]) -> np.ndarray:
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr.reshape(shape)


def _flatten(data: Any) -> list[Any]:
    """Row-major elements of a (possibly nested) JSON list; V2 allows both flat and nested data."""
    if not isinstance(data, list):
        return [data]
    out: list[Any] = []
    stack = [iter(data)]
    while stack:  # iterative: a deeply nested list must not exhaust the stack
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            out.append(item)
        else:
            stack.pop()
    return out


def listed_tensor(where: str, flat: Sequence[Any], dt: str, shape: list[int], count: int) -> np.ndarray:
    """One input's elements (row-major) as Python values, checked element by element against the datatype: a float
    in an integer input, a bool in a number input, a number out of the type's range or a non-string in BYTES is
    refused, not cast (``bytes`` in BYTES must be UTF-8 text). BF16 numbers become their nearest bfloat16's bit
    patterns (:func:`bf16_bits`)."""
    if len(flat) != count:
        raise ProtocolError(f"{where}: data has {len(flat)} elements but shape {shape} needs {count}")
    if dt == "BYTES":
        values = list(flat)
        for i, v in enumerate(values):
            if isinstance(v, str):
                continue
            if not isinstance(v, bytes):
                raise ProtocolError(f"{where}: BYTES element {i} is {type(v).__name__}, expected a string")
            values[i] = _utf8(where, v, i)  # gRPC's bytes_contents: UTF-8 text, as in the binary form
        return _object_array(values, shape)
    dtype = DTYPES[dt]
    if dt == "BOOL":
        if not all(type(v) is bool for v in flat):
            raise ProtocolError(f"{where}: data does not fit datatype BOOL (expected true/false)")
        return np.asarray(flat, dtype=dtype).reshape(shape)
    if any(type(v) is not int and type(v) is not float for v in flat):
        raise ProtocolError(f"{where}: data does not fit datatype {dt} (expected numbers)")
    if dt in _INT_RANGE:  # not dtype.kind: BF16 is np.uint16 too, and takes numbers
        if any(type(v) is not int for v in flat):
            raise ProtocolError(f"{where}: data does not fit datatype {dt} (expected integers)")
        lo, hi = _INT_RANGE[dt]
        if flat and (min(flat) < lo or max(flat) > hi):
            raise ProtocolError(f"{where}: data does not fit datatype {dt} (outside {lo}..{hi})")
        return np.asarray(flat, dtype=dtype).reshape(shape)
    try:
        wide = np.asarray(flat, dtype=np.float64)
    except OverflowError:  # an integer of 400 digits: past float64, so past every float datatype
        raise ProtocolError(f"{where}: data does not fit datatype {dt} (an integer past the float range)") from None
    if dt == "BF16":
        return bf16_bits(wide).reshape(shape)
    with np.errstate(over="ignore"):  # 1e39 in FP32 is Inf: the caller decides whether the model accepts it
        return wide.astype(dtype).reshape(shape)


def _bytes_tensor(values: Sequence[str]) -> bytes:
    parts = []
    for v in values:
        b = v.encode()
        parts.append(struct.pack("<I", len(b)))
        parts.append(b)
    return b"".join(parts)


def tensor_bytes(output: OutputTensor) -> bytes:
    """An output's raw little-endian bytes (BYTES: each element length-prefixed, 4-byte little-endian)."""
    if output.datatype == "BYTES":
        return _bytes_tensor([str(x) for x in output.data])
    return np.ascontiguousarray(np.asarray(output.data, dtype=DTYPES[output.datatype])).tobytes()


def check_requested(outputs: Sequence[OutputTensor], requested: Sequence[str]) -> None:
    """Refuse a request for an output the model does not have (naming it and the outputs there are)."""
    known = {o.name for o in outputs}
    for name in requested:
        if name not in known:
            raise ProtocolError(f"outputs: unknown output {name!r}; this model has {', '.join(sorted(known))}")


def encode_infer_response(
    model_name: str,
    request: DecodedRequest,
    outputs: Sequence[OutputTensor],
    parameters: Mapping[str, Any],
) -> tuple[bytes, dict[str, str]]:
    """Body and headers of an infer response, binary where the request asked for it."""
    wanted: dict[str, bool]
    if request.outputs is None:
        wanted = {o.name: request.binary_output for o in outputs}
    else:
        check_requested(outputs, [name for name, _ in request.outputs])
        wanted = dict(request.outputs)
    head: dict[str, Any] = {"model_name": model_name, "model_version": "1"}
    if request.id is not None:
        head["id"] = request.id
    head["parameters"] = dict(parameters)
    tensors = []
    blobs: list[bytes] = []
    for o in outputs:
        binary = wanted.get(o.name)
        if binary is None:
            continue
        data = o.data
        entry: dict[str, Any] = {"name": o.name, "datatype": o.datatype, "shape": o.wire_shape}
        if o.parameters:
            entry["parameters"] = dict(o.parameters)
        if request.shm_outputs and o.name in request.shm_outputs:
            pass  # written into shared memory already: listed without its data, as Triton answers it
        elif binary:
            blob = tensor_bytes(o)
            entry.setdefault("parameters", {})["binary_data_size"] = len(blob)
            blobs.append(blob)
        elif o.datatype == "BYTES":
            entry["data"] = [str(x) for x in data]
        else:
            entry["data"] = data.tolist() if isinstance(data, np.ndarray) else np.asarray(data).tolist()
        tensors.append(entry)
    head["outputs"] = tensors
    js = _COMPACT.encode(head).encode()
    if not blobs:
        return js, {"content-type": "application/json"}
    return js + b"".join(blobs), {"content-type": "application/octet-stream", HEADER_LENGTH: str(len(js))}
