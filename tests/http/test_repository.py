"""Several cascades in one server and the repository API, over real HTTP on 127.0.0.1 with tritonclient unchanged:
a second cascade is loaded by name from a model repository folder while the first serves a stream of requests,
answers under its own name, shows in the index, the metrics (labelled by cascade) and /v1/models, and is unloaded;
the first cascade's stream is answered in full throughout. Bad load and unload requests name what is wrong; a load
never reads outside the repository, never echoes a file's text, and is off without a repository."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as th
from tests.conftest import make_toy_profile
from tests.http.http_helpers import ADMIN, ADMIN_TOKEN, emulated_folder, toy_plan

from cascadeserve.http import Server, ServerOptions, build_app
from cascadeserve.http.server import with_repository
from cascadeserve.profile import Profile
from cascadeserve.runtime import RuntimeOptions
from cascadeserve.workload.repository import ModelRepository, repository_builder

GRPC_ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}"}  # gRPC metadata keys are lower case
EMULATE = json.dumps({"emulate": True})  # tritonclient's load_model(name, config=...)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Profile]:
    """A model repository whose folder ``b`` serves a second toy profile, emulated."""
    repo = tmp_path_factory.mktemp("repository")
    prof = make_toy_profile(n=300, seed=7)
    emulated_folder(repo, "b", prof)
    return repo, prof


def _server(repo: Path | None, admin: str | None = ADMIN_TOKEN) -> Server:
    prof = make_toy_profile()
    opts = ServerOptions(stop_grace_s=2.0, admin_token=admin)
    runtime = RuntimeOptions(max_in_flight=4096)
    app = build_app(prof, toy_plan(prof), emulate=True, name="a", runtime_options=runtime, server_options=opts)
    build = (
        None
        if repo is None
        else repository_builder(ModelRepository(repo), runtime_options=runtime, server_options=opts)
    )
    app = with_repository(app, opts, build)
    return Server(app, "127.0.0.1", 0, grace_s=2.0).start()


@pytest.fixture()
def server(files: tuple[Path, Profile]) -> Iterator[Server]:
    s = _server(files[0])
    try:
        yield s
    finally:
        s.stop()


def _infer(url: str, name: str, sample: int) -> httpx.Response:
    body = {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1], "data": [sample]}]}
    return httpx.post(f"{url}/v2/models/{name}/infer", json=body, timeout=60)


def test_load_serve_and_unload_a_second_cascade_while_the_first_serves(
    server: Server, files: tuple[Path, Profile]
) -> None:
    second = files[1]
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
        client.load_model("b", headers=ADMIN, config=EMULATE)
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
        index = client.get_model_repository_index()  # Triton keeps an unloaded model, UNAVAILABLE
        assert [(m["name"], m.get("state"), m.get("reason")) for m in index] == [
            ("a", "READY", None),
            ("b", "UNAVAILABLE", "unloaded"),
        ]
        ready = httpx.post(f"{url}/v2/repository/index", json={"ready": True}, timeout=60).json()
        assert [m["name"] for m in ready] == ["a"]
    finally:
        stop.set()
        load.join(60)
    assert statuses and set(statuses) == {200}  # nothing the first cascade admitted was dropped
    text = httpx.get(f"{url}/metrics", timeout=60).text
    assert 'cascade="b"' not in text


def test_bad_load_and_unload_requests_name_what_is_wrong(server: Server, files: tuple[Path, Profile]) -> None:
    url = server.url

    def load(name: str, params: object, headers: dict[str, str] | None = ADMIN) -> httpx.Response:
        return httpx.post(
            f"{url}/v2/repository/models/{name}/load", json={"parameters": params}, headers=headers, timeout=60
        )

    good = {"emulate": True}
    assert load("b", good, headers=None).status_code == 401
    assert load("b", good, headers={"Authorization": "Bearer wrong"}).status_code == 403
    r = load("b", {"plan": "/etc/passwd", "emulate": True})  # the old API's server-side paths: refused, not read
    assert r.status_code == 400 and "parameters.plan: a load names a folder" in r.json()["error"]
    assert "/etc/passwd" not in r.text
    r = load("b", {**good, "colour": "red"})
    assert r.status_code == 400 and "parameters.colour: unknown" in r.json()["error"]
    r = load("zz", good)
    assert r.status_code == 400 and "no folder 'zz' in the model repository (it has b)" in r.json()["error"]
    r = load("..", good)
    assert r.status_code in (400, 404) and "passwd" not in r.text
    r = load("a", good)
    assert r.status_code == 409 and "model 'a' is the server's first cascade" in r.json()["error"]
    r = httpx.post(f"{url}/v2/repository/models/a/unload", headers=ADMIN, timeout=60)
    assert r.status_code == 409 and "the server's first cascade" in r.json()["error"]
    r = httpx.post(f"{url}/v2/repository/models/zz/unload", headers=ADMIN, timeout=60)
    assert r.status_code == 404 and "unknown model 'zz'" in r.json()["error"]
    assert _infer(url, "a", 1).status_code == 200  # and the served cascade is untouched


def test_a_load_reads_nothing_outside_the_repository_and_echoes_no_file(tmp_path: Path) -> None:
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    outside.mkdir()
    prof = make_toy_profile(n=300, seed=7)
    marker = tmp_path / "ran"
    evil = outside / "models.yaml"  # a models config that would run a shell command, outside the repository
    evil.write_text(
        "models:\n  - name: m0\n    adapter: callable\n    ref: os:system\n"
        f"    options: {{command: 'touch {marker}'}}\n"
    )
    (outside / "secret.txt").write_text("db_password: hunter2\n")
    for name in ("linked", "plan", "models", "yaml"):
        emulated_folder(repo, name, prof)
    os.symlink("/etc", repo / "etc")  # a folder that is a symlink out
    (repo / "plan" / "plan.json").unlink()
    os.symlink("/etc/passwd", repo / "plan" / "plan.json")
    os.symlink(evil, repo / "models" / "models.yaml")
    os.symlink(outside, repo / "linked" / "profile" / "more")  # a profile entry that leads out
    (repo / "yaml" / "models.yaml").write_text("models:\n  - name: m0\n    db_password: hunter2\n  bad: [\n")
    s = _server(repo)
    try:

        def load(name: str, params: object) -> httpx.Response:
            body = {"parameters": params}
            return httpx.post(f"{s.url}/v2/repository/models/{name}/load", json=body, headers=ADMIN, timeout=60)

        expected = {
            "etc": "etc: leads outside the model repository",
            "plan": "plan/plan.json: leads outside the model repository",
            "linked": "linked/profile/more: leads outside the model repository",
        }
        for name, message in expected.items():
            r = load(name, {"emulate": True})
            assert r.status_code == 400 and message in r.json()["error"], r.text
            assert "/etc" not in r.json()["error"] and str(outside) not in r.json()["error"]
        r = load("models", {})  # its models config is a symlink to the shell command
        assert r.status_code == 400 and "models/models.yaml: leads outside" in r.json()["error"], r.text
        r = load("models", {"models": str(evil)})
        assert r.status_code == 400 and "parameters.models: a load names a folder" in r.json()["error"]
        r = load("yaml", {})  # a parse error names the file and line, never the text there
        assert r.status_code == 400 and "yaml/models.yaml:4:3: invalid YAML" in r.json()["error"], r.text
        assert "hunter2" not in r.text and "db_password" not in r.text and str(repo) not in r.text
        assert not marker.exists()  # nothing ran
        assert [m["name"] for m in httpx.post(f"{s.url}/v2/repository/index", timeout=60).json()] == ["a"]
    finally:
        s.stop()


def test_without_an_admin_token_the_repository_is_read_only(files: tuple[Path, Profile]) -> None:
    s = _server(files[0], admin=None)
    try:
        r = httpx.post(f"{s.url}/v2/repository/models/b/load", json={}, timeout=60)
        assert r.status_code == 403 and "start the server with --admin-token" in r.json()["error"]
        assert httpx.post(f"{s.url}/v2/repository/index", timeout=60).json() == [
            {"name": "a", "version": "1", "state": "READY"}
        ]
    finally:
        s.stop()


def test_without_a_model_repository_the_load_api_is_off() -> None:
    s = _server(None)
    try:
        r = httpx.post(f"{s.url}/v2/repository/models/b/load", json={}, headers=ADMIN, timeout=60)
        assert r.status_code == 403 and "the load API is off" in r.json()["error"]
        assert "--model-repository" in r.json()["error"]
    finally:
        s.stop()


def test_grpc_loads_serves_and_unloads_a_second_cascade(files: tuple[Path, Profile]) -> None:
    import grpc
    import tritonclient.grpc as tg
    from tritonclient.utils import InferenceServerException

    from cascadeserve.grpc import GrpcFrontEnd

    prof = make_toy_profile()
    opts = ServerOptions(stop_grace_s=2.0, admin_token=ADMIN_TOKEN)
    app = build_app(prof, toy_plan(prof), emulate=True, name="a", server_options=opts, front_ends=[GrpcFrontEnd()])
    build = repository_builder(ModelRepository(files[0]), server_options=opts)
    s = Server(with_repository(app, opts, build), "127.0.0.1", 0, grace_s=2.0).start()
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
        with pytest.raises(InferenceServerException, match="needs 'Authorization: Bearer <token>'"):
            client.load_model("b", config=EMULATE)
        client.load_model("b", config=EMULATE, headers=GRPC_ADMIN)
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
