"""The inference core both front ends share: HTTP's ``POST .../infer`` and gRPC's ``ModelInfer`` call it.

A front end decodes its wire format into ``dict[str, np.ndarray]`` and parameters, and encodes what comes back;
everything between is here, once: the model name and version, the input against the model's
:class:`~cascadeserve.runtime.InputSpec` (datatype, shape, rows, finite values), ``parameters.timeout_ms``, the
early shed check, admission through the serving layer (Clipper's selection, the cache), waiting for the answers
(cancelling the rows not started when the client goes away), the worst error of the rows, the feedback log, and
the output tensors with the response parameters (``server_ms``, ``gear``, ``fallback``, timings, ``emulated``...).

Every refusal raises :class:`~cascadeserve.http.v2.ProtocolError` with the HTTP status and a message naming the
field or the model; a shed call raises its subclass :class:`InferError` with the retry hint. The gRPC front end
maps the same statuses to its codes (:mod:`cascadeserve.grpc.service`).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cascadeserve.http.classification import check_classes, classified
from cascadeserve.http.clipper import ClipperLayer
from cascadeserve.http.failures import public_error
from cascadeserve.http.fastpath import outcome
from cascadeserve.http.limits import check_text_rows
from cascadeserve.http.triton_metrics import RequestCounts
from cascadeserve.http.v2 import DTYPES, OutputTensor, ProtocolError
from cascadeserve.plan import GearPlan
from cascadeserve.runtime import Answer, InputSpec, Overloaded, Runtime, ServingError

__all__ = [
    "OUTPUTS",
    "OUTPUT_SHAPE",
    "InferCore",
    "InferError",
    "Inferred",
    "ServedModel",
    "metadata_shape",
    "model_config",
]

# The outputs every served cascade has, in order (name, datatype): the metadata of both front ends lists them
OUTPUTS: tuple[tuple[str, str], ...] = (("label", "INT64"), ("certainty", "FP32"), ("model", "BYTES"))
# Every output holds one element per row: Triton's config dims [1], so its metadata shape is [-1, 1]
OUTPUT_SHAPE: tuple[int, ...] = (-1, 1)
CLASS_NAME = ("class_name", "BYTES")  # and, where the models config names the classes, each label's name

Watch = Callable[[Sequence["asyncio.Future[Any]"]], Awaitable[bool]]
"""Waits for the row futures: ``True`` once all are done, ``False`` if the client went away first."""


@dataclass(frozen=True)
class ServedModel:
    """What the V2 front end exposes: the model name, its inputs, and how rows become payloads."""

    name: str
    input: InputSpec = field(default_factory=InputSpec)
    emulated: bool = False
    sample_index: Mapping[int, int] | None = None  # emulated: validation sample id -> profile row
    check_plan: Callable[[GearPlan], None] | None = None  # extra validation of a PUT plan (e.g. the profile)
    more_inputs: tuple[InputSpec, ...] = ()  # the second and later input tensors (a row is then a mapping)
    labels: Mapping[int, str] | None = None  # each integer label's class name (the models config's ``labels:``)

    @property
    def inputs(self) -> tuple[InputSpec, ...]:
        """Every input tensor clients send, in order."""
        return (self.input, *self.more_inputs)

    @property
    def outputs(self) -> tuple[tuple[str, str], ...]:
        """Every output tensor of its answers (name, datatype), in order: :data:`OUTPUTS`, then ``class_name`` where
        the model has class names (a generative cascade's ``text`` is not listed: it depends on the plan)."""
        return OUTPUTS if self.labels is None else (*OUTPUTS, CLASS_NAME)


def metadata_shape(shape: Sequence[int]) -> list[int]:
    """A tensor's shape as the model metadata gives it: Triton's ``[-1] + dims`` of its model config (where
    ``max_batch_size > 0`` leaves the batch dimension out of ``dims``). A per-row scalar, ``(-1,)`` in an
    :class:`~cascadeserve.runtime.InputSpec` (a sample id, a text, an LLM item), is dims ``[1]``: ``[-1, 1]``."""
    return [*shape, 1] if len(shape) == 1 else list(shape)


def _tensor(name: str, datatype: str, shape: Sequence[int]) -> dict[str, Any]:
    """One tensor in Triton's model config: dims without the batch dimension; a per-row scalar ``(-1,)`` is dims
    ``[1]`` reshaped to ``[]`` (Triton's batching convention: clients send ``[N, 1]``, the model sees ``[N]``)."""
    out: dict[str, Any] = {"name": name, "data_type": "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"}
    if len(shape) > 1:
        out["dims"] = list(shape[1:])
    else:
        out["dims"], out["reshape"] = [1], {}
    return out


def model_config(model: ServedModel, runtime: Runtime) -> dict[str, Any]:
    """Triton's model config of a served cascade, in its JSON form (HTTP's ``/config``; the gRPC front end parses it
    into its message): inputs, outputs, the most rows admission can ever hold in one call as ``max_batch_size``,
    and the gear plan in force summed up in ``parameters``."""
    plan = runtime.plan
    limit = runtime.admission_policy.limit
    summary = {
        "models": ",".join(plan.models()),
        "gears": str(len(plan.gears)),
        "devices": ",".join(d.name for d in plan.devices),
        "max_qps": f"{plan.max_qps:g}",
        "slo": "" if plan.slo is None else str(plan.slo),
        "emulated": str(model.emulated).lower(),
    }
    return {
        "name": model.name,
        "platform": "cascadeserve",
        "max_batch_size": limit if limit is not None else 2**31 - 1,
        "input": [_tensor(i.name, i.datatype, i.shape) for i in model.inputs],
        "output": [_tensor(n, dt, (-1,)) for n, dt in model.outputs],
        "parameters": {k: {"string_value": v} for k, v in summary.items()},
    }


class InferError(ProtocolError):
    """An infer call refused or failed past decoding; ``retry_after_s`` is set when it was shed (HTTP 503)."""

    def __init__(self, message: str, status: int, retry_after_s: float | None = None) -> None:
        super().__init__(message, status)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class Inferred:
    """The answer to one infer call: its output tensors (one element per row, each ``[N]`` or, to a request that
    sent a per-row scalar input in Triton's ``[N, 1]``, ``[N, 1]``) and response parameters."""

    outputs: list[OutputTensor]
    parameters: dict[str, Any]


async def _all_answered(futures: Sequence[asyncio.Future[Any]]) -> bool:
    # asyncio.wait, not gather: cancelling this wait (a gRPC client that cancels) must not cancel the row futures,
    # which the runtime still resolves
    if any(not f.done() for f in futures):
        await asyncio.wait(futures)
    return True


def _finite(arr: np.ndarray, datatype: str) -> np.ndarray:
    if datatype == "BF16":  # bfloat16 bit patterns: NaN and Inf have every exponent bit set
        exponent = np.uint16(0x7F80)
        out: np.ndarray = (arr & exponent) != exponent
        return out
    finite: np.ndarray = np.isfinite(arr)
    return finite


class InferCore:
    """Inference over ``runtime`` through the serving ``layer``, for the served ``model``."""

    def __init__(self, runtime: Runtime, model: ServedModel, layer: ClipperLayer) -> None:
        self.runtime = runtime
        self.model = model
        self.layer = layer
        self.counts = RequestCounts()  # the V2 calls, for Triton's nv_inference_* metrics (http/triton_metrics.py)
        self._names = {d: k for k, d in reversed(DTYPES.items())}  # dtype -> datatype (np.uint16: UINT16, not BF16)
        self._lookup: Callable[[np.ndarray], list[Any]] = self._sample_rows if model.emulated else self._rows

    def check_name(self, name: str, version: str | None) -> None:
        """Refuse (404) a model this server does not serve, or a version it lacks (``None``: any)."""
        if name != self.model.name:
            raise ProtocolError(f"unknown model {name!r}; this server serves {self.model.name!r}", 404)
        if version is not None and version != "1":
            raise ProtocolError(f"model {name!r} has no version {version!r}; its only version is '1'", 404)

    def shed_early(self) -> None:
        """Refuse (503) a call while admission is full even for one row, before its body is read and decoded."""
        refusal = self.runtime.shed_now()
        if refusal is not None:
            self.runtime.shed(1)
            self.counts.failed(503)
            raise InferError(str(refusal), 503, refusal.retry_after_s)

    def _sample_rows(self, arr: np.ndarray) -> list[Any]:
        index = self.model.sample_index
        assert index is not None
        rows = []
        for sid in arr.tolist():
            row = index.get(sid)
            if row is None:
                raise ProtocolError(f"input {self.model.input.name!r}: {sid} is not a validation sample id")
            rows.append(row)
        return rows

    def _rows(self, arr: np.ndarray) -> list[Any]:
        return list(arr)

    def payloads(self, inputs: Mapping[str, np.ndarray], datatypes: Mapping[str, str] | None = None) -> list[Any]:
        """The runtime payloads of the rows of ``inputs``, checked against the model's inputs (400 naming them):
        a row of the one input, or for a model that takes several a mapping of each input's name to its row.

        ``datatypes``: each input's V2 datatype as the request named it (the decoders give it: the dtype alone does
        not tell UINT16 from BF16); without it the dtype decides, for a caller that built the array for this input.
        """
        return self._payloads(inputs, datatypes)[0]

    def _payloads(
        self, inputs: Mapping[str, np.ndarray], datatypes: Mapping[str, str] | None
    ) -> tuple[list[Any], bool]:
        """:meth:`payloads`, and whether a per-row scalar input came in Triton's ``[N, 1]`` (the answer then takes
        that form too)."""
        specs = self.model.inputs
        names = [s.name for s in specs]
        missing = [n for n in names if n not in inputs]
        if missing:
            raise ProtocolError(f"input {missing[0]!r} is missing (got {', '.join(inputs) or 'none'})")
        for other in inputs:
            if other not in names:
                takes = f"only {names[0]!r}" if len(names) == 1 else ", ".join(repr(n) for n in names)
                raise ProtocolError(f"input {other!r} is unknown; this model takes {takes}")
        given = [inputs[spec.name] for spec in specs]
        arrays = [self._checked(spec, arr, datatypes) for spec, arr in zip(specs, given, strict=True)]
        column = any(a.ndim > len(s.shape) for s, a in zip(specs, given, strict=True))  # [N, 1] for a (-1,) input
        if len(arrays) == 1:
            return self._lookup(arrays[0]), column
        rows = {len(a) for a in arrays}
        if len(rows) > 1:
            held = ", ".join(f"{n!r} {len(a)}" for n, a in zip(names, arrays, strict=True))
            raise ProtocolError(f"inputs hold different numbers of rows ({held}): one row per request in each")
        return [dict(zip(names, row, strict=True)) for row in zip(*arrays, strict=True)], column

    def _checked(self, spec: InputSpec, arr: np.ndarray, datatypes: Mapping[str, str] | None) -> np.ndarray:
        """``arr`` if it is what input ``spec`` takes (datatype, shape, rows, finite values); else 400 naming it.

        Shape: Triton's ``[N] + dims`` (the metadata's :func:`metadata_shape`), and for a per-row scalar input also
        ``[N]`` (what KServe's SDK, Clipper-era clients and this project's own load generators send); a per-row
        scalar sent as ``[N, 1]`` comes back as ``[N]``, so a model sees the same rows either way."""
        got = datatypes.get(spec.name) if datatypes else None
        if got is None:
            want = DTYPES[spec.datatype]
            got = spec.datatype if arr.dtype == want else self._names.get(arr.dtype, str(arr.dtype))
        if got != spec.datatype:
            raise ProtocolError(f"input {spec.name!r}: datatype {got}, expected {spec.datatype}")
        if len(spec.shape) == 1 and arr.ndim == 2 and arr.shape[1] == 1:  # Triton's form of a per-row scalar
            arr = arr.reshape(len(arr))
        if arr.ndim != len(spec.shape) or any(s != -1 and s != a for s, a in zip(spec.shape, arr.shape, strict=True)):
            forms = metadata_shape(spec.shape)
            forms_text = f"{forms} (or {list(spec.shape)})" if len(spec.shape) == 1 else f"{forms}"
            raise ProtocolError(f"input {spec.name!r}: shape {list(arr.shape)} does not match {forms_text}")
        if arr.shape[0] == 0:
            raise ProtocolError(f"input {spec.name!r}: the batch has no rows")
        if spec.datatype == "BYTES":  # text, and an LLM item within the gate's bounds (http/limits.py)
            check_text_rows(arr.ravel().tolist(), f"input {spec.name!r}: row")
        if (arr.dtype.kind == "f" or spec.datatype == "BF16") and not spec.allow_non_finite:
            finite = _finite(arr, spec.datatype).reshape(len(arr), -1).all(axis=1)
            if not finite.all():
                row = int(np.argmin(finite))
                raise ProtocolError(
                    f"input {spec.name!r}: row {row} holds a non-finite value (NaN or Inf; a number past the range "
                    f"of {spec.datatype} is Inf too); this model accepts finite values only"
                )
        return arr

    def timeout_s(self, params: Mapping[str, Any]) -> float | None:
        """``parameters.timeout_ms`` in seconds (``None``: the server's default deadline)."""
        t = params.get("timeout_ms")
        if t is None:
            return None
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t <= 0:
            raise ProtocolError(f"parameters.timeout_ms: expected a positive number of milliseconds, got {t!r}")
        return float(t) / 1000.0

    async def infer(
        self,
        inputs: Mapping[str, np.ndarray],
        parameters: Mapping[str, Any],
        context: str,
        rid: str | None,
        watch: Watch | None = None,
        datatypes: Mapping[str, str] | None = None,
        classes: Mapping[str, int] | None = None,
    ) -> Inferred:
        """Run every row of ``inputs`` through the cascade; ``watch`` tells a client that went away (HTTP), and a
        cancelled caller (a gRPC client that cancels) has its rows that have not started dropped too.
        ``datatypes``: each input's V2 datatype, as :meth:`payloads` takes it; ``classes``: the outputs to return
        as Triton's classification, and how many classes of each (:mod:`cascadeserve.http.classification`).
        Each call is counted once, answered or failed (:attr:`counts`)."""
        try:
            done = await self._infer(inputs, parameters, context, rid, watch, datatypes, classes)
        except ProtocolError as e:
            self.counts.failed(e.status)
            raise
        except asyncio.CancelledError:
            self.counts.failed(499)
            raise
        self.counts.succeeded(done.parameters)
        return done

    async def _infer(
        self,
        inputs: Mapping[str, np.ndarray],
        parameters: Mapping[str, Any],
        context: str,
        rid: str | None,
        watch: Watch | None,
        datatypes: Mapping[str, str] | None,
        classes: Mapping[str, int] | None,
    ) -> Inferred:
        if classes:
            check_classes(classes)
        payloads, column = self._payloads(inputs, datatypes)
        timeout = self.timeout_s(parameters)
        admitted = self.runtime.clock.now()
        try:
            reqs = self.layer.submit(payloads, timeout, context)
        except Overloaded as e:
            raise InferError(str(e), 503, e.retry_after_s) from None
        except ServingError as e:
            raise InferError(str(e), e.status) from None
        futures = [r.future for r in reqs]
        try:
            whole = await (watch or _all_answered)(futures)
        except asyncio.CancelledError:
            self.runtime.cancel(reqs)
            raise
        if not whole:  # the client went away: drop rows not started
            self.runtime.cancel(reqs)
            await asyncio.gather(*futures, return_exceptions=True)
        results = [outcome(f) for f in futures]
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            worst = max(errors, key=lambda e: getattr(e, "status", 500))
            raise InferError(*public_error(worst))  # a model's own text only in the log
        answers = [r for r in results if isinstance(r, Answer)]
        self.layer.answered(rid, reqs, answers, context)
        done = self._inferred(answers, admitted, column)
        if classes:
            labels = [a.label for a in answers]
            return Inferred(classified(done.outputs, classes, self.model.labels, labels), done.parameters)
        return done

    def _inferred(self, answers: list[Answer], admitted: float, column: bool = False) -> Inferred:
        first = answers[0]
        if len(answers) == 1:  # the common call: one row, its own figures (the same values, without the generators)
            finished, fallback, cached = first.finished, first.fallback, first.cached
            queue_s, compute_s = first.queue_s, first.compute_s
        else:
            finished = max(a.finished for a in answers)
            fallback = any(a.fallback for a in answers)
            queue_s = max(a.queue_s for a in answers)
            compute_s = max(a.compute_s for a in answers)
            cached = any(a.cached for a in answers)
        params: dict[str, Any] = {
            # admission to the last row's answer: what a client sees beyond it is the front door (bench measures it)
            "server_ms": max(0.0, finished - admitted) * 1000.0,
            "gear": first.gear,
            "fallback": fallback,
            "queue_ms": queue_s * 1000.0,
            "compute_ms": compute_s * 1000.0,
            "emulated": self.model.emulated,
            "cached": cached,
        }
        if len(answers) > 1:
            params["gears"] = ",".join(str(a.gear) for a in answers)
            params["fallbacks"] = ",".join("1" if a.fallback else "0" for a in answers)
        outputs = [
            OutputTensor("label", "INT64", np.array([a.label for a in answers], dtype=np.int64)),
            OutputTensor("certainty", "FP32", np.array([a.certainty for a in answers], dtype=np.float32)),
            OutputTensor("model", "BYTES", [a.model for a in answers]),
        ]
        names = self.model.labels
        if names is not None:  # a label the names miss (a class the profile never saw) has the empty name, no error
            outputs.append(OutputTensor(*CLASS_NAME, [names.get(a.label, "") for a in answers]))
        if any(a.output is not None for a in answers):  # a generative cascade: its answers as text
            outputs.append(OutputTensor("text", "BYTES", [a.output.text if a.output else "" for a in answers]))
        if column:  # the request's per-row scalars came as [N, 1]: the answer's are [N, 1] too (metadata [-1, 1])
            shape = (len(answers), 1)
            outputs = [OutputTensor(o.name, o.datatype, o.data, o.parameters, shape) for o in outputs]
        return Inferred(outputs, params)
