"""The request gate (http/limits.py) on every route, over real uvicorn servers on 127.0.0.1: bodies over
``--max-body-bytes`` get 413 before they are read (Content-Length) or as soon as they pass it (chunked), JSON nested
too deeply or holding too many elements is a 400 naming the problem (never a RecursionError's 500), a text request
is bounded in prompt, tokens and options, a ``BYTES`` row must be text, and a model's exception text never reaches
the client: it is in the server log under the request id the answer gives.

Two servers: ``toy`` (emulated, sample ids, behind the model repository so its load route is the real one) and
``chat`` (a generative cascade of two small functions taking ``BYTES`` prompts; ``draft`` raises on "boom")."""

from __future__ import annotations

import json
import logging
import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from tests.conftest import make_toy_profile
from tests.http.http_helpers import ADMIN, ADMIN_TOKEN, serving, toy_plan

from cascadeserve.cascade import Cascade
from cascadeserve.http import Server, ServerOptions, build_app
from cascadeserve.http.limits import MAX_OPTIONS, MAX_TOKENS
from cascadeserve.http.server import with_repository
from cascadeserve.models.base import Generated, TextOutput
from cascadeserve.plan import SLO, Device, fixed_plan
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve
from cascadeserve.runtime import InputSpec, ModelConfig, RuntimeOptions
from cascadeserve.workload.repository import ModelRepository, repository_builder

LIMIT = 8 << 20  # serve's default --max-body-bytes
SECRET = "secret-4711"


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    prof = make_toy_profile()
    opts = ServerOptions(max_body_bytes=LIMIT, stop_grace_s=2.0, admin_token=ADMIN_TOKEN)
    runtime = RuntimeOptions(max_in_flight=4096)
    app = build_app(prof, toy_plan(prof), emulate=True, name="toy", runtime_options=runtime, server_options=opts)
    repo = ModelRepository(tmp_path_factory.mktemp("repository"))
    app = with_repository(app, opts, repository_builder(repo, runtime_options=runtime, server_options=opts))
    server = Server(app, "127.0.0.1", 0, grace_s=2.0).start()
    try:
        yield server
    finally:
        server.stop()


def _prompts(batch: Any) -> list[str]:
    return [json.loads(x)["prompt"] if str(x).startswith("{") else str(x) for x in batch]


def draft(batch: Any) -> Generated:
    ps = _prompts(batch)
    for p in ps:
        if "boom" in p:
            raise ValueError(f"cannot read {p!r}")  # the input in the exception's text, as real models do
    return Generated(tuple(TextOutput(p.upper(), 1, 1) for p in ps), np.full(len(ps), 0.9))


def expert(batch: Any) -> Generated:
    ps = _prompts(batch)
    return Generated(tuple(TextOutput(p[::-1], 1, 1) for p in ps), np.ones(len(ps)))


@pytest.fixture(scope="module")
def chat() -> Iterator[Server]:
    curve = RuntimeCurve((1, 8), (1.0, 2.0))
    models = [ModelProfile("draft", 1.0, curve), ModelProfile("expert", 1.0, curve)]
    profile = Profile.from_scores(
        "chat", models, np.zeros(4, dtype=np.int64), {m.name: np.tile([0.6, 0.4], (4, 1)) for m in models}
    )
    devices = (Device(name="d0", memory_mb=10),)
    plan = fixed_plan(profile, Cascade(("draft", "expert"), (0.5,)), devices, slo=SLO(kind="p95_ms", value=500))
    config = ModelConfig({"draft": draft, "expert": expert}, InputSpec(name="prompt", datatype="BYTES", shape=(-1,)))
    with serving(profile, plan, models=config, max_in_flight=64, name="chat", max_body_bytes=LIMIT) as s:
        yield s


def _message(r: httpx.Response) -> str:
    err = r.json()["error"]
    return str(err["message"] if isinstance(err, dict) else err)


# -- size ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/toy/predict", "/toy/update", "/v2/models/toy/feedback"])
def test_a_12_mb_body_is_413_and_never_read(toy: Server, path: str) -> None:
    big = b'{"input": 0, "label": 1, "id": "x", "pad": "' + b"x" * (12 << 20) + b'"}'
    r = httpx.post(f"{toy.url}{path}", content=big, timeout=60)
    assert r.status_code == 413 and str(LIMIT) in r.json()["error"], r.text
    # Content-Length over the limit: the answer comes before a byte of the body is sent
    with socket.create_connection(("127.0.0.1", toy.port), timeout=20) as sock:
        head = f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {len(big)}\r\n\r\n"
        sock.sendall(head.encode())
        assert sock.recv(65536).startswith(b"HTTP/1.1 413 ")
    # chunked: the read stops once past the limit, with the rest of the body still to come
    with socket.create_connection(("127.0.0.1", toy.port), timeout=20) as sock:
        head = f"POST {path} HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
        sock.sendall(head.encode())
        chunk = b"x" * (1 << 20)
        for _ in range(9):
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        assert sock.recv(65536).startswith(b"HTTP/1.1 413 ")
    assert httpx.post(f"{toy.url}/toy/predict", json={"input": 0}, timeout=30).status_code == 200


# -- JSON shape ------------------------------------------------------------------------------------------------

DEEP = [
    b"[" * 100_000,
    b'{"a":' * 100_000,
    b"[" * 990 + b"]" * 990,
    b'{"input": ' + b"[" * 70 + b"0" + b"]" * 70 + b"}",
]


@pytest.mark.parametrize(
    "path",
    ["/toy/predict", "/toy/update", "/v2/models/toy/feedback", "/v1/chat/completions", "/v1/completions",
     "/v2/repository/models/more/load"],
)  # fmt: skip
def test_deeply_nested_json_is_400_naming_the_depth(toy: Server, path: str) -> None:
    for body in DEEP:
        r = httpx.post(f"{toy.url}{path}", content=body, headers=ADMIN, timeout=60)
        assert r.status_code == 400, (path, body[:12], r.text[:300])
        assert "nested deeper than 64 levels" in _message(r), r.text[:300]


def test_too_many_elements_is_400_and_ordinary_json_passes(toy: Server) -> None:
    many = b'{"ids": [' + b"1," * 1_000_001 + b'1], "labels": []}'
    r = httpx.post(f"{toy.url}/v2/models/toy/feedback", content=many, timeout=60)
    assert r.status_code == 400 and "more than 1000000 elements" in r.json()["error"], r.text[:300]
    # brackets inside strings are text, not nesting
    fine = json.dumps({"input": 3, "context": "[" * 200 + '\\"{' * 100})
    assert httpx.post(f"{toy.url}/toy/predict", content=fine, timeout=30).status_code == 200
    # a load's config string is JSON too, and held to the same depth
    config = {"parameters": {"config": "[" * 5000}}
    r = httpx.post(f"{toy.url}/v2/repository/models/more/load", json=config, headers=ADMIN, timeout=30)
    assert r.status_code == 400 and "parameters.config" in r.json()["error"], r.text


# -- text requests ---------------------------------------------------------------------------------------------

HI = [{"role": "user", "content": "hi?"}]


@pytest.mark.parametrize(
    ("extra", "status", "param"),
    [
        ({"max_tokens": 2**70}, 400, "max_tokens"),
        ({"max_completion_tokens": MAX_TOKENS + 1}, 400, "max_completion_tokens"),
        ({"options": [f"o{i}" for i in range(10_000)]}, 400, "options"),
        ({"options": ["yes", "n" * (1 << 20)]}, 413, "options"),
    ],
)
def test_openai_bounds_name_the_field(chat: Server, extra: dict[str, Any], status: int, param: str) -> None:
    r = httpx.post(f"{chat.url}/v1/chat/completions", json={"model": "chat", "messages": HI, **extra}, timeout=30)
    assert r.status_code == status, r.text[:300]
    assert r.json()["error"]["param"] == param and param in r.json()["error"]["message"]
    ok = {"model": "chat", "messages": HI, "max_tokens": MAX_TOKENS, "options": ["a"] * MAX_OPTIONS}
    assert httpx.post(f"{chat.url}/v1/chat/completions", json=ok, timeout=30).status_code == 200


def _v2_text(rows: list[str]) -> dict[str, Any]:
    return {"inputs": [{"name": "prompt", "datatype": "BYTES", "shape": [len(rows)], "data": rows}]}


def test_v2_items_are_held_to_the_same_bounds(chat: Server) -> None:
    url = f"{chat.url}/v2/models/chat/infer"
    cases = {
        json.dumps({"prompt": "hi?", "options": ["a"] * 10_000}): (400, "row[1].options"),
        json.dumps({"prompt": "hi?", "max_new_tokens": 2**70}): (400, "row[1].max_new_tokens"),
        json.dumps({"prompt": "x" * 40_000}): (413, "row[1].prompt"),
        json.dumps({"prompt": "hi?", "options": ["only one"]}): (400, "'options' must be"),
    }
    for row, (status, named) in cases.items():
        r = httpx.post(url, json=_v2_text(["fine?", row]), timeout=30)
        assert r.status_code == status and named in r.json()["error"], (row[:60], r.text[:300])
    assert httpx.post(url, json=_v2_text(["plain text?", '{"prompt": "an item?"}']), timeout=30).status_code == 200


@pytest.mark.parametrize(
    "body",
    [{"input": 5}, {"input": {"a": 1}}, {"input_batch": [["a", "b"], ["c"]]}, {"input_batch": [["a"], "b"]},
     {"input_batch": ["a", 2]}],
)  # fmt: skip
def test_clipper_refuses_what_is_not_text_naming_the_field(chat: Server, body: dict[str, Any]) -> None:
    r = httpx.post(f"{chat.url}/chat/predict", json=body, timeout=30)
    assert r.status_code == 400, r.text[:300]
    assert r.json()["error"].startswith(next(iter(body))) and "expected text" in r.json()["error"], r.text
    assert httpx.post(f"{chat.url}/chat/predict", json={"input_batch": ["a?", "b?"]}, timeout=30).status_code == 200


# -- a model's failure -----------------------------------------------------------------------------------------

_ID = re.compile(r"request id ([0-9a-f]{12}); see the server log")


def test_a_models_exception_text_stays_in_the_server_log(chat: Server, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="cascadeserve.http")
    calls = [
        ("/v2/models/chat/infer", _v2_text([f"boom {SECRET}"])),
        ("/v1/chat/completions", {"model": "chat", "messages": [{"role": "user", "content": f"boom {SECRET}"}]}),
        ("/chat/predict", {"input": f"boom {SECRET}"}),
    ]
    for path, body in calls:
        r = httpx.post(f"{chat.url}{path}", json=body, timeout=30)
        assert r.status_code == 500, r.text
        assert SECRET not in r.text and "cannot read" not in r.text, r.text
        message = _message(r)
        assert "model 'draft' failed on this request" in message, message
        found = _ID.search(message)
        assert found is not None, message
        deadline = time.monotonic() + 10
        while not any(found.group(1) in m and SECRET in m for m in caplog.messages):
            assert time.monotonic() < deadline, caplog.messages
            time.sleep(0.01)
    assert chat.app.runtime.in_flight == 0
