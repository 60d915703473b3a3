"""gRPC status codes, each with a message naming what is at fault: unknown model, bad input, tokens, shedding (with
``retry-after``), a call admission can never hold, a message over the limit, a model that raises, a deadline, a
client that cancels (a call or a stream); and a fuzz of malformed ``ModelInferRequest`` messages that only ever
meets INVALID_ARGUMENT or NOT_FOUND, leaving nothing in flight."""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterator

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as tg
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.grpc.grpc_helpers import client, grpc_serving, stub, wait_for
from tests.http.http_helpers import toy_plan
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import Profile
from cascadeserve.runtime import InputSpec, LocalBackend, ModelConfig, RuntimeOptions


def _input(name: str, rows: np.ndarray, datatype: str = "INT64") -> tg.InferInput:
    inp = tg.InferInput(name, list(rows.shape), datatype)
    inp.set_data_from_numpy(rows)
    return inp


def _refused(call: object) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as err:
        call()  # type: ignore[operator]
    return err.value


def _ids(n: int) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="toy")
    request.inputs.add(name="sample_id", datatype="INT64", shape=[n]).contents.int64_contents.extend(range(n))
    return request


def test_unknown_model_and_bad_input_name_what_is_wrong(toy_profile: Profile) -> None:
    with grpc_serving(toy_profile) as server:
        c = client(server)
        ids = np.array([1, 2], dtype=np.int64)
        e = _refused(lambda: c.infer("nope", [_input("sample_id", ids)]))
        assert e.status() == "StatusCode.NOT_FOUND" and "'nope'" in str(e.message())
        e = _refused(lambda: c.get_model_metadata("toy", "7"))
        assert e.status() == "StatusCode.NOT_FOUND" and "no version '7'" in str(e.message())
        e = _refused(lambda: c.infer("toy", [_input("sample_id", ids.astype(np.float32), "FP32")]))
        assert e.status() == "StatusCode.INVALID_ARGUMENT"
        assert "input 'sample_id': datatype FP32, expected INT64" in str(e.message())
        e = _refused(lambda: c.infer("toy", [_input("sample_id", np.array([10**6], dtype=np.int64))]))
        assert e.status() == "StatusCode.INVALID_ARGUMENT" and "not a validation sample id" in str(e.message())
        e = _refused(lambda: c.infer("toy", [_input("x", ids)]))
        assert e.status() == "StatusCode.INVALID_ARGUMENT" and "input 'sample_id' is missing" in str(e.message())
        with stub(server) as s:
            request = _ids(2)
            request.inputs[0].shape[:] = [3]  # 2 elements for 3
            with pytest.raises(grpc.RpcError) as err:
                s.ModelInfer(request, timeout=20)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
            assert "data has 2 elements but shape [3] needs 3" in err.value.details()  # type: ignore[attr-defined]
        assert server.app.runtime.in_flight == 0


def test_tokens_come_from_the_authorization_metadata(toy_profile: Profile) -> None:
    with grpc_serving(toy_profile, auth_token="s3cret") as server:
        c = client(server)
        assert c.is_server_live() and c.is_server_ready()  # the health probes need no token, as over HTTP
        ids = [_input("sample_id", np.array([1], dtype=np.int64))]
        e = _refused(lambda: c.infer("toy", ids))
        assert e.status() == "StatusCode.UNAUTHENTICATED" and "Bearer" in str(e.message())
        e = _refused(lambda: c.get_model_metadata("toy", headers={"authorization": "Bearer wrong"}))
        assert e.status() == "StatusCode.PERMISSION_DENIED" and "not valid" in str(e.message())
        ok = c.infer("toy", ids, headers={"authorization": "Bearer s3cret"})
        assert ok.as_numpy("label") is not None


def _slow_plan(profile: Profile) -> object:
    """One device, m0 only, batches of 64 (or after 300 ms), 10 QPS: with a 1 s SLO admission holds 20 rows."""
    return fixed_plan(
        profile, Cascade(("m0",), ()), (Device(name="d0", memory_mb=1000),), min_queue=64, max_wait_ms=300.0, max_qps=10
    )


def test_shed_is_resource_exhausted_with_retry_after_and_too_large_has_none(toy_profile: Profile) -> None:
    opts = RuntimeOptions(max_in_flight=4096, max_wait_slos=2.0, slo_ms=1000.0, default_timeout_s=10.0)
    plan = _slow_plan(toy_profile)
    with grpc_serving(toy_profile, plan, backend=LocalBackend(), runtime_options=opts) as server, stub(server) as s:
        runtime = server.app.runtime
        assert runtime.admission_policy.limit == 20
        with pytest.raises(grpc.RpcError) as big:
            s.ModelInfer(_ids(25), timeout=20)
        assert big.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
        assert "exceeds the admission capacity of 20" in big.value.details()  # type: ignore[attr-defined]
        assert "retry-after" not in dict(big.value.trailing_metadata() or ())  # type: ignore[attr-defined]
        held: list[object] = []
        first = threading.Thread(target=lambda: held.append(s.ModelInfer(_ids(18), timeout=20)))
        first.start()
        wait_for(lambda: runtime.in_flight == 18)  # admitted, waiting for their batch
        with pytest.raises(grpc.RpcError) as shed:
            s.ModelInfer(_ids(12), timeout=20)
        first.join(20)
        assert shed.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
        # 18 + 12 - 20 = 10 over the bound, draining at 10 QPS: retry in 1 s, as HTTP's Retry-After says
        assert "admission" in shed.value.details() and "retry after 1 s" in shed.value.details()  # type: ignore[attr-defined]
        assert dict(shed.value.trailing_metadata())["retry-after"] == "1"  # type: ignore[attr-defined]
        assert len(held) == 1 and runtime.in_flight == 0


def test_a_message_over_the_body_limit_is_refused_naming_the_limit(toy_profile: Profile) -> None:
    with grpc_serving(toy_profile, max_body_bytes=64 << 10) as server:
        rows = np.zeros(20_000, dtype=np.int64)  # 160 kB of raw contents
        e = _refused(lambda: client(server).infer("toy", [_input("sample_id", rows)]))
        assert e.status() == "StatusCode.RESOURCE_EXHAUSTED" and str(64 << 10) in str(e.message())


def test_a_model_that_raises_is_internal_naming_it(toy_profile: Profile) -> None:
    def m0(batch: np.ndarray) -> np.ndarray:
        if np.any(batch[:, 0] < 0):
            raise ValueError("negative feature")
        return np.column_stack([batch[:, 0], 1 - batch[:, 0], np.zeros(len(batch))])

    def m1(batch: np.ndarray) -> np.ndarray:
        return np.tile([0.1, 0.2, 0.7], (len(batch), 1))

    models = ModelConfig({"m0": m0, "m1": m1}, InputSpec("input", "FP32", (-1, 2)))
    with grpc_serving(toy_profile, models=models, backend=LocalBackend()) as server:
        c = client(server)
        ok = c.infer("toy", [_input("input", np.array([[0.9, 0.0]], dtype=np.float32), "FP32")])
        assert ok.as_numpy("model").tolist() == [b"m0"]
        e = _refused(lambda: c.infer("toy", [_input("input", np.array([[-1.0, 0.0]], dtype=np.float32), "FP32")]))
        assert e.status() == "StatusCode.INTERNAL" and "'m0'" in str(e.message())
        bad = np.array([[np.nan, 0.0]], dtype=np.float32)
        e = _refused(lambda: c.infer("toy", [_input("input", bad, "FP32")]))
        assert e.status() == "StatusCode.INVALID_ARGUMENT" and "non-finite" in str(e.message())


def test_a_passed_deadline_is_deadline_exceeded(toy_profile: Profile) -> None:
    with grpc_serving(toy_profile, _slow_plan(toy_profile), backend=LocalBackend()) as server, stub(server) as s:
        request = _ids(1)
        request.parameters["timeout_ms"].int64_param = 1  # long before the batch of 64 (or 300 ms) fires
        with pytest.raises(grpc.RpcError) as err:
            s.ModelInfer(request, timeout=20)
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED  # type: ignore[attr-defined]
        assert "deadline" in err.value.details()  # type: ignore[attr-defined]


def test_a_client_that_cancels_has_its_waiting_rows_dropped(toy_profile: Profile) -> None:
    # batches of 64 or after 5 s: nothing but the cancel can free these rows within the wait below
    plan = toy_plan(toy_profile, min_queue=64, max_wait_ms=5000.0)
    with grpc_serving(toy_profile, plan, backend=LocalBackend()) as server, stub(server) as s:
        runtime = server.app.runtime
        call = s.ModelInfer.future(_ids(3), timeout=30)
        wait_for(lambda: runtime.in_flight == 3)
        call.cancel()
        wait_for(lambda: runtime.in_flight == 0, timeout_s=3.0)
        shed = httpx.get(f"{server.url}/metrics").text
        assert "cascadeserve_in_flight 0.0" in shed


def test_a_cancelled_stream_has_its_waiting_rows_dropped(toy_profile: Profile) -> None:
    plan = toy_plan(toy_profile, min_queue=64, max_wait_ms=5000.0)
    with grpc_serving(toy_profile, plan, backend=LocalBackend()) as server, stub(server) as s:
        runtime = server.app.runtime
        release = threading.Event()

        def requests() -> Iterator[service_pb2.ModelInferRequest]:
            yield _ids(3)
            release.wait(30)  # the stream stays open until cancelled

        call = s.ModelStreamInfer(requests(), timeout=30)
        try:
            wait_for(lambda: runtime.in_flight == 3)
            call.cancel()
            wait_for(lambda: runtime.in_flight == 0, timeout_s=3.0)
        finally:
            release.set()


_DATATYPES = ["BOOL", "UINT8", "INT8", "INT32", "INT64", "UINT64", "FP16", "FP32", "FP64", "BYTES", "INT3", ""]
_FIELDS = ["bool_contents", "int_contents", "int64_contents", "uint64_contents", "fp32_contents", "bytes_contents"]
_VALUES = {
    "bool_contents": st.booleans(),
    "int_contents": st.integers(-(2**31), 2**31 - 1),
    "int64_contents": st.integers(-(2**63), 2**63 - 1),
    "uint64_contents": st.integers(0, 2**64 - 1),
    "fp32_contents": st.floats(width=32),
    "bytes_contents": st.binary(max_size=6),
}


@st.composite
def _requests(draw: st.DrawFn) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name=draw(st.sampled_from(["toy", "toy", "nope", ""])))
    request.model_version = draw(st.sampled_from(["", "1", "2"]))
    raw = draw(st.booleans())
    for _ in range(draw(st.integers(0, 3))):
        tensor = request.inputs.add(
            name=draw(st.sampled_from(["sample_id", "sample_id", "x", ""])),
            datatype=draw(st.sampled_from(_DATATYPES)),
            shape=draw(st.lists(st.integers(-2, 5), max_size=3)),
        )
        if raw:
            request.raw_input_contents.append(draw(st.binary(max_size=48)))
        elif draw(st.booleans()):
            field = draw(st.sampled_from(_FIELDS))
            getattr(tensor.contents, field).extend(draw(st.lists(_VALUES[field], max_size=6)))
    if raw and draw(st.booleans()):
        request.raw_input_contents.append(b"\x00" * 8)  # one more than the inputs
    if draw(st.booleans()):
        bad = [service_pb2.InferParameter(string_param="x"), service_pb2.InferParameter(int64_param=-1)]
        request.parameters["timeout_ms"].CopyFrom(draw(st.sampled_from(bad)))
    return request


def test_malformed_infer_requests_are_refused_as_the_callers_fault(toy_profile: Profile) -> None:
    with grpc_serving(toy_profile) as server, stub(server) as s:
        seen: set[str] = set()

        @settings(max_examples=50, deadline=None, derandomize=True)
        @given(_requests())
        def check(request: service_pb2.ModelInferRequest) -> None:
            try:
                s.ModelInfer(request, timeout=20)
                seen.add("OK")
            except grpc.RpcError as e:
                code = e.code()  # type: ignore[attr-defined]
                assert code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND), (code, e.details())  # type: ignore[attr-defined]
                assert e.details()  # type: ignore[attr-defined]
                seen.add(code.name)

        check()
        assert {"INVALID_ARGUMENT", "NOT_FOUND"} <= seen
        wait_for(lambda: server.app.runtime.in_flight == 0, timeout_s=5.0)


def _text_scores(batch: np.ndarray) -> np.ndarray:
    """A classifier of text rows (BYTES): raises on "boom", quoting the row as real models' errors do."""
    for row in batch:
        if "boom" in str(row):
            raise ValueError(f"cannot read {row!r}")
    return np.tile([0.1, 0.2, 0.7], (len(batch), 1))


def test_the_gate_holds_for_grpc_and_a_models_text_stays_in_the_log(
    toy_profile: Profile, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="cascadeserve.http")
    models = ModelConfig({"m0": _text_scores, "m1": _text_scores}, InputSpec("text", "BYTES", (-1,)))
    with grpc_serving(toy_profile, models=models, backend=LocalBackend(), max_body_bytes=8 << 20) as server:
        c = client(server)

        def text(rows: list[str]) -> list[tg.InferInput]:
            return [_input("text", np.array(rows, dtype=object), "BYTES")]

        assert c.infer("toy", text(["fine", '{"prompt": "an item"}'])).as_numpy("label").tolist() == [2, 2]
        e = _refused(lambda: c.infer("toy", text(["boom secret-4711"])))
        assert e.status() == "StatusCode.INTERNAL" and "secret-4711" not in str(e.message()), e.message()
        found = re.search(r"model 'm0' failed on this request \(request id ([0-9a-f]{12})", str(e.message()))
        assert found is not None, e.message()
        wait_for(lambda: any(found.group(1) in m and "secret-4711" in m for m in caplog.messages))
        for row, named in (
            (json.dumps({"prompt": "hi", "options": ["a"] * 10_000}), "row[0].options"),
            (json.dumps({"prompt": "hi", "max_new_tokens": 2**70}), "row[0].max_new_tokens"),
        ):
            e = _refused(lambda row=row: c.infer("toy", text([row])))  # type: ignore[misc]
            assert e.status() == "StatusCode.INVALID_ARGUMENT" and named in str(e.message()), e.message()
        many = np.array([""] * (1_000_001), dtype=object)  # 4 MB of empty strings: a million Python objects
        e = _refused(lambda: c.infer("toy", [_input("text", many, "BYTES")]))
        assert e.status() == "StatusCode.INVALID_ARGUMENT" and "1000001 BYTES elements" in str(e.message())
        wait_for(lambda: server.app.runtime.in_flight == 0, timeout_s=5.0)
