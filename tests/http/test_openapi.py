"""The OpenAPI document covers every route, and schemathesis, fuzzing from it against a real uvicorn server on
loopback, finds no server error (bounded: a few examples per operation, so the run stays within seconds)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from starlette.routing import Route
from tests.http.http_helpers import ADMIN, serving

from cascadeserve.http import Server
from cascadeserve.http.app import ROUTERS
from cascadeserve.profile import Profile
from cascadeserve.runtime import LocalBackend

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.checks import not_a_server_error  # noqa: E402


@pytest.fixture(scope="module")
def server(toy_profile: Profile) -> Iterator[Server]:
    with serving(toy_profile, backend=LocalBackend()) as s:
        yield s


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
    assert len(ROUTERS) == 6  # health, models, plans, costs, OpenAI, metrics: a new router is picked up the same way


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
