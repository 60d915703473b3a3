"""The OpenAPI document covers every route and tells the truth: schemathesis with every check (its CLI, as a user
runs it, with the repository's schemathesis.toml) finds no failure against a real uvicorn server on loopback, with
an admin token or with an inference token too; 405 names the path's methods in Allow. Bounded: a few seeded examples
per operation, so each run stays within seconds."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from starlette.routing import Route
from tests.http.http_helpers import ADMIN, ADMIN_TOKEN, serving

from cascadeserve.http import Server
from cascadeserve.http.app import ROUTERS
from cascadeserve.http.logsettings import LOG
from cascadeserve.profile import Profile
from cascadeserve.runtime import LocalBackend

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.checks import not_a_server_error  # noqa: E402


@pytest.fixture(scope="module")
def server(toy_profile: Profile) -> Iterator[Server]:
    before = {k: v for k, v in LOG.snapshot().items() if k != "log_file"}
    with serving(toy_profile, backend=LocalBackend()) as s:
        yield s
    LOG.update(before)  # the fuzzers change the process's log settings (POST /v2/logging) as they go


def test_every_route_is_in_the_document(server: Server) -> None:
    doc = httpx.get(f"{server.url}/openapi.json").json()
    assert doc == httpx.get(f"{server.url}/v2/openapi.json").json()
    app = server.app.asgi.app  # type: ignore[attr-defined]
    for route in app.routes:
        assert isinstance(route, Route)
        for method in route.methods - {"HEAD"}:
            assert method.lower() in doc["paths"][route.path], (route.path, method)
    infer = doc["paths"]["/v2/models/{name}/infer"]["post"]
    assert infer["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/InferRequest"
    }
    assert {"400", "413", "503"} <= set(infer["responses"])
    assert doc["paths"]["/v2/cascade/plan"]["put"]["security"] == [{"bearer": []}]
    assert len(ROUTERS) == 10  # root, health, models, repository, plans, costs, OpenAI, metrics, settings, shm
    assert set(doc["paths"]["/v2/repository/index"]) == {"get", "post"}


def test_schemathesis_finds_no_server_error(server: Server) -> None:
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    operations = [op.ok() for op in schema.get_all_operations()]
    assert len(operations) >= 14
    seen: list[int] = []
    for op in operations:
        _fuzz(op, server, ADMIN if op.method.upper() == "PUT" else {}, seen)
    assert seen and max(seen) < 500, sorted(set(seen))
    assert server.app.runtime.in_flight == 0


def _fuzz(op: object, server: Server, headers: dict[str, str], seen: list[int]) -> None:
    @settings(
        max_examples=12,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=op.as_strategy())  # type: ignore[attr-defined]
    def check(case: object) -> None:
        response = case.call(base_url=server.url, headers=headers, timeout=20)  # type: ignore[attr-defined]
        seen.append(response.status_code)
        case.validate_response(response, checks=[not_a_server_error])  # type: ignore[attr-defined]

    check()


SCHEMATHESIS_PATIENCE_S = 600.0
ROOT = Path(__file__).resolve().parents[2]  # where schemathesis.toml is (the CLI reads it from its working directory)
CLI = Path(sys.executable).with_name("schemathesis")


def _schemathesis_all_checks(url: str, token: str) -> subprocess.CompletedProcess[str]:
    """Run the schemathesis CLI with every check; its output goes to a file so that a run stopped by the timeout
    still shows how far it got (beside 8 busy loops a run took minutes, against 6 s on a quiet machine)."""
    cmd = [str(CLI), "run", f"{url}/openapi.json", "--checks", "all", "-H", f"Authorization: Bearer {token}"]
    cmd += ["--max-examples", "8", "--seed", "0", "--generation-deterministic", "--workers", "1", "--no-color"]
    cmd += ["--request-timeout", "120"]  # a request that hangs fails as such instead of stalling the run
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True)
        try:
            code = proc.wait(timeout=SCHEMATHESIS_PATIENCE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            out.seek(0)
            pytest.fail(f"schemathesis ran past {SCHEMATHESIS_PATIENCE_S:.0f} s; its output:\n{out.read()[-6000:]}")
        out.seek(0)
        return subprocess.CompletedProcess(cmd, code, out.read(), "")


@pytest.mark.skipif(not CLI.exists(), reason="the schemathesis CLI is not installed beside this Python")
@pytest.mark.timeout(900)
def test_schemathesis_all_checks_admin_token(server: Server) -> None:
    """Admin token only: PUT /v2/cascade/plan is the one secured operation; everything else is open."""
    run = _schemathesis_all_checks(server.url, ADMIN_TOKEN)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert server.app.runtime.in_flight == 0


@pytest.mark.skipif(not CLI.exists(), reason="the schemathesis CLI is not installed beside this Python")
@pytest.mark.timeout(900)
def test_schemathesis_all_checks_inference_token(toy_profile: Profile) -> None:
    """An inference token too: every operation but the health probes and the document needs it (401 without)."""
    with serving(toy_profile, backend=LocalBackend(), auth_token="infer-token") as s:
        doc = httpx.get(f"{s.url}/openapi.json").json()
        secured = {(p, m) for p, ops in doc["paths"].items() for m, op in ops.items() if "security" in op}
        assert ("/v2/health/live", "get") not in secured and ("/openapi.json", "get") not in secured
        assert {("/v2/models/{name}/infer", "post"), ("/v1/chat/completions", "post"), ("/{app}/predict", "post")} <= (
            secured
        )
        assert httpx.post(f"{s.url}/toy/predict", json={"input": 0}).status_code == 401
        run = _schemathesis_all_checks(s.url, "infer-token")
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]


def test_405_names_every_method_of_the_path(server: Server) -> None:
    doc = httpx.get(f"{server.url}/openapi.json").json()
    assert set(doc["paths"]["/v2/cascade/plan"]) == {"get", "put"}
    assert "security" not in doc["paths"]["/v2/cascade/plan"]["get"]  # no inference token on this server
    for method in ("DELETE", "OPTIONS", "TRACE", "PATCH"):
        r = httpx.request(method, f"{server.url}/v2/cascade/plan")
        assert (r.status_code, r.headers.get("allow")) == (405, "GET, HEAD, PUT"), method
        assert r.json() == {"error": "Method Not Allowed"}
    for path in ("/v2/models/toy/infer", "/v2/models/toy/versions/1/infer"):  # the fast path's (POST only)
        r = httpx.get(f"{server.url}{path}")
        assert (r.status_code, r.headers.get("allow")) == (405, "POST")
    r = httpx.put(f"{server.url}/v2/health/live")
    assert (r.status_code, r.headers.get("allow")) == (405, "GET, HEAD")
