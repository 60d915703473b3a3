"""Every V2 datatype as a served model's input, end to end: ``models.yaml`` declares it, and ``tritonclient.http``
(JSON and binary), ``tritonclient.grpc`` (raw) and gRPC's typed ``contents`` send the same rows and get the same
answers, which are what the model computes on the rows as sent. Out-of-range values, non-finite floats and
ill-typed elements get 400 / INVALID_ARGUMENT naming the input, with the same message over both protocols.

One server (HTTP and gRPC, a one-model cascade over a real ``models.yaml``) per datatype, for the module.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
from tests.grpc.echo_models import EchoModel, row_label
from tests.grpc.grpc_helpers import client, grpc_serving, stub
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from cascadeserve.cascade import Cascade
from cascadeserve.http import Server
from cascadeserve.http.v2 import DTYPES
from cascadeserve.models.config import load_models_config
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import Profile
from cascadeserve.runtime import load_model_config

INTS = ["INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"]
FLOATS = ["FP16", "FP32", "FP64"]
ALL = ["BOOL", *INTS, *FLOATS, "BF16", "BYTES"]
# Triton's typed field for each datatype (FP16 and BF16 have none)
CONTENTS = {
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
NAME = "x"  # the input's name, which every refusal must name


@dataclass
class Served:
    server: Server
    datatype: str
    model: EchoModel


def _models_yaml(path: Path, datatype: str) -> Path:
    path.write_text(
        f"input: {{name: {NAME}, datatype: {datatype.lower()}, shape: [-1, 3]}}\n"
        f"models:\n  m0: {{factory: tests.grpc.echo_models:echo_model, kwargs: {{datatype: {datatype}}}}}\n"
    )
    return path


@pytest.fixture(scope="module", params=ALL)
def served(
    request: pytest.FixtureRequest, toy_profile: Profile, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    datatype: str = request.param
    models = load_model_config(_models_yaml(tmp_path_factory.mktemp(datatype) / "models.yaml", datatype))
    plan = fixed_plan(toy_profile, Cascade(("m0",)), (Device(name="d0", memory_mb=1000),), max_wait_ms=1.0)
    with grpc_serving(toy_profile, plan, models=models, name="echo") as server:
        model = models.models["m0"]
        assert isinstance(model, EchoModel)
        yield Served(server, datatype, model)


def _rows(dt: str) -> np.ndarray:
    """Four rows of three elements, the extremes of an integer datatype among them."""
    rng = np.random.default_rng(ALL.index(dt))
    if dt == "BOOL":
        return rng.random((4, 3)) < 0.5
    if dt == "BYTES":
        text = [["héllo", "7", ""], ["ünïcode ✓", "a" * 40, "x"], ["0", "-1", " "], ["b", "", "zz"]]
        return np.array(text, dtype=object)
    if dt in INTS:
        info = np.iinfo(DTYPES[dt])
        rows = rng.integers(info.min, info.max, (4, 3), dtype=DTYPES[dt], endpoint=True)
        rows[0, 0], rows[1, 1] = info.min, info.max
        return rows
    # values that bfloat16 rounds: two halfway cases (to even: down, then up) among random ones
    values = rng.normal(0.0, 50.0, (4, 3))
    values[0, :2] = [1.00390625, 1.01171875]
    return values.astype(np.float32 if dt == "BF16" else DTYPES[dt])


def _as_sent(dt: str, rows: np.ndarray) -> np.ndarray:
    """What the model should receive: the rows, BF16 as the bit patterns of their nearest bfloat16."""
    return rows.astype(ml_dtypes.bfloat16).view(np.uint16) if dt == "BF16" else rows


def _client_array(dt: str, rows: np.ndarray) -> np.ndarray:
    return rows.astype(ml_dtypes.bfloat16) if dt == "BF16" else rows  # tritonclient's BF16: ml_dtypes.bfloat16


def _http(served: Served, rows: np.ndarray, binary: bool) -> np.ndarray:
    c = th.InferenceServerClient(served.server.url.removeprefix("http://"))
    inp = th.InferInput(NAME, list(rows.shape), served.datatype)
    inp.set_data_from_numpy(_client_array(served.datatype, rows), binary_data=binary)
    labels: np.ndarray = c.infer("echo", [inp]).as_numpy("label")
    return labels


def _json(served: Served, data: list[Any], shape: list[int], datatype: str | None = None) -> httpx.Response:
    body = {"inputs": [{"name": NAME, "datatype": datatype or served.datatype, "shape": shape, "data": data}]}
    # json.dumps writes NaN and Infinity, as many clients do
    return httpx.post(f"{served.server.url}/v2/models/echo/infer", content=json.dumps(body), timeout=20)


def _grpc(served: Served, rows: np.ndarray) -> np.ndarray:
    inp = tg.InferInput(NAME, list(rows.shape), served.datatype)
    inp.set_data_from_numpy(_client_array(served.datatype, rows))
    labels: np.ndarray = client(served.server).infer("echo", [inp]).as_numpy("label")
    return labels


def _typed(served: Served, values: list[Any], shape: list[int]) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="echo")
    tensor = request.inputs.add(name=NAME, datatype=served.datatype, shape=shape)
    getattr(tensor.contents, CONTENTS[served.datatype]).extend(values)
    return request


def _raw(served: Served, blob: bytes, shape: list[int], datatype: str | None = None) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="echo")
    request.inputs.add(name=NAME, datatype=datatype or served.datatype, shape=shape)
    request.raw_input_contents.append(blob)
    return request


def _received(model: EchoModel, dtype: np.dtype[Any]) -> list[tuple[Any, ...]]:
    """The rows the model ran since the last look (sorted: a call's rows may come in more than one batch)."""
    rows = np.concatenate(model.seen)
    model.seen.clear()
    assert rows.dtype == dtype and rows.shape[1:] == (3,)
    return sorted(map(tuple, rows.tolist()))


def _sorted(*arrays: np.ndarray) -> list[tuple[Any, ...]]:
    return sorted(map(tuple, np.concatenate(arrays).tolist()))


def test_every_protocol_answers_what_the_model_computes_on_the_rows_sent(served: Served) -> None:
    dt = served.datatype
    rows = _rows(dt)
    sent = _as_sent(dt, rows)
    expected = np.array([row_label(r, dt) for r in sent])
    served.model.seen.clear()
    answers: dict[str, np.ndarray] = {
        "http binary": _http(served, rows, binary=True),
        "grpc raw": _grpc(served, rows),
    }
    assert _received(served.model, DTYPES[dt]) == _sorted(sent, sent)  # what the adapter got: each element as sent
    if dt == "BF16":  # tritonclient sends BF16 in binary only: JSON numbers, rounded by the server to bfloat16
        r = _json(served, rows.tolist(), list(rows.shape))
        assert r.status_code == 200, r.text
        answers["http json"] = np.array(next(o["data"] for o in r.json()["outputs"] if o["name"] == "label"))
        bits = _received(served.model, DTYPES[dt])
        assert bits == _sorted(sent)  # to the bit, as ml_dtypes rounds (nearest, ties to even)
        assert (0x3F80, 0x3F82) in [b[:2] for b in bits]  # 1+2^-8 rounds down to 1, 1+3*2^-8 up to 1+2^-6
    else:
        answers["http json"] = _http(served, rows, binary=False)
    if dt in CONTENTS:
        values = [s.encode() for s in rows.ravel()] if dt == "BYTES" else rows.ravel().tolist()
        with stub(served.server) as s:
            response = s.ModelInfer(_typed(served, values, list(rows.shape)), timeout=20)
        answers["grpc typed"] = np.frombuffer(response.raw_output_contents[0], dtype="<i8")
    for how, labels in answers.items():
        np.testing.assert_array_equal(labels, expected, err_msg=how)
    assert served.server.app.runtime.in_flight == 0


def test_clippers_predict_takes_the_same_rows_as_v2(served: Served) -> None:
    """Clipper's REST predict (``{"input_batch": rows}``, JSON numbers) answers what V2 answers: for BF16 the server
    rounds each number to the nearest bfloat16 (ties to even) exactly as for a V2 JSON tensor."""
    dt = served.datatype
    if dt == "BYTES":
        pytest.skip("Clipper's predict takes numbers; BYTES inputs go through V2")
    rows = _rows(dt)
    sent = _as_sent(dt, rows)
    served.model.seen.clear()
    r = httpx.post(f"{served.server.url}/echo/predict", json={"input_batch": rows.tolist()}, timeout=20)
    assert r.status_code == 200, r.text
    labels = [p["output"] for p in r.json()["batch_predictions"]]
    assert labels == [row_label(row, dt) for row in sent]
    assert _received(served.model, DTYPES[dt]) == _sorted(sent)  # the adapter got each element as V2 gives it


def test_bench_without_rows_sends_zero_rows_the_model_takes(served: Served) -> None:
    """``bench`` against a model of any input, given no rows: its placeholder rows (zeros; ``false`` for BOOL,
    a short text for BYTES) fit the input, so every request is answered."""
    from cascadeserve.eval.loadgen import run_load

    report = asyncio.run(run_load(served.server.url, "echo", [0.0, 0.01, 0.02]))
    assert (report.ok, report.errors) == (3, 0), report


def _bad_json(dt: str) -> list[tuple[Any, str]]:
    """Elements that do not fit ``dt`` in JSON, and what the refusal says (each sent as the middle of a row)."""
    nonfinite = "holds a non-finite value"
    if dt in INTS:
        info = np.iinfo(DTYPES[dt])
        outside = f"outside {info.min}..{info.max}"
        return [(int(info.min) - 1, outside), (int(info.max) + 1, outside), (1.5, "expected integers"),
                (True, "expected numbers"), ("7", "expected numbers")]  # fmt: skip
    if dt == "BOOL":
        return [(1, "expected true/false"), ("true", "expected true/false"), (None, "expected true/false")]
    if dt == "BYTES":
        return [(7, "BYTES element 1 is int, expected a string"), (None, "BYTES element 1 is NoneType")]
    past = {"FP16": 70000.0, "FP32": 1e39, "FP64": float("inf"), "BF16": 3.4e38}[dt]  # BF16: rounds up to Inf
    return [(past, nonfinite), (float("nan"), nonfinite), (float("-inf"), nonfinite), (True, "expected numbers"),
            ("1.0", "expected numbers"), (10**400, "past the float range")]  # fmt: skip


def _grpc_refusal(served: Served, request: service_pb2.ModelInferRequest) -> str:
    with stub(served.server) as s, pytest.raises(grpc.RpcError) as err:
        s.ModelInfer(request, timeout=20)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    details: str = err.value.details()  # type: ignore[attr-defined]
    return details


def test_values_that_do_not_fit_the_datatype_are_refused_naming_the_input(served: Served) -> None:
    dt = served.datatype
    good = _rows(dt)[0].tolist()
    for bad, needle in _bad_json(dt):
        r = _json(served, [[good[0], bad, good[2]]], [1, 3])
        assert r.status_code == 400, (bad, r.text)
        message = r.json()["error"]
        assert f"input {NAME!r}" in message and needle in message, (bad, message)
        # the same element in gRPC's typed field, where the field can hold it: the same message
        field = CONTENTS.get(dt)
        if field is None or type(bad) is not type(good[0]):
            continue
        try:
            request = _typed(served, [good[0], bad, good[2]], [1, 3])
        except (TypeError, ValueError):  # out of the field's own range (a UINT32 of 2**32 in uint_contents)
            continue
        assert _grpc_refusal(served, request) == message
    assert served.server.app.runtime.in_flight == 0


def test_binary_values_that_do_not_fit_are_refused_over_both_protocols(served: Served) -> None:
    dt = served.datatype
    if dt in INTS:
        pytest.skip("every pattern of an integer datatype's bytes is a value of it")
    if dt == "BOOL":
        blob, needle = b"\x00\x02\x01", "a byte other than 0 or 1"
    elif dt == "BYTES":
        blob, needle = b"".join(struct.pack("<I", len(b)) + b for b in (b"ok", b"\xff\xfe", b"")), "not UTF-8"
    else:
        row = np.array([1.0, np.nan if dt == "BF16" else np.inf, 2.0], dtype=np.float32)
        blob = _client_array(dt, row).tobytes() if dt == "BF16" else row.astype(DTYPES[dt]).tobytes()
        needle = "row 0 holds a non-finite value"
    head = json.dumps({"inputs": [{"name": NAME, "datatype": dt, "shape": [1, 3],
                                   "parameters": {"binary_data_size": len(blob)}}]}).encode()  # fmt: skip
    r = httpx.post(
        f"{served.server.url}/v2/models/echo/infer",
        content=head + blob,
        headers={"Inference-Header-Content-Length": str(len(head))},
        timeout=20,
    )
    assert r.status_code == 400 and f"input {NAME!r}" in r.text and needle in r.text, r.text
    assert _grpc_refusal(served, _raw(served, blob, [1, 3])) == r.json()["error"]


def test_a_tensor_of_another_datatype_is_refused_though_its_bytes_fit(served: Served) -> None:
    """BF16 travels as np.uint16: the datatype the request names decides, not the dtype it decodes to."""
    dt = served.datatype
    other = {"BF16": "UINT16", "UINT16": "BF16", "FP16": "BF16", "INT16": "UINT16"}.get(dt)
    if other is None:
        pytest.skip("the 16-bit datatypes only")
    blob = np.array([[1, 2, 3]], dtype=np.uint16).tobytes()
    expected = f"input {NAME!r}: datatype {other}, expected {dt}"
    assert _grpc_refusal(served, _raw(served, blob, [1, 3], other)) == expected
    r = _json(served, [[1, 2, 3]], [1, 3], other)
    assert r.status_code == 400 and r.json()["error"] == expected
    c = th.InferenceServerClient(served.server.url.removeprefix("http://"))
    inp = th.InferInput(NAME, [1, 3], other)
    inp.set_data_from_numpy(np.array([[1, 2, 3]], dtype=ml_dtypes.bfloat16 if other == "BF16" else np.uint16))
    with pytest.raises(InferenceServerException) as err:
        c.infer("echo", [inp])
    assert err.value.message() == expected


@pytest.mark.parametrize("dt", ALL)
def test_models_yaml_accepts_every_datatype(dt: str, tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(f"input: {{name: x, datatype: {dt.lower()}, shape: [-1, 3]}}\nmodels:\n  - {{name: m, adapter: "
                    "callable, ref: tests.grpc.echo_models:echo_model}\n")  # fmt: skip
    assert load_models_config(path).input.datatype == dt
    assert load_model_config(_models_yaml(path, dt)).input.datatype == dt


def test_the_config_lists_exactly_the_v2_datatypes() -> None:
    from cascadeserve.models.config import _DATATYPES

    assert set(_DATATYPES) == set(DTYPES) == set(ALL)
