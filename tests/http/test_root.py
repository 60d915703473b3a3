"""``GET /`` on a real server (127.0.0.1): the server's name and version, the cascades it serves and links to its
endpoints, every one of which answers when followed; HEAD too, other methods 405; the inference token guards it as
it guards ``GET /v2``; behind a repository serving several cascades it lists each one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.conftest import make_toy_profile
from tests.http.http_helpers import ADMIN, ADMIN_TOKEN, emulated_folder, serving, toy_plan

from cascadeserve import __version__
from cascadeserve.http import Server, ServerOptions, build_app
from cascadeserve.http.server import with_repository
from cascadeserve.profile import Profile
from cascadeserve.runtime import RuntimeOptions
from cascadeserve.workload.repository import ModelRepository, repository_builder

LINKS = {
    "live": "/v2/health/live",
    "ready": "/v2/health/ready",
    "server_metadata": "/v2",
    "metrics": "/metrics",
    "openapi": "/openapi.json",
    "openai_models": "/v1/models",
}


def _cascade(name: str) -> dict[str, str]:
    base = f"/v2/models/{name}"
    return {"name": name, "metadata": base, "ready": f"{base}/ready", "infer": f"{base}/infer"}


def _follow(url: str, doc: dict[str, object], headers: dict[str, str] | None = None) -> dict[str, int]:
    """The status of a GET of every link in the root document (the infer links take POST only: 405)."""
    links = dict(doc["links"])  # type: ignore[call-overload]
    for c in doc["cascades"]:  # type: ignore[attr-defined]
        links.update({f"{c['name']}.{k}": v for k, v in c.items() if k != "name"})
    return {k: httpx.get(url + p, headers=headers, timeout=30).status_code for k, p in links.items()}


@pytest.fixture(scope="module")
def server(toy_profile: Profile) -> Iterator[Server]:
    with serving(toy_profile) as s:
        yield s


def test_the_root_names_the_server_its_cascade_and_links_that_answer(server: Server) -> None:
    r = httpx.get(f"{server.url}/")
    assert (r.status_code, r.headers["content-type"]) == (200, "application/json")
    doc = r.json()
    assert doc == {"name": "cascadeserve", "version": __version__, "cascades": [_cascade("toy")], "links": LINKS}
    meta = httpx.get(f"{server.url}/v2").json()
    assert (meta["name"], meta["version"]) == (doc["name"], doc["version"])
    statuses = _follow(server.url, doc)
    assert statuses == {**dict.fromkeys(statuses, 200), "toy.infer": 405}


def test_head_answers_and_other_methods_are_405(server: Server) -> None:
    head = httpx.head(f"{server.url}/")
    assert (head.status_code, head.content) == (200, b"")
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        r = httpx.request(method, f"{server.url}/")
        assert (r.status_code, r.headers.get("allow"), r.json()) == (405, "GET, HEAD", {"error": "Method Not Allowed"})


def test_the_openapi_document_has_the_root(server: Server) -> None:
    doc = httpx.get(f"{server.url}/openapi.json").json()
    assert set(doc["paths"]["/"]) == {"get"}
    assert doc["paths"]["/"]["get"]["operationId"] == "get_root"


def test_the_inference_token_guards_it_as_it_guards_v2(toy_profile: Profile) -> None:
    with serving(toy_profile, auth_token="infer-token") as s:
        for path in ("/", "/v2"):
            r = httpx.get(f"{s.url}{path}")
            assert (r.status_code, r.headers.get("www-authenticate")) == (401, "Bearer"), path
        token = {"Authorization": "Bearer infer-token"}
        doc = httpx.get(f"{s.url}/", headers=token).json()
        assert doc["cascades"] == [_cascade("toy")]
        statuses = _follow(s.url, doc, token)
        assert statuses == {**dict.fromkeys(statuses, 200), "toy.infer": 405}


def test_a_repository_lists_every_cascade_it_serves(tmp_path: Path) -> None:
    emulated_folder(tmp_path, "b", make_toy_profile(n=300, seed=7))
    prof = make_toy_profile()
    opts = ServerOptions(stop_grace_s=2.0, admin_token=ADMIN_TOKEN)
    runtime = RuntimeOptions(max_in_flight=4096)
    app = build_app(prof, toy_plan(prof), emulate=True, name="a", runtime_options=runtime, server_options=opts)
    build = repository_builder(ModelRepository(tmp_path), runtime_options=runtime, server_options=opts)
    app = with_repository(app, opts, build)
    with Server(app, "127.0.0.1", 0, grace_s=2.0) as s:
        assert httpx.get(f"{s.url}/").json()["cascades"] == [_cascade("a")]
        params = {"emulate": True}
        repo = f"{s.url}/v2/repository/models/b"
        load = httpx.post(f"{repo}/load", json={"parameters": params}, headers=ADMIN, timeout=60)
        assert load.status_code == 200, load.text
        doc = httpx.get(f"{s.url}/").json()
        assert doc["cascades"] == [_cascade("a"), _cascade("b")] and doc["links"] == LINKS
        statuses = _follow(s.url, doc)
        assert statuses == {**dict.fromkeys(statuses, 200), "a.infer": 405, "b.infer": 405}
        assert httpx.post(f"{s.url}/").status_code == 405
        unload = httpx.post(f"{repo}/unload", headers=ADMIN, timeout=60)
        assert unload.status_code == 200, unload.text
        assert httpx.get(f"{s.url}/").json()["cascades"] == [_cascade("a")]
