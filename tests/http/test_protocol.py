"""Open Inference Protocol V2 through a real uvicorn server: tritonclient with its defaults, httpx with JSON."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from tests.http.http_helpers import ADMIN, metric, serving, toy_plan

from cascadeserve.http import Server
from cascadeserve.profile import Profile


@pytest.fixture(scope="module", params=["local", "ray"])
def server(toy_profile: Profile, request: pytest.FixtureRequest) -> Iterator[Server]:
    """One server per backend for the whole module (tritonclient against ``serve --backend ray`` too)."""
    backend = None
    if request.param == "ray":
        request.getfixturevalue("ray_session")
        from cascadeserve.backends.ray import RayBackend

        backend = RayBackend()
    with serving(toy_profile, max_body_bytes=4096, backend=backend) as s:
        yield s


def _infer_json(server: Server, ids: list[int], **params: object) -> httpx.Response:
    body = {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [len(ids)], "data": ids}]}
    if params:
        body["parameters"] = params
    return httpx.post(f"{server.url}/v2/models/toy/infer", json=body, timeout=10)


def test_health_and_metadata(server: Server) -> None:
    client = triton.InferenceServerClient(server.url.removeprefix("http://"))
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("toy")
    meta = client.get_model_metadata("toy")
    assert meta["inputs"] == [{"name": "sample_id", "datatype": "INT64", "shape": [-1, 1]}]  # Triton's [-1] + dims
    assert meta["parameters"]["emulated"] is True
    assert [(o["name"], o["shape"]) for o in meta["outputs"]] == [(n, [-1, 1]) for n in ("label", "certainty", "model")]
    assert httpx.get(f"{server.url}/v2").json()["extensions"][0] == "binary_tensor_data"


def test_tritonclient_defaults_binary_batch(server: Server, toy_profile: Profile) -> None:
    client = triton.InferenceServerClient(server.url.removeprefix("http://"))
    ids = np.array([0, 1, 2, 3, 4, 5], dtype=np.int64)
    inp = triton.InferInput("sample_id", [len(ids)], "INT64")
    inp.set_data_from_numpy(ids)  # binary_data=True by default
    res = client.infer("toy", [inp])
    labels = res.as_numpy("label")
    models = [m.decode() for m in res.as_numpy("model")]
    certs = res.as_numpy("certainty")
    assert len(labels) == 6 and set(models) <= {"m0", "m1"}
    for i, m in enumerate(models):
        row = toy_profile.index(m)
        assert labels[i] == toy_profile.predictions[row, i]
        assert certs[i] == pytest.approx(toy_profile.certainties[row, i], abs=1e-6)
        # m0 answers exactly when it is sure (threshold 0.5)
        assert (m == "m0") == (toy_profile.certainties[0, i] >= 0.5)
    params = res.get_response()["parameters"]
    assert params["emulated"] is True and params["gear"] == 0 and params["fallback"] is False
    assert params["compute_ms"] > 0


def test_json_infer(server: Server, toy_profile: Profile) -> None:
    r = _infer_json(server, [7, 8])
    assert r.status_code == 200, r.text
    out = {o["name"]: o["data"] for o in r.json()["outputs"]}
    assert len(out["label"]) == 2 and len(out["model"]) == 2
    assert r.json()["parameters"]["gears"] == "0,0"


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"{not json", 400, "malformed JSON"),
        (b"[1, 2]", 400, "body"),
        (b'{"inputs": []}', 400, "inputs"),
        (b'{"inputs": [{"name": "x", "datatype": "INT64", "shape": [1], "data": [1]}]}', 400, "'sample_id' is missing"),
        (b'{"inputs": [{"name": "sample_id", "datatype": "FP32", "shape": [1], "data": [1]}]}', 400, "datatype FP32"),
        (b'{"inputs": [{"name": "sample_id", "datatype": "INT9", "shape": [1], "data": [1]}]}', 400, "INT9"),
        (
            b'{"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1, 2], "data": [1, 2]}]}',
            400,
            "shape [1, 2] does not match [-1, 1] (or [-1])",
        ),
        (b'{"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1, 1, 1], "data": [1]}]}', 400, "shape"),
        (b'{"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [2], "data": [1]}]}', 400, "elements"),
        (b'{"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1], "data": [999999]}]}', 400, "999999"),
        (
            b'{"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1], "data": [1]}],'
            b' "parameters": {"timeout_ms": -3}}',
            400,
            "timeout_ms",
        ),
        (
            b'{"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1], "data": [1]}],'
            b' "outputs": [{"name": "nope"}]}',
            400,
            "nope",
        ),
    ],
)
def test_bad_input(server: Server, body: bytes, status: int, needle: str) -> None:
    r = httpx.post(f"{server.url}/v2/models/toy/infer", content=body, timeout=10)
    assert r.status_code == status
    assert needle in r.json()["error"]


def test_unknown_model_and_big_body(server: Server) -> None:
    r = httpx.post(f"{server.url}/v2/models/other/infer", content=b"{}", timeout=10)
    assert r.status_code == 404 and "other" in r.json()["error"]
    assert httpx.get(f"{server.url}/v2/models/other").status_code == 404
    big = b'{"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1], "data": [1]}], "pad": "' + b"x" * 8000
    r = httpx.post(f"{server.url}/v2/models/toy/infer", content=big + b'"}', timeout=10)
    assert r.status_code == 413 and "body" in r.json()["error"]
    assert httpx.get(f"{server.url}/nowhere").json()["error"]
    # the server still serves after all of that
    assert _infer_json(server, [1]).status_code == 200


def test_binary_header_errors(server: Server) -> None:
    head = (
        b'{"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [2], '
        b'"parameters": {"binary_data_size": 16}}]}'
    )
    r = httpx.post(
        f"{server.url}/v2/models/toy/infer",
        content=head + b"\x00" * 8,  # 8 bytes where 16 are announced
        headers={"Inference-Header-Content-Length": str(len(head))},
        timeout=10,
    )
    assert r.status_code == 400 and "binary_data_size" in r.json()["error"]


def test_metrics_and_plan_endpoints(server: Server, toy_profile: Profile) -> None:
    assert _infer_json(server, [1, 2, 3]).status_code == 200
    text = httpx.get(f"{server.url}/metrics").text
    for name in (
        "cascadeserve_admitted_total",
        "cascadeserve_answered_total",
        "cascadeserve_request_latency_seconds_bucket",
        "cascadeserve_batch_size_bucket",
        "cascadeserve_batch_seconds_bucket",
        "cascadeserve_batch_vs_profile_bucket",
        "cascadeserve_exits_total",
        "cascadeserve_queue_length",
        "cascadeserve_gear",
        "cascadeserve_gear_switches_total",
        "cascadeserve_shed_total",
    ):
        assert name in text, name
    assert metric(text, "cascadeserve_admitted_total") >= 3
    # every emulated batch is timed and compared with the profile it emulates
    batches = metric(text, "cascadeserve_batch_size_count")
    assert batches >= 1
    assert metric(text, "cascadeserve_batch_seconds_count") == metric(text, "cascadeserve_batch_vs_profile_count")
    assert metric(text, "cascadeserve_batch_seconds_count") == batches
    plan = httpx.get(f"{server.url}/v2/cascade/plan").json()
    assert plan["gears"][0]["models"] == ["m0", "m1"]
    bad = httpx.put(f"{server.url}/v2/cascade/plan", content=b'{"gears": 1}', headers=ADMIN, timeout=10)
    assert bad.status_code == 422 and "error" in bad.json()
    new = toy_plan(toy_profile, min_queue=2)
    ok = httpx.put(f"{server.url}/v2/cascade/plan", content=new.to_json().encode(), headers=ADMIN, timeout=10)
    assert ok.status_code == 200 and ok.json()["generation"] >= 1
    assert _infer_json(server, [4]).status_code == 200
