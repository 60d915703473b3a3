"""The gRPC front end driven by ``tritonclient.grpc`` unchanged, beside the HTTP one on the same runtime: health,
metadata, config, repository index, inference (the same answers as over HTTP, raw and typed contents; streamed),
statistics (the numbers of HTTP's /stats), and the RPCs it does not implement."""

from __future__ import annotations

import queue

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
from tests.grpc.grpc_helpers import client, grpc_serving, stub
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from cascadeserve.profile import Profile

ROWS = np.array([0, 1, 2, 3, 4, 5, 6, 7], dtype=np.int64)


def _grpc_infer(c: tg.InferenceServerClient, rows: np.ndarray, **kwargs: object) -> tg.InferResult:
    inp = tg.InferInput("sample_id", [len(rows)], "INT64")
    inp.set_data_from_numpy(rows)
    return c.infer("toy", [inp], **kwargs)  # type: ignore[arg-type]


def test_health_metadata_config_and_repository_index(toy_profile: Profile) -> None:
    with grpc_serving(toy_profile) as server:
        c = client(server)
        assert c.is_server_live() and c.is_server_ready()
        assert c.is_model_ready("toy") and c.is_model_ready("toy", "1")
        assert not c.is_model_ready("nope")  # as Triton: an unknown model is not ready (tritonclient.http: 404)
        meta = c.get_server_metadata(as_json=True)
        assert meta["name"] == "cascadeserve" and "statistics" in meta["extensions"]
        model = c.get_model_metadata("toy", as_json=True)
        http_model = httpx.get(f"{server.url}/v2/models/toy").json()
        assert model["platform"] == "cascadeserve" and model["versions"] == ["1"]
        # Triton's [-1] + config dims [1]; int64 as JSON text
        assert model["inputs"] == [{"name": "sample_id", "datatype": "INT64", "shape": ["-1", "1"]}]
        assert [(o["name"], o["datatype"]) for o in model["outputs"]] == [
            (o["name"], o["datatype"]) for o in http_model["outputs"]
        ]
        config = c.get_model_config("toy", as_json=True)["config"]
        assert config["name"] == "toy" and config["platform"] == "cascadeserve"
        assert config["max_batch_size"] == server.app.runtime.admission_policy.limit == 4096
        assert config["input"][0]["name"] == "sample_id" and config["input"][0]["data_type"] == "TYPE_INT64"
        assert [o["name"] for o in config["output"]] == ["label", "certainty", "model"]
        http_config = th.InferenceServerClient(server.url.removeprefix("http://")).get_model_config("toy")
        assert http_config["max_batch_size"] == 4096 and http_config["input"] == [
            {"name": "sample_id", "data_type": "TYPE_INT64", "dims": [1], "reshape": {}}
        ]
        assert http_config["parameters"]["models"] == config["parameters"]["models"] == {"string_value": "m0,m1"}
        assert config["parameters"]["gears"] == {"string_value": str(len(server.app.runtime.plan.gears))}
        index = c.get_model_repository_index(as_json=True)
        assert index["models"] == [{"name": "toy", "version": "1", "state": "READY"}]


def test_infer_answers_as_http_does(toy_profile: Profile) -> None:
    with grpc_serving(toy_profile) as server:
        result = _grpc_infer(client(server), ROWS, request_id="r1")
        http = th.InferenceServerClient(server.url.removeprefix("http://"))
        inp = th.InferInput("sample_id", [len(ROWS)], "INT64")
        inp.set_data_from_numpy(ROWS)
        expected = http.infer("toy", [inp])
        for name in ("label", "certainty", "model"):
            np.testing.assert_array_equal(result.as_numpy(name), expected.as_numpy(name))
        response = result.get_response(as_json=True)
        assert response["id"] == "r1" and response["model_name"] == "toy" and response["model_version"] == "1"
        params = response["parameters"]
        assert params["emulated"] == {"bool_param": True} and params["fallback"] == {"bool_param": False}
        assert "gear" in params and params["server_ms"]["double_param"] >= 0
        assert params["gears"]["string_param"].count(",") == len(ROWS) - 1


def test_typed_contents_and_requested_outputs(toy_profile: Profile) -> None:
    """Inputs in ``contents.int64_contents`` (not raw) answer as raw ones do; ``outputs`` picks what comes back."""
    with grpc_serving(toy_profile) as server, stub(server) as s:
        raw = _grpc_infer(client(server), ROWS[:3])
        request = service_pb2.ModelInferRequest(model_name="toy")
        tensor = request.inputs.add(name="sample_id", datatype="INT64", shape=[3])
        tensor.contents.int64_contents.extend(ROWS[:3].tolist())
        request.outputs.add(name="label")
        request.outputs.add(name="model")
        response = s.ModelInfer(request, timeout=20)
        assert [o.name for o in response.outputs] == ["label", "model"]
        labels = np.frombuffer(response.raw_output_contents[0], dtype="<i8")
        np.testing.assert_array_equal(labels, raw.as_numpy("label"))
        request.outputs.add(name="nope")
        with pytest.raises(Exception) as err:
            s.ModelInfer(request, timeout=20)
        assert err.value.code().name == "INVALID_ARGUMENT" and "'nope'" in err.value.details()  # type: ignore[attr-defined]


def test_a_stream_answers_each_request_by_id_and_a_refused_one_by_error(toy_profile: Profile) -> None:
    with grpc_serving(toy_profile) as server:
        c = client(server)
        expected = _grpc_infer(c, ROWS[:4]).as_numpy("label")
        got: queue.Queue[tuple[object, object]] = queue.Queue()
        c.start_stream(callback=lambda result, error: got.put((result, error)))
        try:
            for i in range(4):
                inp = tg.InferInput("sample_id", [1], "INT64")
                inp.set_data_from_numpy(ROWS[i : i + 1])
                c.async_stream_infer("toy", [inp], request_id=str(i))
            bad = tg.InferInput("sample_id", [1], "FP32")
            bad.set_data_from_numpy(np.array([1.0], dtype=np.float32))
            c.async_stream_infer("toy", [bad], request_id="bad")
            answers = [got.get(timeout=20) for _ in range(5)]
        finally:
            c.stop_stream()
        labels = {}
        errors = []
        for result, error in answers:
            if error is not None:
                errors.append(str(error))
            else:
                response = result.get_response()  # type: ignore[attr-defined]
                labels[response.id] = int(result.as_numpy("label")[0])  # type: ignore[attr-defined]
        assert labels == {str(i): int(expected[i]) for i in range(4)}
        assert len(errors) == 1 and "datatype FP32, expected INT64" in errors[0]
        assert server.app.runtime.in_flight == 0


def test_statistics_are_the_http_numbers_and_count_up(toy_profile: Profile) -> None:
    with grpc_serving(toy_profile) as server:
        c = client(server)
        before = c.get_inference_statistics("toy", as_json=True)["model_stats"][0]
        _grpc_infer(c, ROWS)
        after = c.get_inference_statistics("toy", as_json=True)["model_stats"][0]
        every = c.get_inference_statistics(as_json=True)["model_stats"]  # no name: every model (the one served)
        http = httpx.get(f"{server.url}/v2/models/toy/stats").json()["model_stats"][0]
        assert int(after["inference_count"]) - int(before.get("inference_count", 0)) == len(ROWS)
        assert int(after["execution_count"]) > int(before.get("execution_count", 0))
        assert int(after["inference_count"]) == http["inference_count"]
        assert int(after["execution_count"]) == http["execution_count"]
        assert int(after["inference_stats"]["success"]["ns"]) == http["inference_stats"]["success"]["ns"]
        assert [m["name"] for m in every] == ["toy"]


def test_rpcs_it_does_not_serve_answer_unimplemented_saying_why(toy_profile: Profile) -> None:
    with grpc_serving(toy_profile) as server:
        with pytest.raises(InferenceServerException) as err:
            client(server).register_cuda_shared_memory("c", b"\0" * 64, 0, 64)
        assert err.value.status() == "StatusCode.UNIMPLEMENTED"
        assert (
            "CudaSharedMemoryRegister is not implemented: CUDA shared memory is not served: this server has no GPU"
            in (str(err.value.message()))
        )
        assert "repository" not in str(err.value.message())  # the repository RPCs are served
