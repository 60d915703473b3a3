"""Triton's ``nv_inference_*`` counters on ``GET /metrics``, exact after known traffic over a real server (HTTP and
gRPC), under Triton's names and labels, and per cascade behind a model repository."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
from tests.conftest import make_toy_profile
from tests.grpc.grpc_helpers import client as grpc_client
from tests.grpc.grpc_helpers import grpc_serving
from tests.http.http_helpers import ADMIN, ADMIN_TOKEN, emulated_folder, toy_plan

from cascadeserve.http import Server, ServerOptions, build_app
from cascadeserve.http.server import with_repository
from cascadeserve.http.triton_metrics import TRITON_METRICS, RequestCounts
from cascadeserve.profile import Profile
from cascadeserve.runtime import RuntimeOptions
from cascadeserve.workload.repository import ModelRepository, repository_builder

EMULATE = {"parameters": {"emulate": True}}  # the folder has a plan and a profile: it answers from the profile
_SAMPLE = re.compile(r"^(nv_inference_\w+)\{([^}]*)\} (\S+)$", re.M)


def _series(text: str) -> dict[tuple[str, str], float]:
    """Each nv_inference_* sample: (name, its labels as written) -> value."""
    return {(m.group(1), m.group(2)): float(m.group(3)) for m in _SAMPLE.finditer(text)}


def _value(text: str, name: str, model: str = "toy", reason: str | None = None) -> float:
    labels = f'model="{model}",version="1"' if reason is None else f'model="{model}",reason="{reason}",version="1"'
    return _series(text)[(name, labels)]


@pytest.fixture(scope="module")
def server(toy_profile: Profile) -> Iterator[Server]:
    with grpc_serving(toy_profile) as s:
        yield s


def _us(parameters: dict[str, float], key: str) -> int:
    return int(parameters[key] * 1000.0)  # what the server adds per call: the response's figure in whole µs


def test_counts_and_durations_are_exact_after_known_traffic(server: Server) -> None:
    before = httpx.get(f"{server.url}/metrics").text
    http = th.InferenceServerClient(server.url.removeprefix("http://"))
    grpc = grpc_client(server)
    params: list[dict[str, float]] = []
    rows = 0
    for i, batch in enumerate([1, 3, 2]):  # N = 3 successful calls over HTTP, 6 rows, distinct (no cache hit)
        ids = np.arange(10 * i, 10 * i + batch, dtype=np.int64)
        inp = th.InferInput("sample_id", [batch], "INT64")
        inp.set_data_from_numpy(ids)
        params.append(http.infer("toy", [inp]).get_response()["parameters"])
        rows += batch
    ginp = tg.InferInput("sample_id", [2, 1], "INT64")  # and one over gRPC, 2 rows
    ginp.set_data_from_numpy(np.array([[40], [41]], dtype=np.int64))
    gres = grpc.infer("toy", [ginp]).get_response()
    params.append({k: v.double_param for k, v in gres.parameters.items() if k.endswith("_ms")})
    rows += 2
    assert not any(p.get("cached") for p in params)
    # M = 3 failed calls that reached the cascade: an id that is no validation sample, a wrong datatype (HTTP), a
    # wrong datatype (gRPC); and two that never did: a body that is no JSON, a model this server does not serve
    bad = {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1], "data": [10**9]}]}
    assert httpx.post(f"{server.url}/v2/models/toy/infer", json=bad).status_code == 400
    fp = {"inputs": [{"name": "sample_id", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    assert httpx.post(f"{server.url}/v2/models/toy/infer", json=fp).status_code == 400
    with pytest.raises(tg.InferenceServerException):
        gbad = tg.InferInput("sample_id", [1], "INT32")
        gbad.set_data_from_numpy(np.array([1], dtype=np.int32))
        grpc.infer("toy", [gbad])
    assert httpx.post(f"{server.url}/v2/models/toy/infer", content=b"{not json").status_code == 400
    assert httpx.post(f"{server.url}/v2/models/other/infer", json=fp).status_code == 404

    after = httpx.get(f"{server.url}/metrics").text
    stats = httpx.get(f"{server.url}/v2/models/toy/stats").json()["model_stats"][0]

    def grew(name: str, reason: str | None = None) -> float:
        return _value(after, name, reason=reason) - _value(before, name, reason=reason)

    assert grew("nv_inference_request_success") == 4
    assert grew("nv_inference_request_failure", "OTHER") == 3
    assert all(grew("nv_inference_request_failure", r) == 0 for r in ("REJECTED", "CANCELED", "BACKEND"))
    assert grew("nv_inference_count") == rows == 8
    # every batch any stage ran: the statistics extension's execution_count, and the batch-size histogram's count
    assert _value(after, "nv_inference_exec_count") == stats["execution_count"] > 0
    batches = sum(float(v) for v in re.findall(r"^cascadeserve_batch_size_count\{[^}]*\} (\S+)$", after, re.M))
    assert _value(after, "nv_inference_exec_count") == batches
    assert grew("nv_inference_request_duration_us") == sum(_us(p, "server_ms") for p in params)
    assert grew("nv_inference_queue_duration_us") == sum(_us(p, "queue_ms") for p in params)
    assert grew("nv_inference_compute_infer_duration_us") == sum(_us(p, "compute_ms") for p in params)


def test_triton_names_types_and_labels(server: Server) -> None:
    text = httpx.get(f"{server.url}/metrics").text
    for name, doc in TRITON_METRICS.items():
        assert f"# HELP {name} {doc}\n# TYPE {name} counter\n" in text, name
        assert f"{name}_total" not in text
    labels = {labels for (name, labels) in _series(text)}
    assert labels == {'model="toy",version="1"'} | {
        f'model="toy",reason="{r}",version="1"' for r in ("BACKEND", "CANCELED", "OTHER", "REJECTED")
    }
    assert "cascadeserve_admitted_total" in text  # the project's own beside them


def test_every_cascade_of_a_repository_has_its_series(tmp_path: Path) -> None:
    prof = make_toy_profile()
    emulated_folder(tmp_path, "second", prof)
    opts = ServerOptions(stop_grace_s=2.0, admin_token=ADMIN_TOKEN)
    runtime = RuntimeOptions(max_in_flight=4096)
    app = build_app(prof, toy_plan(prof), emulate=True, name="toy", runtime_options=runtime, server_options=opts)
    build = repository_builder(ModelRepository(tmp_path), runtime_options=runtime, server_options=opts)
    with Server(with_repository(app, opts, build), "127.0.0.1", 0, grace_s=2.0) as server:
        assert httpx.post(f"{server.url}/v2/repository/models/second/load", headers=ADMIN, json=EMULATE).is_success
        body = {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1], "data": [3]}]}
        assert httpx.post(f"{server.url}/v2/models/second/infer", json=body).status_code == 200
        text = httpx.get(f"{server.url}/metrics").text
    assert _value(text, "nv_inference_request_success", "second") == 1
    assert _value(text, "nv_inference_request_success", "toy") == 0
    assert text.count("# TYPE nv_inference_count counter") == 1
    assert not any("cascade=" in labels for (_, labels) in _series(text))  # Triton's labels only
    assert 'cascadeserve_admitted_total{cascade="second"} 1.0' in text  # the project's own keep theirs


def test_failure_reasons_follow_the_status() -> None:
    counts = RequestCounts()
    for status in (503, 499, 500, 502, 400, 413, 504):
        counts.failed(status)
    assert counts.failures == {"REJECTED": 1, "CANCELED": 1, "BACKEND": 2, "OTHER": 3}
