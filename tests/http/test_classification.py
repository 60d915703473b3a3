"""Triton's classification extension over a real server: ``certainty`` asked with a class count comes back as
``"<score>:<class>[:<name>]"`` strings, shape ``[rows, 1]`` (a cascade answers each row with one class), through
tritonclient.http (binary and JSON) and tritonclient.grpc; a bad count or another output is a 400 naming it."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
from tests.grpc.grpc_helpers import client, grpc_serving, stub
from tests.http.http_helpers import serving
from tritonclient.grpc import service_pb2

from cascadeserve.http import Server
from cascadeserve.profile import Profile
from cascadeserve.runtime import load_model_config

NAMES = ["negative", "neutral", "positive"]
MODELS_YAML = """
input: {name: x, datatype: FP32, shape: [-1, 1]}
labels: [negative, neutral, positive]
models:
  - {name: m0, adapter: callable, ref: "tests.http.label_models:class_of_input"}
  - {name: m1, adapter: callable, ref: "tests.http.label_models:class_of_input"}
"""
WHERE = "outputs[0].parameters.classification"


@pytest.fixture(scope="module")
def server(toy_profile: Profile, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    path = tmp_path_factory.mktemp("classes") / "models.yaml"
    path.write_text(MODELS_YAML)
    with grpc_serving(toy_profile, models=load_model_config(path)) as s:
        yield s


def _post(server: Server, xs: list[float], outputs: list[dict[str, object]]) -> httpx.Response:
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [len(xs), 1], "data": xs}], "outputs": outputs}
    return httpx.post(f"{server.url}/v2/models/toy/infer", json=body, timeout=30)


def _expected(server: Server, xs: list[float]) -> list[str]:
    """Each row's ``"<certainty %f>:<label>:<name>"``, from the plain outputs of the same rows."""
    plain = {
        o["name"]: o["data"] for o in _post(server, xs, [{"name": "label"}, {"name": "certainty"}]).json()["outputs"]
    }
    return [
        f"{float(np.float32(c)):f}:{lab}:{NAMES[lab]}"
        for c, lab in zip(plain["certainty"], plain["label"], strict=True)
    ]


def test_tritonclient_http_class_count(server: Server) -> None:
    xs = [1.0, 2.0, 3.0, 7.0]
    http = th.InferenceServerClient(server.url.removeprefix("http://"))
    x = th.InferInput("x", [len(xs), 1], "FP32")
    x.set_data_from_numpy(np.array(xs, dtype=np.float32).reshape(-1, 1))
    res = http.infer("toy", [x], outputs=[th.InferRequestedOutput("certainty", class_count=3)])  # binary
    got = res.as_numpy("certainty")
    assert got.shape == (4, 1) and res.get_output("certainty")["datatype"] == "BYTES"
    assert [s.decode() for s in got.ravel()] == _expected(server, xs)
    assert got[0, 0].decode().endswith(":1:neutral")  # x = 1: class 1, named neutral


def test_json_classification_beside_plain_outputs(server: Server) -> None:
    xs = [5.0, 6.0]
    r = _post(server, xs, [{"name": "certainty", "parameters": {"classification": 1}}, {"name": "label"}])
    assert r.status_code == 200, r.text
    outs = {o["name"]: o for o in r.json()["outputs"]}
    assert outs["certainty"]["datatype"] == "BYTES" and outs["certainty"]["shape"] == [2, 1]
    assert outs["certainty"]["data"] == _expected(server, xs)
    assert outs["label"]["data"] == [2, 0]  # the other outputs as ever
    # 0 asks for the plain output, as tritonclient's default class_count does
    plain = _post(server, xs, [{"name": "certainty", "parameters": {"classification": 0}}]).json()["outputs"][0]
    assert plain["datatype"] == "FP32"


def test_tritonclient_grpc_class_count(server: Server) -> None:
    g = tg.InferInput("x", [2, 1], "FP32")
    g.set_data_from_numpy(np.array([[4.0], [8.0]], dtype=np.float32))
    res = client(server).infer("toy", [g], outputs=[tg.InferRequestedOutput("certainty", class_count=2)])
    got = res.as_numpy("certainty")
    assert got.shape == (2, 1)
    assert [s.decode() for s in got.ravel()] == _expected(server, [4.0, 8.0])


@pytest.mark.parametrize("k", [-1, "2", 1.5, True, None])
def test_a_bad_count_is_refused_naming_the_parameter(server: Server, k: object) -> None:
    r = _post(server, [1.0], [{"name": "certainty", "parameters": {"classification": k}}])
    assert r.status_code == 400
    assert r.json()["error"] == f"{WHERE}: expected a non-negative integer (how many classes to return), got {k!r}"


def test_other_outputs_do_not_classify(server: Server) -> None:
    r = _post(server, [1.0], [{"name": "label", "parameters": {"classification": 1}}])
    assert r.status_code == 400
    assert r.json()["error"].startswith("outputs: output 'label' cannot be classified")
    with pytest.raises(tg.InferenceServerException) as e:
        g = tg.InferInput("x", [1, 1], "FP32")
        g.set_data_from_numpy(np.array([[1.0]], dtype=np.float32))
        client(server).infer("toy", [g], outputs=[tg.InferRequestedOutput("model", class_count=1)])
    assert "output 'model' cannot be classified" in e.value.message()


def test_grpc_bad_counts_are_invalid_argument(server: Server) -> None:
    def ask(param: service_pb2.InferParameter) -> grpc.RpcError:
        req = service_pb2.ModelInferRequest(model_name="toy")
        req.inputs.add(name="x", datatype="FP32", shape=[1, 1])
        req.raw_input_contents.append(np.array([1.0], dtype=np.float32).tobytes())
        out = req.outputs.add(name="certainty")
        out.parameters["classification"].CopyFrom(param)
        with stub(server) as s, pytest.raises(grpc.RpcError) as e:
            s.ModelInfer(req)
        return e.value

    err = ask(service_pb2.InferParameter(int64_param=-2))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details() == f"{WHERE}: expected a non-negative integer (how many classes to return), got -2"
    err = ask(service_pb2.InferParameter(string_param="2"))
    assert (err.code(), err.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        f"{WHERE}: expected an int64_param, got string_param",
    )


def test_without_class_names_the_label_part_is_left_out(toy_profile: Profile) -> None:
    with serving(toy_profile) as s:
        body = {
            "inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [3], "data": [0, 1, 2]}],
            "outputs": [{"name": "certainty", "parameters": {"classification": 5}}, {"name": "label"}],
        }
        outs = {o["name"]: o["data"] for o in httpx.post(f"{s.url}/v2/models/toy/infer", json=body).json()["outputs"]}
        plain = {**body, "outputs": [{"name": "certainty"}]}
        certs = httpx.post(f"{s.url}/v2/models/toy/infer", json=plain).json()["outputs"][0]["data"]
    assert outs["certainty"] == [f"{float(np.float32(c)):f}:{lab}" for c, lab in zip(certs, outs["label"], strict=True)]
