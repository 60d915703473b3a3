"""Several cascades in one server and the repository API, over real HTTP on 127.0.0.1 with tritonclient unchanged:
a second cascade is loaded from its plan and profile files while the first serves a stream of requests, answers
under its own name, shows in the index, the metrics (labelled by cascade) and /v1/models, and is unloaded; the
first cascade's stream is answered in full throughout. Bad load and unload requests name what is wrong."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as th
from tests.conftest import make_toy_profile
from tests.http.http_helpers import ADMIN, ADMIN_TOKEN, toy_plan

from cascadeserve.http import Server, ServerOptions, build_app
from cascadeserve.http.server import cascade_builder, with_repository
from cascadeserve.profile import Profile, save_profile
from cascadeserve.runtime import RuntimeOptions

GRPC_ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}"}  # gRPC metadata keys are lower case


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Profile]:
    """The second cascade's files: a profile directory and a plan."""
    d = tmp_path_factory.mktemp("second")
    prof = make_toy_profile(n=300, seed=7)
    save_profile(prof, d / "profile")
    toy_plan(prof).save(d / "plan.json")
    return d / "profile", d / "plan.json", prof


def _server(admin: str | None = ADMIN_TOKEN) -> Server:
    prof = make_toy_profile()
    opts = ServerOptions(stop_grace_s=2.0, admin_token=admin)
    runtime = RuntimeOptions(max_in_flight=4096)
    app = build_app(prof, toy_plan(prof), emulate=True, name="a", runtime_options=runtime, server_options=opts)
    app = with_repository(app, opts, cascade_builder(runtime_options=runtime, server_options=opts))
    return Server(app, "127.0.0.1", 0, grace_s=2.0).start()


@pytest.fixture()
def server() -> Iterator[Server]:
    s = _server()
    try:
        yield s
    finally:
        s.stop()


def _infer(url: str, name: str, sample: int) -> httpx.Response:
    body = {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1], "data": [sample]}]}
    return httpx.post(f"{url}/v2/models/{name}/infer", json=body, timeout=60)


def test_load_serve_and_unload_a_second_cascade_while_the_first_serves(
    server: Server, files: tuple[Path, Path, Profile]
) -> None:
    profile_dir, plan_file, second = files
    url = server.url
    statuses: list[int] = []
    stop = threading.Event()

    def stream() -> None:  # the first cascade under steady load the whole time
        with httpx.Client(timeout=60) as c:
            body = {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1], "data": [3]}]}
            while not stop.is_set():
                statuses.append(c.post(f"{url}/v2/models/a/infer", json=body).status_code)
                time.sleep(0.005)

    load = threading.Thread(target=stream)
    load.start()
    try:
        client = th.InferenceServerClient(url.removeprefix("http://"))
        assert [(m["name"], m["state"]) for m in client.get_model_repository_index()] == [("a", "READY")]
        config = json.dumps({"plan": str(plan_file), "profile": str(profile_dir), "emulate": True})
        client.load_model("b", headers=ADMIN, config=config)
        assert [(m["name"], m["state"]) for m in client.get_model_repository_index()] == [
            ("a", "READY"),
            ("b", "READY"),
        ]
        r = _infer(url, "b", 5)
        assert r.status_code == 200
        label = {o["name"]: o["data"] for o in r.json()["outputs"]}["label"]
        assert label[0] in set(second.predictions[:, 5].tolist())  # answered from b's own records
        assert client.is_model_ready("b") and client.get_model_metadata("b")["name"] == "b"
        text = httpx.get(f"{url}/metrics", timeout=60).text
        assert 'cascadeserve_admitted_total{cascade="a"}' in text and 'cascadeserve_admitted_total{cascade="b"}' in text
        stats = client.get_inference_statistics()["model_stats"]
        assert [m["name"] for m in stats] == ["a", "b"] and stats[1]["inference_count"] == 1
        models = httpx.get(f"{url}/v1/models", timeout=60).json()["data"]
        assert [m["id"] for m in models] == ["a", "b"]
        client.unload_model("b", headers=ADMIN)
        r = _infer(url, "b", 5)
        assert r.status_code == 404 and "unknown model 'b'; this server serves 'a'" in r.json()["error"]
        assert [m["name"] for m in client.get_model_repository_index()] == ["a"]
    finally:
        stop.set()
        load.join(60)
    assert statuses and set(statuses) == {200}  # nothing the first cascade admitted was dropped
    text = httpx.get(f"{url}/metrics", timeout=60).text
    assert 'cascade="b"' not in text


def test_bad_load_and_unload_requests_name_what_is_wrong(server: Server, files: tuple[Path, Path, Profile]) -> None:
    profile_dir, plan_file, _ = files
    url = server.url

    def load(name: str, params: object, headers: dict[str, str] | None = ADMIN) -> httpx.Response:
        return httpx.post(
            f"{url}/v2/repository/models/{name}/load", json={"parameters": params}, headers=headers, timeout=60
        )

    good = {"plan": str(plan_file), "profile": str(profile_dir), "emulate": True}
    assert load("b", good, headers=None).status_code == 401
    assert load("b", good, headers={"Authorization": "Bearer wrong"}).status_code == 403
    r = load("b", {"profile": str(profile_dir), "emulate": True})
    assert r.status_code == 400 and "model 'b': parameters.plan: a path on the server is required" in r.json()["error"]
    r = load("b", {**good, "colour": "red"})
    assert r.status_code == 400 and "parameters.colour: unknown" in r.json()["error"]
    r = load("b", {**good, "plan": str(plan_file.parent / "missing.json")})
    assert (
        r.status_code == 400 and "model 'b' did not load" in r.json()["error"] and "missing.json" in r.json()["error"]
    )
    r = load("a", good)
    assert r.status_code == 409 and "model 'a' is already served" in r.json()["error"]
    r = httpx.post(f"{url}/v2/repository/models/a/unload", headers=ADMIN, timeout=60)
    assert r.status_code == 409 and "the server's first cascade" in r.json()["error"]
    r = httpx.post(f"{url}/v2/repository/models/zz/unload", headers=ADMIN, timeout=60)
    assert r.status_code == 404 and "unknown model 'zz'" in r.json()["error"]
    assert _infer(url, "a", 1).status_code == 200  # and the served cascade is untouched


def test_without_an_admin_token_the_repository_is_read_only(files: tuple[Path, Path, Profile]) -> None:
    s = _server(admin=None)
    try:
        r = httpx.post(f"{s.url}/v2/repository/models/b/load", json={}, timeout=60)
        assert r.status_code == 403 and "start the server with --admin-token" in r.json()["error"]
        assert httpx.post(f"{s.url}/v2/repository/index", timeout=60).json() == [
            {"name": "a", "version": "1", "state": "READY"}
        ]
    finally:
        s.stop()


def test_grpc_loads_serves_and_unloads_a_second_cascade(files: tuple[Path, Path, Profile]) -> None:
    import grpc
    import tritonclient.grpc as tg
    from tritonclient.utils import InferenceServerException

    from cascadeserve.grpc import GrpcFrontEnd

    profile_dir, plan_file, _ = files
    prof = make_toy_profile()
    opts = ServerOptions(stop_grace_s=2.0, admin_token=ADMIN_TOKEN)
    app = build_app(prof, toy_plan(prof), emulate=True, name="a", server_options=opts, front_ends=[GrpcFrontEnd()])
    s = Server(with_repository(app, opts, cascade_builder(server_options=opts)), "127.0.0.1", 0, grace_s=2.0).start()
    answered: list[bool] = []
    stop = threading.Event()

    def stream() -> None:  # the first cascade under steady gRPC load the whole time
        c = tg.InferenceServerClient(f"127.0.0.1:{s.grpc_port}")
        one = tg.InferInput("sample_id", [1], "INT64")
        one.set_data_from_numpy(np.array([3], dtype=np.int64))
        while not stop.is_set():
            try:
                answered.append(c.infer("a", [one]).as_numpy("label").shape == (1,))
            except InferenceServerException:  # a refused or failed call counts against the test
                answered.append(False)
            time.sleep(0.005)

    load = threading.Thread(target=stream)
    load.start()
    try:
        client = tg.InferenceServerClient(f"127.0.0.1:{s.grpc_port}")
        config = json.dumps({"plan": str(plan_file), "profile": str(profile_dir), "emulate": True})
        with pytest.raises(InferenceServerException, match="needs 'Authorization: Bearer <token>'"):
            client.load_model("b", config=config)
        client.load_model("b", config=config, headers=GRPC_ADMIN)
        index = client.get_model_repository_index(as_json=True)["models"]
        assert [(m["name"], m["state"]) for m in index] == [("a", "READY"), ("b", "READY")]
        x = tg.InferInput("sample_id", [2], "INT64")
        x.set_data_from_numpy(np.array([1, 2], dtype=np.int64))
        assert client.infer("b", [x]).as_numpy("model").tolist()  # answered by b
        assert client.get_model_metadata("b").name == "b" and client.is_model_ready("b")
        with pytest.raises(InferenceServerException) as e:
            client.unload_model("a", headers=GRPC_ADMIN)
        assert e.value.status() == str(grpc.StatusCode.FAILED_PRECONDITION) and "first cascade" in e.value.message()
        client.unload_model("b", headers=GRPC_ADMIN)
        assert not client.is_model_ready("b")
        with pytest.raises(InferenceServerException, match="unknown model 'b'"):
            client.infer("b", [x])
    finally:
        stop.set()
        load.join(60)
        s.stop()
    assert answered and all(answered)  # every call to the first cascade answered across the load and unload
