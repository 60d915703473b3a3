"""Hypothesis over sequences of good and bad requests, sent concurrently to one real server: every request gets
exactly one response with the status its kind calls for, the server answers every row it admitted exactly once
(its counters agree), and nothing is left in flight."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from tests.http.http_helpers import metric, serving

from cascadeserve.http import Server
from cascadeserve.profile import Profile
from cascadeserve.runtime import InputSpec, LocalBackend, ModelConfig, RuntimeOptions


def _m0(batch: np.ndarray) -> np.ndarray:
    if np.any(batch[:, 1] < -100):
        raise RuntimeError("m0 refuses x1 < -100")
    x = batch[:, :1].astype(np.float64)
    sure = np.where(x > 0.5, 1.0, 0.0)
    return sure * np.array([0.9, 0.05, 0.05]) + (1 - sure) * np.array([0.4, 0.35, 0.25])


def _m1(batch: np.ndarray) -> np.ndarray:
    out = np.tile([0.1, 0.2, 0.7], (len(batch), 1))
    out[batch[:, 1] > 100] = np.nan  # garbage scores for these rows: m0's answer stands, flagged
    return out


@pytest.fixture(scope="module")
def server(toy_profile: Profile) -> Iterator[Server]:
    models = ModelConfig({"m0": _m0, "m1": _m1}, InputSpec("input", "FP32", (-1, 2)))
    opts = RuntimeOptions(max_in_flight=64)
    with serving(toy_profile, models=models, backend=LocalBackend(), runtime_options=opts) as s:
        yield s


# kind -> (rows builder, the statuses it may get)
KINDS: dict[str, tuple[str, set[int]]] = {
    "good": ("rows", {200, 503}),  # 503 only when admission is full at that instant
    "nan": ("rows", {400}),
    "raises": ("rows", {500, 503}),  # every row raises alone; rows batched with it are unaffected
    "garbage": ("rows", {200, 503}),  # unsure at m0, NaN at m1: m0's answer, flagged
    "too_many": ("rows", {413}),
    "malformed": ("raw", {400}),
    "wrong_shape": ("rows", {400}),
    "unknown_model": ("rows", {404}),
}


def _request(kind: str, n: int) -> tuple[str, bytes]:
    rows: list[list[float]]
    if kind == "good":
        rows = [[0.9 if i % 2 else 0.2, 0.0] for i in range(n)]
    elif kind == "nan":
        rows = [[0.9, 0.0]] * (n - 1) + [[float("nan"), 0.0]]
    elif kind == "raises":
        rows = [[0.9, -1000.0]] * n
    elif kind == "garbage":
        rows = [[0.2, 1000.0]] * n
    elif kind == "too_many":
        rows = [[0.9, 0.0]] * 65
    elif kind == "malformed":
        return "toy", b'{"inputs": [ {"name": '
    elif kind == "wrong_shape":
        return "toy", json.dumps(
            {"inputs": [{"name": "input", "datatype": "FP32", "shape": [n, 3], "data": [0.0] * (3 * n)}]}
        ).encode()
    else:
        return "nope", json.dumps({"inputs": []}).encode()
    body = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [len(rows), 2], "data": rows}]}
    return "toy", json.dumps(body).encode()


@settings(
    max_examples=15,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    phases=(Phase.explicit, Phase.reuse, Phase.generate),  # no shrinking: each example is a burst of real HTTP
)
@given(st.lists(st.tuples(st.sampled_from(sorted(KINDS)), st.integers(1, 8)), min_size=1, max_size=25))
def test_every_request_gets_exactly_one_response_and_nothing_stays_in_flight(
    server: Server, seq: list[tuple[str, int]]
) -> None:
    before = httpx.get(f"{server.url}/metrics").text

    async def send_all() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as client:
            tasks = []
            for kind, n in seq:
                model, body = _request(kind, n)
                tasks.append(
                    client.post(
                        f"{server.url}/v2/models/{model}/infer",
                        content=body,
                        headers={"content-type": "application/json"},
                    )
                )
            return list(await asyncio.gather(*tasks))

    responses = asyncio.run(send_all())
    assert len(responses) == len(seq)
    for (kind, _), r in zip(seq, responses, strict=True):
        assert r.status_code in KINDS[kind][1], (kind, r.status_code, r.text)
        if r.status_code == 200:
            body = r.json()
            assert body["parameters"]["fallback"] is (kind == "garbage")
    after = httpx.get(f"{server.url}/metrics").text
    admitted = metric(after, "cascadeserve_admitted_total") - metric(before, "cascadeserve_admitted_total")
    answered = metric(after, "cascadeserve_answered_total") - metric(before, "cascadeserve_answered_total")
    assert admitted == answered
    assert metric(after, "cascadeserve_duplicate_answers_refused_total") == 0
    assert server.app.runtime.in_flight == 0
