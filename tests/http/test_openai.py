"""OpenAI's API in front of a generative cascade, over a real uvicorn server on 127.0.0.1, with the official
``openai`` client (streaming and not) and raw HTTP for the refusals.

The two stages here are small generative functions (the real LLM stages are served in tests/models/test_llm*.py):
``draft`` is sure of prompts that end with "?" and answers them in upper case; ``expert`` answers everything,
reversed. The cascade's threshold (0.5) decides which answers, exactly as for a classifier's margin.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from tests.http.http_helpers import serving

from cascadeserve.cascade import Cascade
from cascadeserve.http import Server
from cascadeserve.models.base import Generated, TextOutput
from cascadeserve.plan import SLO, Device, fixed_plan
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve
from cascadeserve.runtime import InputSpec, ModelConfig

openai = pytest.importorskip("openai")


def _prompts(batch: Any) -> list[str]:
    return [json.loads(x)["prompt"] for x in batch]


def draft(batch: Any) -> Generated:
    ps = _prompts(batch)
    outs = tuple(TextOutput(p.upper(), len(p.split()), len(p.split())) for p in ps)
    return Generated(outs, np.array([0.9 if p.endswith("?") else 0.1 for p in ps]))


def expert(batch: Any) -> Generated:
    ps = _prompts(batch)
    return Generated(tuple(TextOutput(p[::-1], len(p.split()), 3) for p in ps), np.ones(len(ps)))


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    curve = RuntimeCurve((1, 8), (1.0, 2.0))
    models = [ModelProfile("draft", 1.0, curve), ModelProfile("expert", 1.0, curve)]
    labels = np.zeros(4, dtype=np.int64)
    scores = {m.name: np.tile([0.6, 0.4], (4, 1)) for m in models}
    profile = Profile.from_scores("chat", models, labels, scores)
    plan = fixed_plan(
        profile,
        Cascade(("draft", "expert"), (0.5,)),
        (Device(name="d0", memory_mb=10),),
        slo=SLO(kind="p95_ms", value=500),
    )
    config = ModelConfig({"draft": draft, "expert": expert}, InputSpec(name="prompt", datatype="BYTES", shape=(-1,)))
    with serving(profile, plan, models=config, max_in_flight=64, name="chat") as s:
        yield s


def _client(server: Server) -> Any:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=60)


def test_the_official_client_gets_the_answering_stages_text(server: Server) -> None:
    client = _client(server)
    assert [m.id for m in client.models.list().data] == ["chat"]
    sure = client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "is it ok?"}])
    assert sure.choices[0].message.content == "IS IT OK?" and sure.choices[0].finish_reason == "stop"
    assert sure.model_extra is not None
    assert sure.model_extra["cascade"]["model"] == "draft" and sure.model_extra["cascade"]["escalations"] == 0
    assert sure.usage is not None and sure.usage.prompt_tokens == 3 and sure.usage.total_tokens == 6
    raw = client.chat.completions.with_raw_response.create(
        model="chat", messages=[{"role": "user", "content": "tell me"}]
    )
    assert raw.headers["x-cascade-model"] == "expert" and raw.headers["x-cascade-escalations"] == "1"
    unsure = raw.parse()
    assert unsure.choices[0].message.content == "em llet"
    legacy = client.completions.create(model="chat", prompt="why?")
    assert legacy.choices[0].text == "WHY?"


def test_streaming_releases_only_the_answering_stages_text(server: Server) -> None:
    client = _client(server)
    stream = client.chat.completions.create(
        model="chat",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "two words"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    # a conversation is one prompt of labelled lines; the draft is unsure of it, so only the expert's text streams
    assert text == "system: be brief\nuser: two words"[::-1]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": "chat", "messages": []}, 400, "messages"),
        ({"model": "chat", "messages": [{"role": "user", "content": ""}]}, 400, "messages"),
        ({"model": "chat", "messages": [{"role": "robot", "content": "hi"}]}, 400, "messages"),
        ({"model": "chat", "messages": [{"role": "user", "content": "hi"}], "n": 2}, 400, "n"),
        ({"model": "chat", "messages": [{"role": "user", "content": "hi"}], "temperature": 2.5}, 400, "temperature"),
        ({"model": "chat", "messages": [{"role": "user", "content": "hi"}], "top_p": 0}, 400, "top_p"),
        (
            {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "presence_penalty": 3},
            400,
            "presence_penalty",
        ),
        ({"model": "chat", "messages": [{"role": "user", "content": "hi"}], "tools": []}, 400, "tools"),
        (
            {
                "model": "chat",
                "messages": [{"role": "user", "content": "hi"}],
                "response_format": {"type": "json_object"},
            },
            400,
            "response_format",
        ),
        ({"model": "chat", "messages": [{"role": "user", "content": "hi"}], "logit_bias": {"1": 5}}, 400, "logit_bias"),
        ({"model": "chat", "messages": [{"role": "user", "content": "hi"}], "top_k": 5}, 400, "top_k"),
        ({"model": "chat", "messages": [{"role": "user", "content": "hi"}], "stop": ["\n"] * 17}, 400, "stop"),
        ({"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, 400, "max_tokens"),
        ({"model": "other", "messages": [{"role": "user", "content": "hi"}]}, 404, "model"),
        ({"model": "chat", "messages": [{"role": "user", "content": "x" * 40_000}]}, 413, "messages"),
        ({"messages": [{"role": "user", "content": "hi"}]}, 400, "model"),
        ({"model": "chat", "messages": [{"role": "user", "content": "hi"}], "logprobs": 3}, 400, "logprobs"),
        (
            {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": 9},
            400,
            "top_logprobs",
        ),
        (
            {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "logprobs": True, "stream": True},
            400,
            "logprobs",
        ),
    ],
)
def test_bad_requests_name_the_field(server: Server, body: dict[str, Any], status: int, param: str) -> None:
    r = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"]


def test_echo_and_prompt_lists_are_checked(server: Server) -> None:
    for body, param in (
        ({"echo": "yes", "max_tokens": 0}, "echo"),
        ({"echo": True, "max_tokens": 1, "stream": True}, "echo"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"best_of": 2}, "best_of"),
        ({"prompt": ["a", [1, 2]]}, "prompt"),
        ({"prompt": [-1, 2]}, "prompt"),
        ({"prompt": []}, "prompt"),
    ):
        doc = {"model": "chat", "prompt": "hi", **body}
        r = httpx.post(f"{server.url}/v1/completions", json=doc, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    # several prompts: one request each through the cascade, one choice each (with the stage that answered it)
    r = httpx.post(f"{server.url}/v1/completions", json={"model": "chat", "prompt": ["why?", "no"]}, timeout=30)
    choices = r.json()["choices"]
    assert [c["text"] for c in choices] == ["WHY?", "on"]
    assert [c["cascade"]["model"] for c in choices] == ["draft", "expert"]


def test_malformed_json_and_nothing_leaks(server: Server) -> None:
    r = httpx.post(f"{server.url}/v1/chat/completions", content=b"{not json", timeout=30)
    assert r.status_code == 400 and "not JSON" in r.json()["error"]["message"]
    assert server.app.runtime.in_flight == 0
